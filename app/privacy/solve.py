"""Root bracketing that always terminates: bisection on the bit patterns of non-negative doubles.

Non-negative IEEE-754 doubles are ordered like their bit patterns read as integers, so bisecting
the integer interval [bits(lo), bits(hi)] finds, for a monotone predicate, the exact float where
it flips in at most 64 evaluations, whatever the scale of the root: 5e-324 and 1e308 cost the
same. (A tolerance-based root-finder such as brentq with an absolute ``xtol`` stops far from a
root of 1e-19 and leaves a clean-up walk of unbounded length; this cannot.)

Only the end known to satisfy the predicate is ever returned, so a caller that encodes its
guarantee in the predicate (e.g. "delta(eps; mu) <= delta, rounding included") gets a value
that was checked, even if rounding makes the predicate non-monotone near the root.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import struct
from collections.abc import Callable, Iterator

MAX_FLOAT = 1.7976931348623157e308
MAX_STEPS = 64  # bits in a double: the bisection below never takes more


def _bits(x: float) -> int:
    return int(struct.unpack("<q", struct.pack("<d", x))[0])


def _float(i: int) -> float:
    return float(struct.unpack("<d", struct.pack("<q", i))[0])


def _check(lo: float, hi: float) -> None:
    if not (math.isfinite(lo) and math.isfinite(hi) and 0.0 <= lo < hi):
        raise ValueError(f"bisection bounds must satisfy 0 <= lo < hi < inf, got {lo!r}, {hi!r}")


def _flip(pred: Callable[[float], bool], lo: float, hi: float, at_lo: bool) -> tuple[int, int]:
    """Adjacent float bit patterns (a, b) in [lo, hi] with pred == at_lo at a and != at_lo at b, given that
    at lo and hi (the caller checks both ends). At most MAX_STEPS (64) evaluations of pred."""
    _check(lo, hi)
    a, b = _bits(lo), _bits(hi)
    for _ in range(MAX_STEPS):
        if b - a <= 1:
            break
        tick()
        m = (a + b) // 2
        if pred(_float(m)) == at_lo:
            a = m
        else:
            b = m
    return a, b


def largest_true(pred: Callable[[float], bool], lo: float, hi: float) -> float:
    """Largest float x in [lo, hi) found by bisection with pred(x) True, given pred(lo) True and
    pred(hi) False (the caller checks both ends). At most 64 evaluations of pred."""
    return _float(_flip(pred, lo, hi, True)[0])


def smallest_true(pred: Callable[[float], bool], lo: float, hi: float) -> float:
    """Smallest float x in (lo, hi] found by bisection with pred(x) True, given pred(lo) False and
    pred(hi) True (the caller checks both ends). At most 64 evaluations of pred."""
    return _float(_flip(pred, lo, hi, False)[1])


# ---------------------------------------------------------------------------
# Cooperative cancellation of long privacy computations
# ---------------------------------------------------------------------------

_CHECK: contextvars.ContextVar[Callable[[], None] | None] = contextvars.ContextVar("dpicl_privacy_check", default=None)


@contextlib.contextmanager
def checkpoints(check: Callable[[], None]) -> Iterator[None]:
    """Run ``check`` at every solver step inside the block (it raises to stop: a job's cancel or
    shutdown, a deadline). The solvers are bounded anyway; this makes a cancel take effect within
    one step instead of at the end of a calibration over a long order grid."""
    token = _CHECK.set(check)
    try:
        yield
    finally:
        _CHECK.reset(token)


def tick() -> None:
    """A solver step: run the active check, if any."""
    check = _CHECK.get()
    if check is not None:
        check()
