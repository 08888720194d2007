"""Renyi divergences of discrete distributions given in log space (ICLInf Def. C.1, Eq. 5-6).

    D_alpha(P || Q) = 1/(alpha-1) log sum_x P(x)^alpha Q(x)^(1-alpha)
                    = 1/(alpha-1) logsumexp_x(alpha log P(x) + (1-alpha) log Q(x))

(Eq. 5 with the expectation over Q written out). Vectorised over leading axes;
the last axis is the outcome space. Log space keeps the full-vocabulary case
(probabilities down to 1e-40) exact.
"""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp

__all__ = ["log_normalize", "max_abs_log_ratio", "renyi_divergence", "renyi_symmetric"]


def log_normalize(logits: np.ndarray) -> np.ndarray:
    """log softmax over the last axis, in float64."""
    a = np.asarray(logits, dtype=np.float64)
    return a - logsumexp(a, axis=-1, keepdims=True)


def renyi_divergence(log_p: np.ndarray, log_q: np.ndarray, alpha: float) -> np.ndarray:
    """D_alpha(P || Q) for alpha > 1 (ICLInf Eq. 5); ``+inf`` where P puts mass where Q has none."""
    a = float(alpha)
    if not a > 1.0 or not np.isfinite(a):
        raise ValueError(f"alpha must be a finite order > 1, got {alpha!r}")
    lp = np.asarray(log_p, dtype=np.float64)
    lq = np.asarray(log_q, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        # (1-alpha) log Q = +inf where Q = 0: the term is +inf if P > 0 there and 0 (excluded) if P = 0.
        terms = np.where(np.isneginf(lp), -np.inf, a * lp + (1.0 - a) * lq)
    d = logsumexp(terms, axis=-1) / (a - 1.0)
    return np.maximum(d, 0.0)  # >= 0 mathematically; clip rounding


def renyi_symmetric(log_p: np.ndarray, log_q: np.ndarray, alpha: float) -> np.ndarray:
    """D^<->_alpha(P || Q) = max(D_alpha(P||Q), D_alpha(Q||P)) (ICLInf Eq. 6)."""
    return np.maximum(renyi_divergence(log_p, log_q, alpha), renyi_divergence(log_q, log_p, alpha))


def max_abs_log_ratio(log_p: np.ndarray, log_q: np.ndarray) -> np.ndarray:
    """max_y |log P(y) - log Q(y)| over the last axis (the inner max of ICLInf Eq. 4); the D_inf view."""
    lp = np.asarray(log_p, dtype=np.float64)
    lq = np.asarray(log_q, dtype=np.float64)
    both_zero = np.isneginf(lp) & np.isneginf(lq)
    with np.errstate(invalid="ignore"):
        diff = np.where(both_zero, 0.0, np.abs(lp - lq))
    return diff.max(axis=-1)
