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


class SpySession:
    """A real decode session that counts its steps and whether it was closed."""

    def __init__(self, inner, rows: int):
        self.inner, self.rows, self.steps, self.closed = inner, rows, 0, False

    @property
    def logits(self):
        assert not self.closed, "logits read after close"
        return self.inner.logits

    def step(self, token: int):
        assert not self.closed, "stepped after close"
        self.steps += 1
        return self.inner.step(token)

    def close(self) -> None:
        self.closed = True
        self.inner.close()


class CountingLM:
    """Delegates to a real model and records each scoring call's batch size, and each decode session
    it opens (wrapped in :class:`SpySession`, in ``sessions``)."""

    def __init__(self, lm) -> None:
        self._lm = lm
        self.calls: list[tuple[str, int]] = []
        self.sessions: list[SpySession] = []

    def start_decode(self, prompts, *, reuse_prefix: bool = True):
        self.calls.append(("start_decode", len(prompts)))
        s = SpySession(self._lm.start_decode(prompts, reuse_prefix=reuse_prefix), len(prompts))
        self.sessions.append(s)
        return s

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
