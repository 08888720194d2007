"""A tiny random-init language model for measuring the service path (issue 27).

``build_tiny_model(folder)`` writes a transformers folder that ``dpicl serve`` loads as a local
model source: SmolLM2-135M-Instruct's tokenizer and chat template (the bundled model's, converted
once into the model cache), and a Llama decoder of 2 layers, hidden size 64, randomly initialised
from a fixed seed. Its forward passes cost next to nothing on a CPU, so a benchmark against it
measures what the service does around the model (HTTP, validation, database, tokenizing, the
scheduler) rather than the model. Its answers are noise: never use it for anything but timing.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

# The tiny decoder's shape (everything else, vocabulary and rotary settings included, is SmolLM2's) and the
# files copied beside it: app/llm/tiny.py's, which builds the same model in memory for tests and gpu_check.
from app.llm.tiny import TINY, TOKENIZER_FILES

_TOKENIZER_FILES = tuple(f for f in TOKENIZER_FILES if f != "config.json")


def bundled_lm_folder(cache_dir: str | None = None) -> Path:
    """The converted bundled SmolLM2 folder (converted now if it is not in the cache yet)."""
    from app.llm.bundled import DEFAULT_LM, get_bundled, locate
    from app.llm.cache import ensure_gguf_converted

    cache = Path(os.path.expanduser(cache_dir or os.environ.get("DPICL_MODEL_CACHE_DIR")
                                    or "~/.cache/dpicl/models"))
    b = get_bundled(f"bundled:{DEFAULT_LM}")
    return Path(ensure_gguf_converted([locate(b)], cache, b.key))


def build_tiny_model(folder: str | os.PathLike[str], *, seed: int = 0, cache_dir: str | None = None) -> Path:
    """Write the tiny model (config, random weights, SmolLM2's tokenizer files) into ``folder``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    src = bundled_lm_folder(cache_dir)
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    with open(src / "config.json", encoding="utf-8") as f:
        base = json.load(f)
    keep = ("vocab_size", "bos_token_id", "eos_token_id", "pad_token_id", "max_position_embeddings",
            "rope_theta", "rope_parameters", "rms_norm_eps", "tie_word_embeddings", "hidden_act")
    cfg = LlamaConfig(**{k: base[k] for k in keep if k in base}, **TINY)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).eval()
    model.save_pretrained(out)
    for name in _TOKENIZER_FILES:
        if (src / name).is_file():
            shutil.copy(src / name, out / name)
    return out


def describe() -> str:
    shape = ", ".join(f"{k} {v}" for k, v in TINY.items())
    return (f"tiny model built at run time: random-init Llama ({shape}) with SmolLM2-135M-Instruct's tokenizer and "
            "chat template; it measures the service path, its answers are noise")
