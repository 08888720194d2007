"""Incremental decoding over ``s`` sequences with a KV cache.

The building block for token-by-token private decoding (clip each
sequence's logits, aggregate over the ``s`` sequences, choose one token, feed
it back to every sequence), and what :meth:`HFLanguageModel.generate` runs on::

    session = lm.start_decode(prompts)           # s prompts; shared prefix computed once
    logits = session.logits                      # (s, V) float32 raw next-token logits
    while ...:
        token = my_private_choice(logits)        # an int (same token for all) or s ints
        logits = session.step(token)             # append, one forward pass of s tokens
    session.close()

Logits are raw (before softmax; after a model's final soft-capping if any);
``session.logprobs()`` gives the log-softmax. Sessions from several threads
step safely at once: with the model's batch scheduler on, concurrent steps of
one tenant's sessions are queued and may be merged into one forward pass
(app/llm/scheduler.py, ``HFLanguageModel._run_steps``); a session opened with
``shared_steps=False`` always steps alone (its numbers then depend on its own
rows only, not on the batch shape). A session itself is not meant to be shared
between threads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, Self

import numpy as np
import torch

from .tenancy import tenant_scope

if TYPE_CHECKING:  # pragma: no cover
    from .kv import KVBatch


class StepModel(Protocol):
    """What a session needs from its model (``HFLanguageModel`` is one); decode does not import hf."""

    @property
    def vocab_size(self) -> int: ...

    def _decode_step(self, kv: KVBatch, tokens: Sequence[int], *, shared: bool = True) -> torch.Tensor: ...


class DecodeSession:
    def __init__(self, model: StepModel, kv: KVBatch, logits: torch.Tensor, prompts: list[list[int]], *,
                 tenant: str | None = None, shared_steps: bool = True):
        self._model = model
        self._tenant = tenant  # whose session: steps are queued in this tenant's scope
        self._shared = shared_steps
        self._kv: KVBatch | None = kv
        self._logits_t = logits  # (s, V) float32 torch
        self._tokens = [list(p) for p in prompts]
        self._rows = list(range(len(prompts)))  # original index of each live row

    @property
    def size(self) -> int:
        """Number of live sequences."""
        return len(self._rows)

    @property
    def rows(self) -> list[int]:
        """Original prompt index of each live sequence (changes after :meth:`keep`)."""
        return list(self._rows)

    @property
    def lengths(self) -> list[int]:
        """Token count (prompt + appended) of each live sequence."""
        return [len(self._tokens[r]) for r in self._rows]

    def token_ids(self, row: int) -> list[int]:
        """All token ids (prompt + appended) of original prompt ``row``."""
        return list(self._tokens[row])

    @property
    def logits(self) -> np.ndarray:
        """(s, V) float32 raw next-token logits for the live sequences."""
        return self._logits_t.cpu().numpy()

    def logprobs(self) -> np.ndarray:
        """(s, V) float32 next-token log-probabilities."""
        return torch.log_softmax(self._logits_t, dim=-1).cpu().numpy()

    def _step_t(self, tokens: Sequence[int]) -> torch.Tensor:
        if self._kv is None:
            raise RuntimeError("decode session is closed")
        if len(tokens) != self.size:
            raise ValueError(f"step needs {self.size} tokens (one per live sequence), got {len(tokens)}")
        vocab = self._model.vocab_size
        for t in tokens:
            if not 0 <= int(t) < vocab:
                raise ValueError(f"token id {t} outside the vocabulary [0, {vocab})")
        with tenant_scope(self._tenant):
            self._logits_t = self._model._decode_step(self._kv, tokens, shared=self._shared)
        for r, t in zip(self._rows, tokens):
            self._tokens[r].append(int(t))
        return self._logits_t

    def step(self, tokens: int | Sequence[int]) -> np.ndarray:
        """Append one token to every live sequence (an int: the same token to all); return the new (s, V) logits."""
        if isinstance(tokens, (int, np.integer)):
            tokens = [int(tokens)] * self.size
        return self._step_t([int(t) for t in tokens]).cpu().numpy()

    def keep(self, live: Sequence[int]) -> None:
        """Keep only live sequences at positions ``live`` (e.g. drop finished ones); frees their cache."""
        if self._kv is None:
            raise RuntimeError("decode session is closed")
        live = list(live)
        self._kv = self._kv.select(live)
        self._logits_t = self._logits_t[live]
        self._rows = [self._rows[j] for j in live]

    def fork(self) -> DecodeSession:
        """An independent session at this one's point: same live rows, tokens and logits, its own copy of
        the cache. Stepping either never moves the other. What it saves: the prompts' prefill, when one
        set of prompts is decoded several ways (a benchmark's epsilon sweep over the same partition)."""
        if self._kv is None:
            raise RuntimeError("decode session is closed")
        child = DecodeSession(self._model, self._kv.select(range(self.size)), self._logits_t.clone(), [],
                              tenant=self._tenant, shared_steps=self._shared)
        child._tokens = [list(t) for t in self._tokens]
        child._rows = list(self._rows)
        return child

    def close(self) -> None:
        self._kv = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
