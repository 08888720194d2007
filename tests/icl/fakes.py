"""A deterministic stand-in for ``app.llm.LanguageModel`` (fast unit tests, no weights)."""

from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np


def _unit(text: str) -> float:
    """A stable pseudo-random number in (0, 1) from a string."""
    h = hashlib.sha256(text.encode("utf-8")).digest()
    return (int.from_bytes(h[:8], "big") + 0.5) / 2**64


class FakeLM:
    """Scores ``continuation_logprobs(prompt, cont)`` as a fixed function of both strings.

    ``bias`` (continuation -> additive log-prob) lets a test plant a label
    prior that every prompt shares, which contextual calibration must remove.
    Records every call so tests can check batching.
    """

    name = "fake"

    def __init__(self, bias: dict[str, float] | None = None) -> None:
        self.bias = dict(bias or {})
        self.calls: list[tuple[list[str], list[str]]] = []

    def logprob(self, prompt: str, cont: str) -> float:
        return -8.0 * _unit(prompt + "\x00" + cont) - 0.5 * len(cont) + self.bias.get(cont, 0.0)

    def continuation_logprobs(self, prompts: Sequence[str], continuations: Sequence[str]) -> np.ndarray:
        if isinstance(prompts, str) or isinstance(continuations, str):
            raise TypeError("batched API: pass sequences")
        self.calls.append((list(prompts), list(continuations)))
        return np.array([[self.logprob(p, c) for c in continuations] for p in prompts], dtype=np.float64)

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        out = "".join(f"<|{m['role']}|>{m['content']}<|end|>\n" for m in messages)
        return out + ("<|assistant|>" if add_generation_prompt else "")

    def tokenize(self, text: str) -> list[int]:
        return [ord(c) for c in text]
