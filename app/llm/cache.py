"""The model cache: GGUF files converted once into a safetensors folder.

Loading a GGUF with transformers dequantizes every tensor in Python (about
20 s for SmolLM2-135M on two cores); loading the same weights from safetensors
takes well under a second. So the first use of a GGUF source converts it into

    <cache_dir>/<slug>/
        config.json  generation_config.json  model.safetensors   (float32)
        tokenizer.json  tokenizer_config.json  chat_template.jinja
        dpicl_cache.json                                          (manifest, written last)

a plain transformers folder that ``AutoModelForCausalLM.from_pretrained`` and
``vllm serve <folder>`` can read.

Safety: the folder is built under a temporary name inside ``cache_dir`` and
renamed into place (atomic on one filesystem), so a crash never leaves a half
cache; a file lock (``<cache_dir>/.<slug>.lock``) makes concurrent first uses,
in threads or processes, convert once. Before the rename the saved copy is
reloaded and its logits compared with the GGUF model's (tied embeddings are
the usual way this goes wrong).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import ModelLoadError

log = logging.getLogger(__name__)

CONVERTER_VERSION = 1
MANIFEST = "dpicl_cache.json"
_PROBE_TEXT = "<|im_start|>user\nThe capital of France is<|im_end|>\nParis, Lyon, Technology 123"


def _fingerprint(sources: list[Path]) -> dict[str, Any]:
    return {
        "converter_version": CONVERTER_VERSION,
        "sources": [{"name": p.name, "size": p.stat().st_size} for p in sources],
    }


def _is_valid(folder: Path, fingerprint: dict[str, Any]) -> bool:
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return manifest.get("fingerprint") == fingerprint and (folder / "config.json").is_file()


def ensure_gguf_converted(
    sources: list[Path],
    cache_dir: Path,
    slug: str,
    *,
    verify: bool = True,
    lock_timeout: float = 900.0,
) -> Path:
    """Return ``cache_dir/slug``, converting the GGUF (one file, or chunks joined in order) if needed."""
    from filelock import FileLock, Timeout

    for p in sources:
        if not p.is_file():
            raise ModelLoadError(f"GGUF file {p} does not exist")
    fingerprint = _fingerprint(sources)
    final = cache_dir / slug
    if _is_valid(final, fingerprint):
        return final
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ModelLoadError(f"cannot create model cache directory {cache_dir}: {e}") from e
    lock = FileLock(str(cache_dir / f".{slug}.lock"), timeout=lock_timeout)
    try:
        with lock:
            if _is_valid(final, fingerprint):  # another process converted it while we waited
                return final
            _convert(sources, cache_dir, slug, fingerprint, verify=verify)
    except Timeout as e:
        raise ModelLoadError(f"timed out waiting for the lock {lock.lock_file} held by another conversion") from e
    return final


def _convert(sources: list[Path], cache_dir: Path, slug: str, fingerprint: dict[str, Any], *, verify: bool) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    final = cache_dir / slug
    tmp = Path(tempfile.mkdtemp(prefix=f".{slug}.tmp-", dir=cache_dir))
    t0 = time.perf_counter()
    log.info("converting GGUF %s into %s (first use; later loads read safetensors)", sources[0].name, final)
    try:
        if len(sources) == 1:
            gguf_dir, gguf_name = sources[0].parent, sources[0].name
        else:  # chunks: join them next to the output, deleted below
            gguf_dir, gguf_name = tmp / "_gguf", "model.gguf"
            gguf_dir.mkdir()
            with open(gguf_dir / gguf_name, "wb") as out:
                for p in sources:
                    with open(p, "rb") as f:
                        shutil.copyfileobj(f, out, 1 << 24)
        out_dir = tmp / "model"
        try:
            with _one_gguf_reader():
                tokenizer = AutoTokenizer.from_pretrained(str(gguf_dir), gguf_file=gguf_name)
                model: Any = AutoModelForCausalLM.from_pretrained(str(gguf_dir), gguf_file=gguf_name,
                                                                  dtype=torch.float32)
        except Exception as e:  # re-raised with the file named
            raise ModelLoadError(f"transformers could not load GGUF {sources[0]}: {e}") from e
        model.eval()
        # The GGUF quantizer marks the model as not serializable; the weights are
        # already dequantized to float32, so dropping the marker is enough.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(str(out_dir))
        tokenizer.save_pretrained(str(out_dir))
        if verify:
            _verify_copy(model, tokenizer, out_dir)
        del model
        manifest = {
            "fingerprint": fingerprint,
            "source": [str(p) for p in sources],
            "created_unix": time.time(),
            "convert_seconds": round(time.perf_counter() - t0, 2),
            "dtype": "float32",
        }
        (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=2))
        _fsync_dir(out_dir)
        old = None
        if final.exists():  # stale (other source or converter version): swap it out
            old = cache_dir / f".{slug}.old-{os.getpid()}-{int(time.time())}"
            os.rename(final, old)
        os.rename(out_dir, final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        log.info("converted %s in %.1f s", final, time.perf_counter() - t0)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


_READER_LOCK = threading.Lock()


@contextlib.contextmanager
def _one_gguf_reader() -> Iterator[None]:
    """Within one conversion, one ``gguf.GGUFReader`` per file. For an architecture that transformers'
    own GGUF reader does not cover (Gemma 3), it parses the file with ``gguf.GGUFReader`` three
    times: for the tokenizer's config, for the model's config and for the tensors; each parse walks
    the whole metadata (Gemma 3 270M: a 262,144-entry vocabulary, about 16 s on one core). The
    reader is read-only (a memmap of the file), so the second and third parse would build an equal
    object: Gemma 3 270M's converted files are byte-identical with and without this (measured: every
    file but the manifest's times; tests/llm/test_gemma.py's cold-cache load 61 -> 37 s at load 3,
    the conversion alone 141 -> 121 s at load 4.6). The lock serialises
    conversions of different models in threads, which would otherwise swap the module attribute
    under each other."""
    import gguf

    with _READER_LOCK:
        real = gguf.GGUFReader
        readers: dict[tuple[str, Any], Any] = {}

        def once(path: Any, mode: Any = "r") -> Any:
            key = (os.path.realpath(os.fspath(path)), mode)
            if key not in readers:
                readers[key] = real(path, mode)
            return readers[key]

        setattr(gguf, "GGUFReader", once)
        try:
            yield
        finally:
            setattr(gguf, "GGUFReader", real)


def _verify_copy(model: Any, tokenizer: Any, out_dir: Path, atol: float = 1e-4) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    copy: Any = AutoModelForCausalLM.from_pretrained(str(out_dir), dtype=torch.float32)
    copy.eval()
    ids = torch.tensor([tokenizer(_PROBE_TEXT, add_special_tokens=False).input_ids])
    with torch.no_grad():
        a = model(input_ids=ids).logits
        b = copy(input_ids=ids).logits
    diff = float((a - b).abs().max())
    if not diff <= atol:
        raise ModelLoadError(
            f"the converted safetensors copy does not reproduce the GGUF model's logits "
            f"(max abs difference {diff:.3g} > {atol}); tied embeddings or a dropped tensor?"
        )


def _fsync_dir(folder: Path) -> None:
    # Make the files durable before the rename publishes them.
    for p in folder.iterdir():
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())
