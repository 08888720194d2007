"""Random-init language models with a real tokenizer, for tests and benchmarks (no weights needed).

``random_lm(folder)`` builds an :class:`~app.llm.hf.HFLanguageModel` from the ``config.json``
and tokenizer files of a model folder (e.g. the bundled SmolLM2's converted cache folder, or
the few small files ``benchmarks/gpu_check.py --prepare`` copies), with random weights: the
real architecture (``tiny=False``: what a GPU benchmark times) or a 2-layer shrunken one
(``tiny=True``: costs ~nothing on a CPU). Its numbers mean nothing; its shapes, tokenizer,
chat template and code paths are the real ones.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from .types import ModelSpec

TOKENIZER_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                   "generation_config.json", "special_tokens_map.json")

TINY = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16}


def random_lm(folder: str | Path, *, tiny: bool = True, device: str = "cpu", dtype: torch.dtype = torch.float32,
              seed: int = 0, init_std: float | None = None, options: dict[str, Any] | None = None,
              name: str | None = None) -> Any:
    """An HFLanguageModel with ``folder``'s tokenizer and (possibly shrunken) architecture, random weights.

    ``init_std``: the weights' initialisation scale (default: the config's ``initializer_range``); a
    larger one gives sharper attention, which equality tests of masks need to be able to fail.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from .hf import HFLanguageModel

    folder = Path(folder)
    raw = json.loads((folder / "config.json").read_text())
    overrides: dict[str, Any] = dict(TINY) if tiny else {}
    if init_std is not None:
        overrides["initializer_range"] = init_std
    config = AutoConfig.from_pretrained(str(folder), **overrides)
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)  # type: ignore[no-untyped-call]
    model.to(device)
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    label = name or ("tiny-random-" if tiny else "random-") + str(raw.get("model_type", "lm"))
    spec = ModelSpec(name=label, kind="lm", source=f"random:{folder}", options=dict(options or {}))
    return HFLanguageModel(spec, model, tokenizer, device=device, dtype=dtype)
