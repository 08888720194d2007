"""Checks of a mechanism's guarantee on neighbouring worlds, exact and sampled.

For a mechanism with finitely many outputs (labels) the privacy loss over all
output sets is attained on single labels (pure DP) or on the set
{y : p(y) > e^eps q(y)} (approximate DP), so both checks are sums over labels:

* pure eps-DP holds on a pair of worlds iff max_y |log p(y) - log q(y)| <= eps;
* (eps, delta)-DP holds iff the hockey-stick divergence
  sum_y max(0, p(y) - e^eps q(y)) <= delta (both directions).

The sampled versions replace p and q by one-sided Clopper-Pearson bounds
(``app.privacy.empirical``), so that a correct mechanism fails a check with
probability at most the stated alpha (Bonferroni over the comparisons made).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from app.privacy.empirical import clopper_pearson_lower, clopper_pearson_upper


def _pair(p: npt.ArrayLike, q: npt.ArrayLike) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    a, b = np.asarray(p, dtype=float), np.asarray(q, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"distributions must be 1-d of equal length, got {a.shape} and {b.shape}")
    return a, b


def max_log_ratio(p: npt.ArrayLike, q: npt.ArrayLike) -> float:
    """Exact pure-DP privacy loss between two output laws: max over labels of
    |log p(y) - log q(y)| (inf when one law puts mass where the other puts none)."""
    a, b = _pair(p, q)
    worst = 0.0
    for x, y in zip(a, b):
        if x == 0.0 and y == 0.0:
            continue
        if x == 0.0 or y == 0.0:
            return math.inf
        worst = max(worst, abs(math.log(x) - math.log(y)))
    return worst


def hockey_stick(p: npt.ArrayLike, q: npt.ArrayLike, epsilon: float) -> float:
    """delta(eps) between two output laws, the larger of both directions:
    max_S P(S) - e^eps Q(S) = sum_y max(0, p(y) - e^eps q(y))."""
    a, b = _pair(p, q)
    e = math.exp(epsilon)
    return float(max(np.sum(np.maximum(0.0, a - e * b)), np.sum(np.maximum(0.0, b - e * a))))


@dataclass(frozen=True)
class SampledBound:
    """A lower confidence bound on a privacy quantity from two sampled worlds."""

    lower: float  # holds with probability >= 1 - alpha
    estimate: float  # plug-in value
    label: int  # the label (event) that attains it
    alpha: float


def counts(labels: npt.ArrayLike, num_labels: int) -> npt.NDArray[np.intp]:
    return np.bincount(np.asarray(labels, dtype=int).ravel(), minlength=num_labels)


def sampled_epsilon_lower_bound(counts_p: npt.ArrayLike, counts_q: npt.ArrayLike, alpha: float = 1e-6) -> SampledBound:
    """Lower confidence bound on max_y |log p(y)/q(y)| from label counts of two worlds.

    For each label and direction: log(CP_lower(p_y) / CP_upper(q_y)), each one-sided
    bound at level 1 - alpha/(4K) (Bonferroni over 2K ratios x 2 bounds), so a mechanism
    whose true loss is <= eps gives ``lower > eps`` with probability <= alpha."""
    cp, cq = np.asarray(counts_p, dtype=int), np.asarray(counts_q, dtype=int)
    n_p, n_q, k = int(cp.sum()), int(cq.sum()), cp.size
    level = 1.0 - alpha / (4 * k)
    best = SampledBound(-math.inf, -math.inf, -1, alpha)
    for y in range(k):
        for a, na, b, nb in ((cp[y], n_p, cq[y], n_q), (cq[y], n_q, cp[y], n_p)):
            lo, hi = clopper_pearson_lower(int(a), na, level), clopper_pearson_upper(int(b), nb, level)
            lower = math.log(lo / hi) if lo > 0 else -math.inf
            est = math.log((a / na) / (b / nb)) if a > 0 and b > 0 else (math.inf if a > 0 else -math.inf)
            if lower > best.lower or (best.label < 0):
                best = SampledBound(lower, est, y, alpha)
    return best


def sampled_delta_lower_bound(
    counts_p: npt.ArrayLike, counts_q: npt.ArrayLike, epsilon: float, event: list[int], alpha: float = 1e-6
) -> SampledBound:
    """Lower confidence bound on P(S) - e^eps Q(S) for a fixed output set S (``event``, chosen
    before sampling): CP_lower(P(S)) - e^eps CP_upper(Q(S)), each at level 1 - alpha/2."""
    cp, cq = np.asarray(counts_p, dtype=int), np.asarray(counts_q, dtype=int)
    n_p, n_q = int(cp.sum()), int(cq.sum())
    kp, kq = int(cp[event].sum()), int(cq[event].sum())
    level = 1.0 - alpha / 2
    e = math.exp(epsilon)
    lower = clopper_pearson_lower(kp, n_p, level) - e * clopper_pearson_upper(kq, n_q, level)
    return SampledBound(lower, kp / n_p - e * kq / n_q, int(event[0]) if event else -1, alpha)
