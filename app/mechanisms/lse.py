"""``logsumexp`` of one score vector, scipy's arithmetic without scipy's per-call dispatch.

The token mechanisms' chooser (``clip_softmax.private_chooser``: each private step's log-probability)
and the white-box token evidence (``app.audit.gen_noise.observe_token``: five step laws per step) call
logsumexp on a short 1-D float64 vector once or more per decoded token. ``scipy.special.logsumexp``
spends ~0.1 ms a call on array-API dispatch (dtype promotion, ``at``-updates, the infinite-result
fallback), 80 % of a white-box token audit's simulation time. :func:`logsumexp1d` does the same
operations in the same order as scipy 1.17's ``_logsumexp`` (the copies m of the maximum taken out of
the sum, s = sum exp(x - max) over the rest, log1p(s / m) + log(m) + max, numpy's ufuncs on 1-element
arrays as scipy's keepdims reductions), so the result is bit-identical
(tests/mechanisms/test_lse.py); anything else (not a 1-D float64 vector, an empty one, a maximum that
is nan or infinite, a non-finite result) is handed to scipy itself.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import logsumexp


def logsumexp1d(x: np.ndarray) -> float:
    """``float(scipy.special.logsumexp(x))``, bit for bit, for a 1-D float64 array ``x``."""
    if not isinstance(x, np.ndarray) or x.ndim != 1 or x.dtype != np.float64 or x.size == 0:
        return float(logsumexp(x))
    top = x.max(keepdims=True)
    if not math.isfinite(top[0]):
        return float(logsumexp(x))
    at = x == top
    m = at.sum(keepdims=True, dtype=np.float64)  # the maximum's copies (scipy: the sum of the mask as floats)
    s = np.exp(np.where(at, -np.inf, x) - top).sum(keepdims=True)
    if s[0] != 0.0:
        s = s / m
    out = float((np.log1p(s) + np.log(m) + top)[0])
    return out if math.isfinite(out) else float(logsumexp(x))


def logsumexp_rows(x: np.ndarray) -> np.ndarray:
    """``logsumexp1d`` of each row of a 2-D float64 array in one pass (the same operations along axis 1:
    bit-identical to scipy's per row, tests/mechanisms/test_lse.py); other input goes row by row."""
    if not isinstance(x, np.ndarray) or x.ndim != 2 or x.dtype != np.float64 or x.shape[1] == 0:
        return np.array([logsumexp1d(np.asarray(r)) for r in x], dtype=np.float64)
    x = np.ascontiguousarray(x)
    top = x.max(axis=1, keepdims=True)
    if not np.isfinite(top).all():  # a row of nan, +inf or only -inf: scipy's own edge cases, row by row
        return np.array([logsumexp1d(r) for r in x], dtype=np.float64)
    at = x == top
    m = at.sum(axis=1, keepdims=True, dtype=np.float64)
    s = np.exp(np.where(at, -np.inf, x) - top).sum(axis=1, keepdims=True)
    s = np.where(s == 0.0, s, s / m)
    out = (np.log1p(s) + np.log(m) + top)[:, 0]
    for i in np.flatnonzero(~np.isfinite(out)):  # overflow: scipy's fallback
        out[i] = float(logsumexp(x[i]))
    return out


__all__ = ["logsumexp1d", "logsumexp_rows"]
