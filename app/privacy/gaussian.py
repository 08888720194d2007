"""Gaussian mechanism: classical and analytic calibration, exact epsilon and delta.

Sensitivity is the L2 sensitivity under the caller's adjacency: e.g. a vote
histogram moves by sqrt(2) under replace-one, by 1 under add/remove.
"""

from __future__ import annotations

import math

from app.privacy import _validate as v
from app.privacy.errors import PrivacyInputError
from app.privacy.gdp import _log_gdp_delta, gdp_epsilon, gdp_mu

CLASSICAL_WARNING = (
    "the classical Gaussian sigma is proven only for epsilon < 1 (Dwork & Roth 2014, Thm A.1); "
    "use the analytic calibration (Balle & Wang 2018) above that"
)


def gaussian_sigma_classical(
    epsilon: float, delta: float, sensitivity: float = 1.0, *, strict: bool = False
) -> tuple[float, list[str]]:
    """sigma = Delta sqrt(2 ln(1.25/delta)) / eps (Dwork & Roth 2014, Thm A.1 / Thm 3.22).

    The proof covers eps in (0, 1) only. For eps >= 1 this raises when ``strict``;
    otherwise it returns the value with a warning (the value may then be too small).
    """
    e = v.positive(epsilon, "target_epsilon")
    d = v.delta_open(delta)
    s = v.positive(sensitivity, "sensitivity")
    warnings: list[str] = []
    if e >= 1.0:
        if strict:
            raise PrivacyInputError(CLASSICAL_WARNING, param="target_epsilon")
        warnings.append(CLASSICAL_WARNING)
    return _finite_sigma(s * math.sqrt(2.0 * math.log(1.25 / d)) / e), warnings


def gaussian_epsilon(sigma: float, delta: float, sensitivity: float = 1.0, compositions: int = 1) -> float:
    """Exact eps(delta) of k Gaussian releases: the GDP curve at mu = sqrt(k) Delta / sigma
    (Balle & Wang 2018, Thm 8; Dong, Roth & Su 2022, Cor. 2.13 and 3.3)."""
    s = v.positive(sigma, "sigma")
    sens = v.positive(sensitivity, "sensitivity")
    k = v.count(compositions, "compositions", minimum=1)
    try:
        return gdp_epsilon(math.sqrt(k) * sens / s, delta)
    except PrivacyInputError as exc:
        if exc.param != "mu":
            raise
        raise PrivacyInputError(f"sigma = {s:g} is too small: {exc.message}", param="sigma") from None


def gaussian_delta(sigma: float, epsilon: float, sensitivity: float = 1.0, compositions: int = 1) -> float:
    """Exact delta(eps) of k Gaussian releases (Balle & Wang 2018, Thm 8)."""
    s = v.positive(sigma, "sigma")
    sens = v.positive(sensitivity, "sensitivity")
    k = v.count(compositions, "compositions", minimum=1)
    e = v.nonnegative(epsilon, "epsilon")
    return math.exp(_log_gdp_delta(math.sqrt(k) * sens / s, e))


def gaussian_sigma_analytic(epsilon: float, delta: float, sensitivity: float = 1.0, compositions: int = 1) -> float:
    """Smallest sigma (up to float rounding, never below it) with exact (eps, delta)-DP for k
    releases: sigma = sqrt(k) Delta / mu*, mu* the largest mu with delta(eps; mu) <= delta
    (analytic Gaussian mechanism, Balle & Wang 2018, Thm 8 and Alg. 1)."""
    e = v.positive(epsilon, "target_epsilon")
    d = v.delta_open(delta)
    sens = v.positive(sensitivity, "sensitivity")
    k = v.count(compositions, "compositions", minimum=1)
    mu = gdp_mu(e, d)
    scale = math.sqrt(k) * sens
    sigma = _finite_sigma(scale / mu if mu > 0.0 else math.inf)
    log_d = math.log(d)
    # Guard the division's rounding: move sigma up until the rounding-safe delta is within target.
    # Each step at least doubles the last relative move, so 64 steps cover any factor up to 2.
    step = 2.0**-52
    for _ in range(64):
        if _log_gdp_delta(scale / sigma, e) <= log_d:
            return sigma
        sigma = _finite_sigma(sigma * (1.0 + step))
        step *= 2.0
    raise PrivacyInputError("could not certify a sigma for this target", param="target_epsilon")


def _finite_sigma(sigma: float) -> float:
    """Refuse a sigma that overflows (the target is representable, the noise it needs is not) or
    underflows to 0 (a sensitivity below the float range of sigma)."""
    if sigma == 0.0:
        raise PrivacyInputError("so small that the noise scale sigma underflows to 0", param="sensitivity")
    if not math.isfinite(sigma):
        raise PrivacyInputError(
            "target too small: the Gaussian noise it needs (sigma) exceeds the largest float64 "
            "(1.8e308); raise epsilon or delta",
            param="target_epsilon",
        )
    return sigma
