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
(app/llm/scheduler.py, ``app.llm.step_merge.run_steps``); a session opened with
``shared_steps=False`` always steps alone (its numbers then depend on its own
rows only, not on the batch shape). A session itself is not meant to be shared
between threads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence, Set
from typing import TYPE_CHECKING, Protocol, Self

import numpy as np
import torch

from .chunking import choose_tokens
from .tenancy import tenant_scope
from .types import Generation

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


def generate_from(session: DecodeSession, detokenize: Callable[[list[int]], str], eos_token_ids: Set[int], *,
                  max_new_tokens: int, temperature: float, top_p: float, stops: Sequence[str],
                  generator: torch.Generator, max_context: int | None) -> list[Generation]:
    """One :class:`Generation` per row of an open ``session`` (``max_new_tokens`` >= 1): each next
    token chosen greedily or sampled with ``generator`` (chunking.choose_tokens) and fed back, until
    EOS, a stop string, ``max_new_tokens`` or a full ``max_context``. Closes the session. The loop
    of ``HFLanguageModel.generate``, which checks the arguments and opens the session."""
    n = session.size
    out_ids: list[list[int]] = [[] for _ in range(n)]
    results: list[Generation | None] = [None] * n
    active = list(range(n))
    logits = session._logits_t
    for step in range(max_new_tokens):
        chosen = choose_tokens(logits, temperature, top_p, generator)
        lengths = session.lengths
        keep: list[int] = []
        for j, b in enumerate(active):
            t = chosen[j]
            out_ids[b].append(t)
            if t in eos_token_ids:
                results[b] = Generation(detokenize(out_ids[b][:-1]), out_ids[b], "stop")
                continue
            if stops:
                text = detokenize(out_ids[b])
                cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
                if cut >= 0:
                    results[b] = Generation(text[:cut], out_ids[b], "stop")
                    continue
            if lengths[j] + 1 > (max_context or 1 << 62):  # no room to feed t back
                results[b] = Generation(detokenize(out_ids[b]), out_ids[b], "length")
                continue
            keep.append(j)
        if not keep or step == max_new_tokens - 1:
            active = [active[j] for j in keep]
            break
        if len(keep) < len(active):
            session.keep(keep)
            chosen = [chosen[j] for j in keep]
            active = [active[j] for j in keep]
        logits = session._step_t(chosen)
    for b in active:
        results[b] = Generation(detokenize(out_ids[b]), out_ids[b], "length")
    session.close()
    return [r for r in results if r is not None]
