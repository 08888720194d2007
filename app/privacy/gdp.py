"""Gaussian differential privacy (Dong, Roth & Su 2022) and the exact Gaussian mechanism.

mu-GDP: distinguishing the neighbours is no easier than telling N(0,1) from N(mu,1).
The Gaussian mechanism with L2 sensitivity Delta and noise sigma is exactly
(Delta/sigma)-GDP, so its exact (epsilon, delta) curve is the GDP curve
(Balle & Wang 2018, Thm 8, is the same formula).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
from scipy import optimize, special

from app.privacy import _validate as v
from app.privacy.errors import PrivacyInputError


def _log_gdp_delta(mu: float, eps: float) -> float:
    """log delta(eps; mu), computed from log-CDFs so that tails do not underflow."""
    if mu == 0.0:
        return -math.inf
    la = float(special.log_ndtr(-eps / mu + mu / 2.0))
    lb = eps + float(special.log_ndtr(-eps / mu - mu / 2.0))
    if lb >= la:  # only by rounding; the true difference is > 0
        return -math.inf
    return la + math.log1p(-math.exp(lb - la))


def gdp_delta(mu: float, epsilon: float) -> float:
    """delta(eps; mu) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)
    (Dong, Roth & Su 2022, Cor. 2.13; tight-auditing paper, Section 2)."""
    m = v.nonnegative(mu, "mu")
    e = v.nonnegative(epsilon, "epsilon")
    return math.exp(_log_gdp_delta(m, e))


def _eps_upper_bracket(mu: float, delta: float) -> float:
    # delta(eps) <= Phi(-(eps/mu - mu/2)) <= exp(-(eps/mu - mu/2)^2 / 2): this eps is feasible.
    return mu * mu / 2.0 + mu * math.sqrt(2.0 * math.log(1.0 / delta)) + 1e-9


def gdp_epsilon(mu: float, delta: float) -> float:
    """Smallest eps >= 0 with delta(eps; mu) <= delta (tight-auditing paper, Section 2).

    Root of the decreasing function log delta(eps; mu) - log delta; the result is
    nudged up until the inequality holds in floating point (never below the truth).
    """
    m = v.nonnegative(mu, "mu")
    d = v.delta_open(delta)
    if m == 0.0:
        return 0.0
    log_d = math.log(d)
    # Clipped below so that brentq never sees -inf (only the sign matters at the ends).
    def f(e: float) -> float:
        return max(_log_gdp_delta(m, e), -1e4) - log_d

    if f(0.0) <= 0.0:  # 2 Phi(mu/2) - 1 <= delta: (0, delta)-DP already
        return 0.0
    hi = _eps_upper_bracket(m, d)
    while f(hi) > 0.0:  # the bound above is valid; this loop is a guard only
        hi *= 2.0
    eps = optimize.brentq(f, 0.0, hi, xtol=1e-14, rtol=4 * np.finfo(float).eps, maxiter=500)
    while f(eps) > 0.0:
        eps = eps + max(abs(eps) * 1e-13, 1e-15)
    return float(eps)


def gdp_mu(epsilon: float, delta: float) -> float:
    """Largest mu with delta(eps; mu) <= delta: mu-GDP then implies (eps, delta)-DP
    (inverse of Dong, Roth & Su 2022, Cor. 2.13, in mu; delta(eps; mu) increases in mu)."""
    e = v.nonnegative(epsilon, "epsilon")
    d = v.delta_open(delta)
    log_d = math.log(d)
    def f(m: float) -> float:
        return max(_log_gdp_delta(m, e), -1e4) - log_d

    lo, hi = 0.0, 1.0
    while f(hi) <= 0.0:
        lo, hi = hi, hi * 2.0
        if hi > 1e12:
            raise PrivacyInputError("no finite mu: the guarantee is met by any mu", param="epsilon")
    if lo == 0.0:
        lo = 1e-300
        if f(lo) > 0.0:
            return 0.0
    mu = optimize.brentq(f, lo, hi, xtol=1e-15, rtol=4 * np.finfo(float).eps, maxiter=500)
    while mu > 0.0 and f(mu) > 0.0:
        mu = mu - max(mu * 1e-13, 1e-300)
    return float(mu)


def gdp_compose(mus: Iterable[float]) -> float:
    """Composition of mu_i-GDP mechanisms is sqrt(sum mu_i^2)-GDP (Dong, Roth & Su 2022, Cor. 3.3)."""
    vals = [v.nonnegative(m, "mu") for m in mus]
    if not vals:
        raise PrivacyInputError("nothing to compose", param="mu")
    return math.sqrt(math.fsum(m * m for m in vals))


def gaussian_mu(sigma: float, sensitivity: float = 1.0, compositions: int = 1) -> float:
    """Gaussian mechanism (L2 sensitivity Delta, noise sigma) composed k times is
    sqrt(k) Delta / sigma -GDP (Dong, Roth & Su 2022, Thm 2.7 and Cor. 3.3)."""
    s = v.positive(sigma, "sigma")
    d = v.nonnegative(sensitivity, "sensitivity")
    k = v.count(compositions, "compositions", minimum=1)
    return math.sqrt(k) * d / s
