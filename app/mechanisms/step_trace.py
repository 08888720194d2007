"""An in-process side channel of the token mechanisms' sampling laws, for white-box audits only.

Every private step of ``clip_softmax`` (ICLInf App. C, Algorithm 1) and ``poe`` decoding (PoEtry
Eq. 3 + exponential mechanism) draws its token by Gumbel-argmax over a score vector
a_t = statistic_t / temperature (clip_softmax: the mean clipped logits l(Z) over tau; poe: the summed
clipped log-probabilities U times lam, temperature 1/lam), -inf outside the public candidate set:
``clip_softmax.private_chooser``. ``mozo`` (DPS-MOZO / PMixED) draws from q ~ prod_i p~_i^(1/(E tau)), the
same Gumbel-argmax over the statistic (1/E) sum_i log p~_i (padding experts included) at temperature tau:
``mozo.trace_step``. A white-box auditor in this process (``app.audit``'s
``GenerationMechanismTarget``) needs the statistic to compute the likelihood of each released token
under the claimed temperature and under the alternatives' (``app.audit.gen_noise``).

The statistic is computed from the exemplars, so it never enters a result, the API internals, a log
or an artifact: :func:`collect` sets a context-local list around ONE mechanism call and
:func:`record` appends to it only while it is set (outside an audit it is unset: nothing is kept).
A ``ContextVar``: another thread (an API request, another job) starts with it unset and never
records into an audit's list. Nothing here is serialised; a remote target cannot offer it (its audit
stays black-box).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TokenStep:
    """One private step: the clean statistic (scores x temperature; -inf outside the candidates), the
    temperature the mechanism sampled at (its scores = statistic / temperature) and the released token."""

    statistic: np.ndarray
    temperature: float
    token: int


_TRACE: ContextVar[list[TokenStep] | None] = ContextVar("dpicl_token_step_trace", default=None)


@contextmanager
def collect() -> Iterator[list[TokenStep]]:
    """Collect the steps of the mechanism calls inside the block (this context only) into the list
    it yields; the collector is unset again afterwards, whatever happens."""
    steps: list[TokenStep] = []
    token = _TRACE.set(steps)
    try:
        yield steps
    finally:
        _TRACE.reset(token)


def active() -> bool:
    """Whether a collector is set in this context."""
    return _TRACE.get() is not None


def record(scores: np.ndarray, temperature: float, token: int) -> None:
    """Append one step where a collector is set (no-op, nothing kept, otherwise)."""
    steps = _TRACE.get()
    if steps is not None:
        s = np.asarray(scores, dtype=np.float64)
        steps.append(TokenStep(s * float(temperature), float(temperature), int(token)))


__all__ = ["TokenStep", "active", "collect", "record"]
