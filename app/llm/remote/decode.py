"""Remote backend: :class:`RemoteDecodeSession`, the decode session interface over HTTP (no KV cache crosses it)."""

from __future__ import annotations

import copy
from collections.abc import Coroutine, Sequence
from typing import Any, Protocol

import numpy as np

from ..errors import CapabilityError
from ..tenancy import spend_work


class DecodeHost(Protocol):
    """What a session needs of its model (:class:`app.llm.remote.lm.RemoteLanguageModel` is one): a structural
    type, so this module does not import the model's (which imports this one)."""

    transport: Any
    _max_context: int | None

    @property
    def _label(self) -> str: ...

    def _salt(self, call_salt: str | None) -> dict[str, Any]: ...

    def _next_lp_rows(self, rows: list[list[int]], salt: dict[str, Any]) -> Coroutine[Any, Any, np.ndarray]: ...


class RemoteDecodeSession:
    """Same interface as :class:`app.llm.decode.DecodeSession`, over HTTP.

    ``logits`` are next-token log-probabilities (the raw logits shifted by a
    constant per row; see the module doc). Each step sends every live
    sequence again; one salt for the whole session lets the server reuse its
    prefix cache between steps.
    """

    def __init__(self, model: DecodeHost, rows: list[list[int]]):
        self._model = model
        self._tokens = [list(r) for r in rows]
        self._rows = list(range(len(rows)))
        self._salt = model._salt(None)
        self._open = True
        self._check_room()
        self._lp = self._fetch()

    def _check_room(self) -> None:
        limit = self._model._max_context
        if limit is not None and max(len(self._tokens[r]) for r in self._rows) > limit:
            raise CapabilityError(f"decoding past the max context {limit} of {self._model._label}")

    def _fetch(self) -> np.ndarray:
        rows = [self._tokens[r] for r in self._rows]
        return self._model.transport.run(self._model._next_lp_rows(rows, self._salt))

    @property
    def size(self) -> int:
        return len(self._rows)

    @property
    def rows(self) -> list[int]:
        return list(self._rows)

    @property
    def lengths(self) -> list[int]:
        return [len(self._tokens[r]) for r in self._rows]

    def token_ids(self, row: int) -> list[int]:
        return list(self._tokens[row])

    @property
    def logits(self) -> np.ndarray:
        """(s, V) float32 next-token log-probabilities (raw logits up to a per-row constant)."""
        return self._lp.copy()

    def logprobs(self) -> np.ndarray:
        return self._lp.copy()

    def step(self, tokens: int | Sequence[int]) -> np.ndarray:
        if not self._open:
            raise RuntimeError("decode session is closed")
        if isinstance(tokens, (int, np.integer)):
            tokens = [int(tokens)] * self.size
        tokens = [int(t) for t in tokens]
        if len(tokens) != self.size:
            raise ValueError(f"step needs {self.size} tokens (one per live sequence), got {len(tokens)}")
        vocab = self._lp.shape[1]
        for t in tokens:
            if not 0 <= t < vocab:
                raise ValueError(f"token id {t} outside the vocabulary [0, {vocab})")
        spend_work(len(tokens), "a decode step")  # one per live row, as the hf session counts it
        for r, t in zip(self._rows, tokens):
            self._tokens[r].append(t)
        self._check_room()
        self._lp = self._fetch()
        return self._lp.copy()

    def keep(self, live: Sequence[int]) -> None:
        if not self._open:
            raise RuntimeError("decode session is closed")
        live = list(live)
        self._lp = self._lp[live]
        self._rows = [self._rows[j] for j in live]

    def fork(self) -> RemoteDecodeSession:
        """An independent session at this one's point (no request: the server holds no per-session state)."""
        if not self._open:
            raise RuntimeError("decode session is closed")
        child = copy.copy(self)  # same model and salt (the server's prefix cache serves both)
        child._tokens = [list(t) for t in self._tokens]
        child._rows = list(self._rows)
        child._lp = self._lp.copy()
        return child

    def close(self) -> None:
        self._open = False

    def __enter__(self) -> RemoteDecodeSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
