"""Helpers for the model-layer tests. The ``lm`` and ``embedder`` fixtures come from tests/conftest.py."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

# Prompts shaped like the service's: a chat header + instruction that every
# partition prompt repeats, then a different tail.
INSTRUCTION = "Classify the topic of the news article as World, Sports, Business or Technology. Answer with one word."
TAILS = [
    "Article: Stocks rallied after the central bank held rates.\nTopic:",
    "Article: The team won the championship after a long season of hard work and dedication by every player.\nTopic:",
    "Article: New chip doubles battery life.\nTopic:",
    "Article: Elections were held in three countries on Sunday, with turnout above seventy percent in each.\nTopic:",
]


def chat_prompt(lm, tail: str) -> str:
    return lm.apply_chat_template(
        [{"role": "system", "content": INSTRUCTION}, {"role": "user", "content": tail}]
    )


@pytest.fixture(scope="session")
def header_prompts(lm) -> list[str]:
    return [chat_prompt(lm, t) for t in TAILS]


@pytest.fixture(scope="session")
def mixed_prompts(header_prompts) -> list[str]:
    """8 prompts of mixed lengths: 4 sharing a long chat header, 4 unrelated (1 to ~25 tokens)."""
    return header_prompts + [
        "Hi",
        "The capital of France is",
        "One two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen",
        "def fibonacci(n):\n    return",
    ]


@contextlib.contextmanager
def prefix_reuse(lm, enabled: bool, clear: bool = True):
    """Temporarily switch prefix reuse (the ``lm`` fixture is shared by the whole session)."""
    old = lm.prefix_reuse
    lm.prefix_reuse = enabled
    if clear:
        lm.clear_prefix_cache()
    try:
        yield lm
    finally:
        lm.prefix_reuse = old


def reference_next_logprobs(lm, token_ids: list[int]) -> np.ndarray:
    """A plain, unbatched, cache-free transformers forward pass: log p(next | token_ids)."""
    with torch.inference_mode():
        logits = lm.model(input_ids=torch.tensor([token_ids])).logits[0, -1]
    return torch.log_softmax(logits.double(), dim=-1).numpy()


def model_folder(lm) -> str:
    """The folder the bundled model was loaded from (its converted cache: config and tokenizer files)."""
    return str(lm.model.name_or_path)
