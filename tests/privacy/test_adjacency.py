"""Adjacency translations (ICLInf Thm C.9, first half) and the refused converse."""

from __future__ import annotations

import math

import pytest

from app.privacy import (
    PrivacyInputError,
    gdp_epsilon,
    translate_approx_dp,
    translate_gdp,
    translate_pure_dp,
    translate_zcdp,
)


def test_unbounded_to_bounded_doubles_pure_epsilon():
    assert translate_pure_dp(0.7, "add-remove", "replace-one") == pytest.approx(1.4)
    assert translate_pure_dp(0.7, "unbounded", "bounded") == pytest.approx(1.4)
    assert translate_pure_dp(0.7, "replace-one", "replace-one") == 0.7


def test_group_privacy_for_zcdp_gdp_and_approx_dp():
    assert translate_zcdp(0.3, "add-remove", "replace-one") == pytest.approx(1.2)
    assert translate_gdp(0.5, "add-remove", "replace-one") == pytest.approx(1.0)
    eps, delta = translate_approx_dp(1.0, 1e-6, "add-remove", "replace-one")
    assert eps == 2.0 and delta == pytest.approx((1 + math.e) * 1e-6)


def test_gaussian_replace_one_equals_doubled_mu():
    # A vote histogram: L2 sensitivity 1 under add/remove, sqrt(2) under replace-one; GDP's group
    # privacy (2 mu) is an upper bound on that exact replace-one value.
    sigma = 5.0
    exact = gdp_epsilon(math.sqrt(2) / sigma, 1e-5)
    assert exact <= gdp_epsilon(translate_gdp(1.0 / sigma, "add-remove", "replace-one"), 1e-5)


def test_bounded_to_unbounded_is_refused():
    # M(D) = |D| is 0-DP under replace-one and not DP at all under add/remove.
    for fn, arg in ((translate_pure_dp, 1.0), (translate_zcdp, 0.1), (translate_gdp, 1.0)):
        with pytest.raises(PrivacyInputError) as ei:
            fn(arg, "replace-one", "add-remove")
        assert ei.value.param == "to_adjacency"
