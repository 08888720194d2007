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
    return s * math.sqrt(2.0 * math.log(1.25 / d)) / e, warnings


def gaussian_epsilon(sigma: float, delta: float, sensitivity: float = 1.0, compositions: int = 1) -> float:
    """Exact eps(delta) of k Gaussian releases: the GDP curve at mu = sqrt(k) Delta / sigma
    (Balle & Wang 2018, Thm 8; Dong, Roth & Su 2022, Cor. 2.13 and 3.3)."""
    s = v.positive(sigma, "sigma")
    sens = v.positive(sensitivity, "sensitivity")
    k = v.count(compositions, "compositions", minimum=1)
    return gdp_epsilon(math.sqrt(k) * sens / s, delta)


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
    if mu <= 0.0:
        raise PrivacyInputError("target unreachable: no finite sigma meets it", param="target_epsilon")
    sigma = math.sqrt(k) * sens / mu
    log_d = math.log(d)
    # Guard the division's rounding: move sigma up until the exact delta is within target.
    while _log_gdp_delta(math.sqrt(k) * sens / sigma, e) > log_d:
        sigma = math.nextafter(sigma, math.inf) * (1.0 + 1e-15)
    return sigma
