"""Privacy amplification by subsampling for pure-DP steps.

Balle, Barthe & Gaboardi 2018, "Privacy Amplification by Subsampling: Tight Analyses via
Couplings and Divergences" (NeurIPS 2018, arXiv 1807.01647), Table 1: a mechanism that is
(eps, delta)-DP with respect to the substitution (replace-one) relation on datasets of size m,
run on a uniformly random subset of size m drawn WITHOUT replacement from a dataset of size n,
is (log(1 + (m/n)(e^eps - 1)), (m/n) delta)-DP with respect to substitution on size-n
datasets; the same formula with the rate q for Poisson subsampling under add/remove.

Only the pure-DP (delta = 0), without-replacement, substitution case is used here
(``mozo``'s ``subsample``). Its proof is short enough to state (and is what the brute-force
test in tests/mechanisms/generation/test_mozo.py checks on small instances): for neighbours
D, D' differing in record i and a discrete output y, let a = E[M(D_S)(y) | i not in S],
b = E[M(D_S)(y) | i in S], b' = the same for D'. Coupling S (with i) to S - {i} + {j}, j
uniform outside S, gives b <= e^eps a and a <= e^eps b; the same S gives b <= e^eps b'.
P(y) / P'(y) = ((1-q) a + q b) / ((1-q) a + q b') with q = m/n is largest at b = e^eps b' and
a = b' (increasing in b, then decreasing in a >= b e^-eps), i.e. 1 - q + q e^eps.
"""

from __future__ import annotations

import math

from app.privacy import _validate as v
from app.privacy.errors import PrivacyInputError


def sampling_rate(subset_size: int, population: int) -> float:
    """q = m / n for a uniformly random m-subset of n records (without replacement)."""
    m = v.count(subset_size, "subset_size", minimum=1)
    n = v.count(population, "population", minimum=1)
    if m > n:
        raise PrivacyInputError(f"subset size {m} exceeds the population {n}", param="subset_size")
    return m / n


def amplified_epsilon(epsilon: float, rate: float) -> float:
    """eps' = log(1 + q (e^eps - 1)) (Balle, Barthe & Gaboardi 2018, Table 1), evaluated without
    cancellation; eps' <= eps, equal at q = 1."""
    e = v.nonnegative(epsilon, "epsilon")
    q = v.nonnegative(rate, "rate")
    if q > 1.0:
        raise PrivacyInputError(f"sampling rate must be in [0, 1], got {q:g}", param="rate")
    if q == 1.0 or math.isinf(e):
        return e
    if q == 0.0:
        return 0.0
    if e > 1.0:  # log(1 + q(e^eps - 1)) = eps + log q + log1p((1 - q) e^-eps / q): no overflow of e^eps
        return min(e, e + math.log(q) + math.log1p((1.0 - q) * math.exp(-e) / q))
    return min(e, math.log1p(q * math.expm1(e)))


def deamplified_epsilon(amplified: float, rate: float) -> float:
    """The inverse: the base epsilon whose amplification at ``rate`` is ``amplified``
    (log(1 + (e^eps' - 1) / q)); callers must re-check the forward direction after rounding."""
    a = v.nonnegative(amplified, "amplified")
    q = v.positive(rate, "rate")
    if q > 1.0:
        raise PrivacyInputError(f"sampling rate must be in [0, 1], got {q:g}", param="rate")
    if a > 1.0:  # log(1 + (e^a - 1)/q) = a - log q + log1p((q - 1) e^-a): no overflow of e^a
        return a - math.log(q) + math.log1p((q - 1.0) * math.exp(-a))
    return math.log1p(math.expm1(a) / q)
