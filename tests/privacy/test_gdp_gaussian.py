"""GDP and the Gaussian mechanism, against dp-accounting, scipy closed forms and published values."""

from __future__ import annotations

import math

import pytest
from dp_accounting import get_epsilon_gaussian, get_sigma_gaussian
from scipy.stats import norm

from app.privacy import (
    PrivacyInputError,
    gaussian_delta,
    gaussian_epsilon,
    gaussian_mu,
    gaussian_sigma_analytic,
    gaussian_sigma_classical,
    gdp_compose,
    gdp_delta,
    gdp_epsilon,
    gdp_mu,
)


@pytest.mark.parametrize("mu,eps", [(0.5, 1.993091), (1.0, 4.377178), (2.0, 9.997256), (4.0, 24.381611)])
def test_gdp_epsilon_prior_art(mu, eps):
    assert gdp_epsilon(mu, 1e-5) == pytest.approx(eps, abs=5e-7)


@pytest.mark.parametrize("mu", [0.1, 0.5, 1.0, 3.0, 8.0])
@pytest.mark.parametrize("eps", [0.0, 0.3, 2.0, 10.0])
def test_gdp_delta_matches_scipy_closed_form(mu, eps):
    ref = norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)
    ours = gdp_delta(mu, eps)
    assert ours == pytest.approx(ref, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("sigma", [0.3, 1.0, 2.0, 7.5])
@pytest.mark.parametrize("delta", [1e-3, 1e-5, 1e-10])
def test_gaussian_epsilon_matches_dp_accounting(sigma, delta):
    ref = get_epsilon_gaussian(sigma, delta)
    assert gaussian_epsilon(sigma, delta) == pytest.approx(ref, rel=1e-8, abs=1e-10)
    # and our epsilon really meets delta exactly-or-below
    assert gaussian_delta(sigma, gaussian_epsilon(sigma, delta)) <= delta


@pytest.mark.parametrize("eps", [0.1, 0.5, 1.0, 4.0, 20.0])
@pytest.mark.parametrize("delta", [1e-5, 1e-8])
def test_analytic_sigma_matches_dp_accounting(eps, delta):
    ref = get_sigma_gaussian(eps, delta)
    ours = gaussian_sigma_analytic(eps, delta)
    assert ours == pytest.approx(ref, rel=1e-8)
    assert gaussian_delta(ours, eps) <= delta  # never below the exact threshold


@pytest.mark.parametrize(
    "eps,classical,analytic", [(0.5, 13.7032, 9.9445), (1.0, 6.8516, 5.2759), (2.0, 3.4258, 2.8197)]
)
def test_sigma_prior_art_sqrt2_sensitivity(eps, classical, analytic):
    sens = math.sqrt(2)
    sigma_c, warnings = gaussian_sigma_classical(eps, 1e-5, sens)
    assert sigma_c == pytest.approx(classical, abs=5e-5)
    assert bool(warnings) == (eps >= 1)  # proven only for eps < 1
    assert gaussian_sigma_analytic(eps, 1e-5, sens) == pytest.approx(analytic, abs=5e-5)


def test_classical_sigma_strict_refuses_above_one():
    with pytest.raises(PrivacyInputError) as ei:
        gaussian_sigma_classical(1.5, 1e-5, strict=True)
    assert ei.value.param == "target_epsilon"


def test_gaussian_composition_is_gdp_composition():
    # k releases at sigma = one release at sigma / sqrt(k) (Dong, Roth & Su Cor. 3.3)
    assert gaussian_epsilon(4.0, 1e-6, compositions=16) == pytest.approx(gaussian_epsilon(1.0, 1e-6), rel=1e-12)
    assert gdp_compose([0.3, 0.4]) == pytest.approx(0.5)
    assert gaussian_mu(2.0, 1.0, compositions=4) == pytest.approx(1.0)
    s = gaussian_sigma_analytic(2.0, 1e-5, compositions=9)
    assert s == pytest.approx(3 * gaussian_sigma_analytic(2.0, 1e-5), rel=1e-9)


@pytest.mark.parametrize("eps,delta", [(0.5, 1e-5), (3.0, 1e-7), (10.0, 1e-3)])
def test_gdp_mu_inverts_gdp_epsilon(eps, delta):
    mu = gdp_mu(eps, delta)
    assert gdp_delta(mu, eps) <= delta
    assert gdp_delta(mu * (1 + 1e-9), eps) > delta  # the largest such mu (up to 1e-9)
    assert gdp_epsilon(mu, delta) == pytest.approx(eps, rel=1e-8)


def test_zero_mu_is_free_and_small_mu_gives_zero_epsilon():
    assert gdp_epsilon(0.0, 1e-5) == 0.0
    # 2 Phi(mu/2) - 1 <= delta: (0, delta)-DP already
    mu = 2 * norm.ppf((1 + 1e-5) / 2) * 0.9
    assert gdp_epsilon(mu, 1e-5) == 0.0


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0])
def test_gdp_rejects_bad_numbers(bad):
    with pytest.raises(PrivacyInputError):
        gdp_epsilon(bad, 1e-5)
    with pytest.raises(PrivacyInputError):
        gaussian_sigma_analytic(bad if bad != -1.0 else 0.0, 1e-5)
