"""Fixtures for the mechanism tests that use the real bundled model."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def one_thread():
    """torch on one thread while these tests run: on a shared 2-core machine two OpenMP threads
    contend with the other processes (measured 4-8x slower); restored afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class CountingLM:
    """Delegates to a real model and records each scoring call's batch size."""

    def __init__(self, lm) -> None:
        self._lm = lm
        self.calls: list[tuple[str, int]] = []

    def continuation_logprobs(self, prompts, continuations):
        self.calls.append(("continuation_logprobs", len(prompts)))
        return self._lm.continuation_logprobs(prompts, continuations)

    def next_token_logprobs(self, prompts):
        self.calls.append(("next_token_logprobs", len(prompts)))
        return self._lm.next_token_logprobs(prompts)

    def __getattr__(self, name):
        return getattr(self._lm, name)


@pytest.fixture(scope="module")
def task():
    from app.icl import load_bundled

    return load_bundled()
