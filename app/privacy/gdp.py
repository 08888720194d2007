"""Gaussian differential privacy (Dong, Roth & Su 2022) and the exact Gaussian mechanism.

mu-GDP: distinguishing the neighbours is no easier than telling N(0,1) from N(mu,1).
The Gaussian mechanism with L2 sensitivity Delta and noise sigma is exactly
(Delta/sigma)-GDP, so its exact (epsilon, delta) curve is the GDP curve
(Balle & Wang 2018, Thm 8, is the same formula).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable

from scipy import special

from app.privacy import _validate as v
from app.privacy.errors import PrivacyInputError
from app.privacy.solve import MAX_FLOAT, largest_true, smallest_true


# Rounding allowance for log_ndtr (a few ulps relative) and the sums below, generously: 64 ulps.
_ULPS = 64.0 * 2.0**-52
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def _log_gdp_delta(mu: float, eps: float) -> float:
    """An upper bound on log delta(eps; mu) that rounding cannot push below the truth.

    delta = Phi(-a + b) - e^eps Phi(-a - b) with a = eps/mu, b = mu/2, from log-CDFs so that
    tails do not underflow: log delta = la + log(1 - e^-r), la = log Phi(-a + b), r = la - lb,
    lb = eps + log Phi(-a - b). When eps is small next to log(1/delta) the two logs nearly cancel
    and r is lost in rounding (|la| ~ 690 at delta = 1e-300 has an ulp of 1e-13); r is then
    lowered by its rounding bound, and where nothing of it survives the bound falls back to
    delta <= Phi(-a + b), which always holds. So callers that test ``<= log delta_target``
    certify the guarantee, at worst asking for a little more noise than the exact optimum.
    """
    if mu == 0.0:
        return -math.inf
    if eps == 0.0:  # delta(0; mu) = 2 Phi(mu/2) - 1 = erf(mu / (2 sqrt 2)): no cancellation
        val = float(special.erf(mu / (2.0 * math.sqrt(2.0))))
        if val > 1e-300:
            return min(0.0, math.log(val) + _ULPS)
        # erf(x) <= 2x/sqrt(pi), i.e. delta <= mu/sqrt(2 pi) (the erf above underflowed).
        return math.log(mu) - _LOG_SQRT_2PI + _ULPS
    a = eps / mu  # may overflow to inf: then Phi(-a + b) = 0 below
    b = mu / 2.0
    la = float(special.log_ndtr(-a + b))
    if la == -math.inf:
        return -math.inf
    lphi = float(special.log_ndtr(-a - b))
    err = _ULPS * (abs(la) + abs(eps) + abs(lphi))  # rounding bound on la and on r
    r = la - (eps + lphi)
    # Two bounds that need no cancellation: delta <= Phi(-a + b), and (e^eps >= 1) delta <=
    # Phi(-a + b) - Phi(-a - b) = the N(0,1) mass of an interval of width mu around -a
    # <= mu phi(max(a - b, 0)). The second is the tight one for tiny mu.
    c = max(a - b, 0.0) * (1.0 - _ULPS)
    bound = min(la + err, math.log(mu) - _LOG_SQRT_2PI - 0.5 * c * c + _ULPS)
    if r > err:  # r survives rounding: the (lowered) exact form
        bound = min(bound, la + err + math.log1p(-math.exp(-(r - err))))
    return min(0.0, bound)


def gdp_delta(mu: float, epsilon: float) -> float:
    """delta(eps; mu) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)
    (Dong, Roth & Su 2022, Cor. 2.13; tight-auditing paper, Section 2); never below the truth
    by rounding (see ``_log_gdp_delta``)."""
    m = v.nonnegative(mu, "mu")
    e = v.nonnegative(epsilon, "epsilon")
    return math.exp(_log_gdp_delta(m, e))


def gdp_epsilon(mu: float, delta: float) -> float:
    """Smallest eps >= 0 with delta(eps; mu) <= delta (tight-auditing paper, Section 2).

    delta(eps; mu) falls with eps; the answer is found by bisection on the doubles (at most 64
    evaluations, ``app.privacy.solve``) and is a float at which the rounding-safe delta was
    checked, so it is never below the truth. A pure function of (mu, delta), remembered for the
    last 4096 pairs (ksa's budget split bisects through the same ~40 pairs on every answer: ~0.7 ms
    of each); an error is raised every time (lru_cache keeps no exceptions), an unhashable
    argument goes uncached.
    """
    try:
        return _gdp_epsilon_cached(mu, delta)
    except TypeError:
        return _gdp_epsilon(mu, delta)


def _gdp_epsilon(mu: float, delta: float) -> float:
    m = v.nonnegative(mu, "mu")
    d = v.delta_open(delta)
    if m == 0.0:
        return 0.0
    log_d = math.log(d)

    def ok(e: float) -> bool:
        return _log_gdp_delta(m, e) <= log_d

    if ok(0.0):  # 2 Phi(mu/2) - 1 <= delta: (0, delta)-DP already
        return 0.0
    if not ok(MAX_FLOAT):
        raise PrivacyInputError(
            f"no finite epsilon meets delta = {d:g} at mu = {m:g} (epsilon would exceed the largest float)",
            param="mu",
        )
    return smallest_true(ok, 0.0, MAX_FLOAT)


_gdp_epsilon_cached = functools.lru_cache(maxsize=4096, typed=True)(_gdp_epsilon)


def gdp_mu(epsilon: float, delta: float) -> float:
    """Largest mu with delta(eps; mu) <= delta: mu-GDP then implies (eps, delta)-DP
    (inverse of Dong, Roth & Su 2022, Cor. 2.13, in mu; delta(eps; mu) increases in mu).

    Bisection on the doubles (at most 64 evaluations); the float returned was checked against the
    rounding-safe delta, so it is never above the truth. It may be 0.0 or subnormal when epsilon
    and delta are both tiny: callers that divide by it check for overflow.
    """
    e = v.nonnegative(epsilon, "epsilon")
    d = v.delta_open(delta)
    log_d = math.log(d)

    def ok(m: float) -> bool:
        return _log_gdp_delta(m, e) <= log_d

    if ok(MAX_FLOAT):  # cannot happen for finite epsilon (delta -> 1 as mu grows); kept as a guard
        raise PrivacyInputError("no finite mu: the guarantee is met by any mu", param="epsilon")
    return largest_true(ok, 0.0, MAX_FLOAT)


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
