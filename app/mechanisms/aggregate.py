"""The private aggregators as pure functions of per-label scores (no model here).

Samplers take a generator and an optional ``size`` (many independent draws at
once, for audits and the statistical tests); exact output laws are given where
they have a closed form or a one-dimensional integral, so that a white-box
audit can compare neighbouring worlds without sampling.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
from scipy import integrate
from scipy.special import log_ndtr, logsumexp

Size = int | None
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def _as_scores(x: npt.ArrayLike, name: str = "scores") -> FloatArray:
    a = np.asarray(x, dtype=float)
    if a.ndim != 1 or a.size < 1:
        raise ValueError(f"{name} must be a non-empty 1-d array, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite")
    return a


def _shape(k: int, size: Size) -> tuple[int, ...]:
    return (k,) if size is None else (int(size), k)


# ---------------------------------------------------------------------------
# Votes and utilities
# ---------------------------------------------------------------------------


def votes_from_distributions(label_probs: npt.ArrayLike) -> FloatArray:
    """Clean vote histogram: each unit (row) votes the label of its highest probability
    (ties go to the lower label index, deterministically). Shape (T, K) -> (K,)."""
    p = np.asarray(label_probs, dtype=float)
    if p.ndim != 2:
        raise ValueError(f"label_probs must be (units, labels), got shape {p.shape}")
    top = np.argmax(p, axis=1)
    return np.bincount(top, minlength=p.shape[1]).astype(float)


def clipped_log_probs(label_probs: npt.ArrayLike, clip: float) -> FloatArray:
    """a_e(y) = max(log p_e(y), -c), in [-c, 0] (PoEtry Eq. 11, read as a floor at -c:
    values below -c become -c). Shape (E, K)."""
    p = np.asarray(label_probs, dtype=float)
    with np.errstate(divide="ignore"):
        logp = np.log(np.clip(p, 0.0, 1.0))
    return np.clip(logp, -float(clip), 0.0)


# ---------------------------------------------------------------------------
# Noise and report-noisy-max
# ---------------------------------------------------------------------------


def noisy_argmax(noisy: npt.ArrayLike) -> IntArray | int:
    """Index of the largest noisy score (last axis)."""
    out = np.argmax(noisy, axis=-1)
    return int(out) if np.ndim(out) == 0 else out


def gaussian_noise(votes: npt.ArrayLike, sigma: float, rng: np.random.Generator, size: Size = None) -> FloatArray:
    """v + N(0, sigma^2) on every count, zero-vote labels included (tight-auditing
    paper Algorithm 2, lines 7-8; Wu et al. 2024)."""
    v = _as_scores(votes, "votes")
    return v + rng.normal(0.0, sigma, size=_shape(v.size, size))


def laplace_noise(votes: npt.ArrayLike, scale: float, rng: np.random.Generator, size: Size = None) -> FloatArray:
    v = _as_scores(votes, "votes")
    return v + rng.laplace(0.0, scale, size=_shape(v.size, size))


def gumbel_noise(scores: npt.ArrayLike, scale: float, rng: np.random.Generator, size: Size = None) -> FloatArray:
    s = _as_scores(scores)
    return s + rng.gumbel(0.0, scale, size=_shape(s.size, size))


# ---------------------------------------------------------------------------
# Exact output laws
# ---------------------------------------------------------------------------


def softmax(log_weights: npt.ArrayLike) -> FloatArray:
    w = _as_scores(log_weights, "log_weights")
    return np.exp(w - logsumexp(w))


def exponential_mechanism_distribution(utilities: npt.ArrayLike, inverse_temperature: float) -> FloatArray:
    """P(y) proportional to exp(lam u(y)) (McSherry & Talwar 2007). Also the exact law of
    report-noisy-max with Gumbel(1/lam) noise (Gumbel-max trick)."""
    return softmax(float(inverse_temperature) * _as_scores(utilities, "utilities"))


def exponential_mechanism_sample(
    utilities: npt.ArrayLike, inverse_temperature: float, rng: np.random.Generator, size: Size = None
) -> tuple[IntArray | int, FloatArray]:
    """Draw from the exponential mechanism by the Gumbel-max trick; returns (labels, noisy scores)
    with noisy = lam u + Gumbel(1)."""
    noisy = gumbel_noise(float(inverse_temperature) * _as_scores(utilities, "utilities"), 1.0, rng, size)
    return noisy_argmax(noisy), noisy


def _integrate(f: Callable[[float], float], lo: float, hi: float, points: list[float]) -> float:
    """Integral of f on [lo, hi], split at ``points`` (sorted, inside), relative accuracy ~1e-10."""
    edges = sorted({lo, hi, *[p for p in points if lo < p < hi]})
    total = 0.0
    for a, b in zip(edges[:-1], edges[1:]):
        val, _ = integrate.quad(f, a, b, epsabs=0.0, epsrel=1e-11, limit=200)
        total += val
    return total


def gaussian_rnm_distribution(votes: npt.ArrayLike, sigma: float) -> FloatArray:
    """Exact P(argmax_y (v_y + N(0, sigma^2)) = j) for every j:
    integral of phi(z) prod_{i != j} Phi(z + (v_j - v_i)/sigma) dz."""
    v = _as_scores(votes, "votes")
    k = v.size
    if k == 1:
        return np.ones(1)
    out = np.empty(k)
    for j in range(k):
        d = (v[j] - np.delete(v, j)) / sigma  # z + d_i >= 0 means j beats i

        def f(z: float, d: FloatArray = d) -> float:
            return math.exp(-0.5 * z * z - 0.5 * math.log(2 * math.pi) + float(np.sum(log_ndtr(z + d))))

        hi_shift = max(0.0, float(np.max(-d)))
        pts = [0.0] + [float(x) for x in -d] + [float(x) / 2.0 for x in -d]
        out[j] = _integrate(f, -14.0, hi_shift + 14.0, pts)
    return out / out.sum()


def _laplace_logcdf(t: FloatArray) -> FloatArray:
    return np.where(t < 0, t - math.log(2.0), np.log1p(-0.5 * np.exp(-np.abs(t))))


def laplace_rnm_distribution(votes: npt.ArrayLike, scale: float) -> FloatArray:
    """Exact P(argmax_y (v_y + Lap(b)) = j): integral of f(z) prod_{i != j} F(z + (v_j - v_i)/b) dz
    with the standard Laplace density f and cdf F."""
    v = _as_scores(votes, "votes")
    k = v.size
    if k == 1:
        return np.ones(1)
    out = np.empty(k)
    for j in range(k):
        d = (v[j] - np.delete(v, j)) / scale

        def f(z: float, d: FloatArray = d) -> float:
            return math.exp(-abs(z) - math.log(2.0) + float(np.sum(_laplace_logcdf(z + d))))

        hi_shift = max(0.0, float(np.max(-d)))
        out[j] = _integrate(f, -45.0, hi_shift + 45.0, [0.0] + [float(x) for x in -d])
    return out / out.sum()


def gumbel_rnm_distribution(votes: npt.ArrayLike, scale: float) -> FloatArray:
    """Exact law of argmax_y (v_y + Gumbel(b)): softmax(v / b)."""
    return softmax(_as_scores(votes, "votes") / float(scale))
