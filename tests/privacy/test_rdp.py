"""RDP curves and RDP -> (epsilon, delta), against dp-accounting, mpmath and closed forms."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from dp_accounting import (
    GaussianDpEvent,
    NeighboringRelation,
    RandomizedResponseDpEvent,
    ZCDpEvent,
)
from dp_accounting.rdp import rdp_privacy_accountant as dpa_rdp

from app.privacy import (
    DEFAULT_ORDERS,
    PrivacyInputError,
    compose_rdp,
    convert_rdp,
    parse_orders,
    rdp_exponential_mechanism,
    rdp_gaussian,
    rdp_on_grid,
    rdp_pure_dp,
    rdp_to_delta,
    rdp_to_epsilon,
    rdp_zcdp,
)

from .conftest import DPA_ORDERS


def test_default_grid_is_dp_accountings():
    assert np.array_equal(np.array(DEFAULT_ORDERS), DPA_ORDERS)


@pytest.mark.parametrize("sigma,sens", [(0.5, 1.0), (1.0, 1.0), (3.0, math.sqrt(2)), (10.0, 2.0)])
def test_gaussian_rdp_matches_dp_accounting(sigma, sens):
    acc = dpa_rdp.RdpAccountant(DPA_ORDERS)
    acc.compose(GaussianDpEvent(sigma / sens))  # dp-accounting takes the noise multiplier sigma / Delta
    ours = rdp_gaussian(DPA_ORDERS, sigma, sens)
    np.testing.assert_allclose(ours, acc._rdp, rtol=1e-12)


@pytest.mark.parametrize("rho", [1e-4, 0.05, 0.5, 3.0])
def test_zcdp_rdp_and_epsilon_match_dp_accounting(rho):
    acc = dpa_rdp.RdpAccountant(DPA_ORDERS)
    acc.compose(ZCDpEvent(rho))
    np.testing.assert_allclose(rdp_zcdp(DPA_ORDERS, rho), acc._rdp, rtol=1e-12)
    for delta in (1e-3, 1e-5, 1e-9):
        eps, alpha = rdp_to_epsilon(DPA_ORDERS, rdp_zcdp(DPA_ORDERS, rho), delta, method="bbghs")
        ref_eps, ref_alpha = dpa_rdp.compute_epsilon(DPA_ORDERS, acc._rdp, delta)
        assert eps == pytest.approx(ref_eps, rel=1e-12, abs=1e-12)
        if ref_eps > 0:
            assert alpha == ref_alpha


def test_prior_art_reference_values():
    # PRIOR_ART: zCDP rho = 0.5 -> 4.728507; Gaussian sigma = 1 by RDP -> 4.728507 (delta 1e-5).
    grid = parse_orders(None)
    assert rdp_to_epsilon(grid, rdp_zcdp(grid, 0.5), 1e-5)[0] == pytest.approx(4.728507, abs=5e-7)
    assert rdp_to_epsilon(grid, rdp_gaussian(grid, 1.0), 1e-5)[0] == pytest.approx(4.728507, abs=5e-7)
    # pure eps = 0.5 x 100 -> 32.765522 (BBGHS) vs 34.069858 (Mironov); 0.1 x 1000 -> 18.965992 vs 20.087679
    for eps, k, bbghs, mironov in [(0.5, 100, 32.765522, 34.069858), (0.1, 1000, 18.965992, 20.087679)]:
        conv = convert_rdp(grid, k * rdp_pure_dp(grid, eps), 1e-5)
        assert conv.epsilon_bbghs == pytest.approx(bbghs, abs=5e-7)
        assert conv.epsilon_mironov == pytest.approx(mironov, abs=5e-7)
        assert conv.epsilon == conv.epsilon_bbghs and conv.method == "bbghs"


@pytest.mark.parametrize("eps", [0.01, 0.3, 1.0, 2.5, 6.0])
def test_exponential_mechanism_rdp_is_randomized_response_rdp(eps):
    # The sinh form (ICLInf Thm C.5) is the exact RDP of eps-randomized response; dp-accounting's
    # binary randomized response (replace-one) with noise p = 2/(1+e^eps) is an independent oracle.
    acc = dpa_rdp.RdpAccountant(DPA_ORDERS, neighboring_relation=NeighboringRelation.REPLACE_ONE)
    acc.compose(RandomizedResponseDpEvent(noise_parameter=2.0 / (1.0 + math.exp(eps)), num_buckets=2))
    ours = rdp_exponential_mechanism(DPA_ORDERS, eps)
    np.testing.assert_allclose(ours, acc._rdp, rtol=1e-9, atol=1e-14)
    assert np.all(ours <= DPA_ORDERS * eps**2 / 2 * (1 + 1e-12))  # the min never picks the zCDP term above it


def _sinh_form_mp(alpha: float, eps: float) -> float:
    mpmath.mp.dps = 60
    a, e = mpmath.mpf(alpha), mpmath.mpf(eps)
    return float(mpmath.log((mpmath.sinh(a * e) - mpmath.sinh((a - 1) * e)) / mpmath.sinh(e)) / (a - 1))


@pytest.mark.parametrize(
    "alpha,eps", [(2.0, 1e-6), (1.1, 1e-3), (3.0, 0.5), (64.0, 20.0), (1024.0, 5.0), (1024.0, 50.0), (5000.0, 3.0)]
)
def test_sinh_form_is_stable_against_mpmath(alpha, eps):
    # alpha * eps up to 250000: math.sinh overflows past 710; the log form must not.
    ours = float(rdp_exponential_mechanism(np.array([alpha]), eps)[0])
    ref = min(alpha * eps**2 / 2, _sinh_form_mp(alpha, eps))
    assert math.isfinite(ours)
    assert ours == pytest.approx(ref, rel=1e-10)


def test_pure_dp_rdp_never_exceeds_epsilon():
    grid = np.array([1.01, 2.0, 10.0, 1e4, 1e6])
    for eps in (0.1, 1.0, 10.0):
        r = rdp_pure_dp(grid, eps)
        assert np.all(r <= eps + 1e-12) and np.all(np.diff(r) >= -1e-12)  # bounded and non-decreasing


def test_mironov_conversion_closed_form():
    grid = np.array([2.0, 4.0, 8.0, 16.0, 32.0])
    rdp = 0.3 * grid
    conv = convert_rdp(grid, rdp, 1e-6, "mironov")
    ref = min(r + math.log(1e6) / (a - 1) for a, r in zip(grid, rdp))
    assert conv.epsilon == pytest.approx(ref, rel=1e-14) and conv.method == "mironov"
    # best <= both, and picks BBGHS here (it is never looser for alpha > 1 at these values)
    best = convert_rdp(grid, rdp, 1e-6, "best")
    assert best.epsilon <= min(best.epsilon_bbghs, best.epsilon_mironov) + 1e-15


def test_bbghs_closed_form_at_one_order():
    a, r, d = 7.0, 1.3, 1e-5
    ref = r + math.log((a - 1) / a) - (math.log(d) + math.log(a)) / (a - 1)  # ICLInf Thm C.8
    assert rdp_to_epsilon([a], [r], d, method="bbghs") == (pytest.approx(ref, rel=1e-14), a)


@pytest.mark.parametrize("eps_target", [0.5, 2.0, 8.0])
def test_rdp_to_delta_matches_dp_accounting(eps_target):
    rdp = rdp_zcdp(DPA_ORDERS, 0.3)
    ours, _ = rdp_to_delta(DPA_ORDERS, rdp, eps_target)
    ref, _ = dpa_rdp.compute_delta(DPA_ORDERS, rdp, eps_target)
    # ours also takes Mironov's bound per order, so it is at most the reference
    assert ours <= ref * (1 + 1e-12)
    assert ours == pytest.approx(ref, rel=1e-9)


def test_composition_adds():
    grid = parse_orders("2-10")
    a, b = rdp_gaussian(grid, 2.0), rdp_zcdp(grid, 0.1)
    np.testing.assert_allclose(compose_rdp(a, b, a), 2 * a + b)


def test_rdp_on_grid_uses_next_larger_order():
    src_o, src_r = [2.0, 4.0, 8.0], [0.1, 0.3, 0.2]  # non-monotone input: the running min from the right applies
    out = rdp_on_grid(src_o, src_r, np.array([1.5, 2.0, 3.0, 5.0, 8.0, 9.0]))
    np.testing.assert_allclose(out[:5], [0.1, 0.1, 0.2, 0.2, 0.2])
    assert out[5] == math.inf


@pytest.mark.parametrize(
    "spec,expected",
    [("2-5", [2, 3, 4, 5]), ("2,3,4.5", [2, 3, 4.5]), ("2-4,10, 3", [2, 3, 4, 10]), ([1.5, 3], [1.5, 3])],
)
def test_parse_orders(spec, expected):
    np.testing.assert_array_equal(parse_orders(spec), np.array(expected, dtype=float))


def test_parse_orders_2_99_has_98_orders():
    g = parse_orders("2-99")
    assert g.size == 98 and g[0] == 2 and g[-1] == 99


@pytest.mark.parametrize("spec", ["", " ", "5-2", "1,2", "0.5", "abc", "2,,3", "nan", "2,inf", []])
def test_parse_orders_rejects(spec):
    with pytest.raises(PrivacyInputError) as ei:
        parse_orders(spec)
    assert ei.value.param == "orders"


@pytest.mark.parametrize(
    "orders,rdp,delta,param",
    [
        ([2, 3], [0.1], 1e-5, "rdp"),
        ([2, 3], [0.1, -1], 1e-5, "rdp"),
        ([2, 3], [0.1, float("nan")], 1e-5, "rdp"),
        ([2, 2], [0.1, 0.2], 1e-5, "orders"),
        ([2, 3], [0.1, 0.2], 0.0, "delta"),
        ([2, 3], [0.1, 0.2], 1.0, "delta"),
        ([2, 3], [0.1, 0.2], float("nan"), "delta"),
    ],
)
def test_rdp_to_epsilon_rejects(orders, rdp, delta, param):
    with pytest.raises(PrivacyInputError) as ei:
        rdp_to_epsilon(orders, rdp, delta)
    assert ei.value.param == param


def test_infinite_rdp_at_some_orders_is_ignored():
    eps, alpha = rdp_to_epsilon([2, 3, 4], [0.1, math.inf, math.inf], 1e-5)
    assert alpha == 2 and math.isfinite(eps)
