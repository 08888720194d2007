"""Calibration: lands at or below target, is nearly tight, handles integers and bad targets."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from dp_accounting import get_sigma_gaussian
from dp_accounting.rdp import rdp_privacy_accountant as dpa_rdp

from app.privacy import (
    PrivacyInputError,
    calibrate_clip_softmax,
    calibrate_gaussian,
    clip_softmax_rdp,
    gaussian_delta,
    parse_orders,
)

GRID = parse_orders("2-99")


def _eps(tau, c, s, k, delta, grid=GRID, adjacency="add-remove"):
    # independent conversion: dp-accounting's compute_epsilon (BBGHS) on our composed curve
    return dpa_rdp.compute_epsilon(grid, clip_softmax_rdp(grid, c, s, tau, k, adjacency), delta)[0]


@pytest.mark.parametrize("target", [0.5, 1.0, 4.0, 10.0, 100.0])
def test_temperature_lands_at_or_below_target_and_is_tight(target):
    cal = calibrate_clip_softmax("temperature", target, 1e-5, compositions=2000, clip=10.0, batch_size=50, orders=GRID)
    assert cal.epsilon <= target
    assert cal.epsilon == pytest.approx(target, rel=1e-6)
    # dp-accounting's BBGHS conversion at the solved temperature agrees and meets the target
    ref = _eps(cal.value, 10.0, 50, 2000, 1e-5)
    assert ref <= target * (1 + 1e-12) and cal.epsilon <= ref + 1e-12
    # a slightly smaller temperature already exceeds it (the answer is the smallest temperature)
    assert _eps(cal.value * (1 - 1e-6), 10.0, 50, 2000, 1e-5) > target
    assert cal.alpha in GRID


@pytest.mark.parametrize("target", [0.3, 2.0, 20.0])
def test_clip_lands_at_or_below_target(target):
    cal = calibrate_clip_softmax("clip", target, 1e-6, compositions=500, temperature=1.0, batch_size=20)
    assert cal.epsilon <= target and cal.epsilon == pytest.approx(target, rel=1e-6)
    grid = parse_orders(None)
    assert _eps(1.0, cal.value * (1 + 1e-6), 20, 500, 1e-6, grid) > target  # largest clip


@pytest.mark.parametrize("target", [1.0, 4.0, 8.0])
def test_batch_size_is_smallest_integer(target):
    cal = calibrate_clip_softmax("batch-size", target, 1e-5, compositions=2000, temperature=1.0, clip=10.0, orders=GRID)
    s = cal.value
    assert isinstance(s, int) and cal.epsilon <= target
    assert _eps(1.0, 10.0, s, 2000, 1e-5) <= target * (1 + 1e-12)
    assert _eps(1.0, 10.0, s - 1, 2000, 1e-5) > target  # rounded up, the safe direction


def test_batch_size_one_when_already_private():
    cal = calibrate_clip_softmax("batch_size", 50.0, 1e-5, compositions=1, temperature=100.0, clip=1.0)
    assert cal.value == 1


def test_replace_one_needs_more_temperature():
    a = calibrate_clip_softmax("temperature", 4.0, 1e-5, compositions=100, clip=5.0, batch_size=10)
    b = calibrate_clip_softmax("temperature", 4.0, 1e-5, compositions=100, clip=5.0, batch_size=10, adjacency="replace-one")
    assert b.value == pytest.approx(2 * a.value, rel=1e-6)  # sensitivity doubles


@pytest.mark.parametrize("eps", [0.5, 1.0, 3.0])
def test_gaussian_sigma_methods(eps):
    sens = math.sqrt(2)
    analytic = calibrate_gaussian(eps, 1e-5, sensitivity=sens)
    assert analytic.value == pytest.approx(sens * get_sigma_gaussian(eps, 1e-5), rel=1e-8)
    assert gaussian_delta(analytic.value, eps, sens) <= 1e-5 and analytic.alpha is None
    rdp = calibrate_gaussian(eps, 1e-5, sensitivity=sens, method="rdp")
    assert rdp.epsilon <= eps and rdp.alpha is not None
    assert rdp.value >= analytic.value  # RDP is an upper bound, so it needs at least as much noise
    # dp-accounting's own conversion at the solved sigma meets the target
    grid = parse_orders(None)
    ref = dpa_rdp.compute_epsilon(grid, grid * sens**2 / (2 * rdp.value**2), 1e-5)[0]
    assert ref <= eps * (1 + 1e-12)


def test_gaussian_classical_warns_and_refuses_composition():
    cal = calibrate_gaussian(2.0, 1e-5, sensitivity=math.sqrt(2), method="classical")
    assert cal.value == pytest.approx(3.4258, abs=5e-5) and cal.warnings
    with pytest.raises(PrivacyInputError) as ei:
        calibrate_gaussian(0.5, 1e-5, method="classical", compositions=3)
    assert ei.value.param == "compositions"


@pytest.mark.parametrize(
    "kwargs,param",
    [
        (dict(target_epsilon=0.0), "target_epsilon"),
        (dict(target_epsilon=-1.0), "target_epsilon"),
        (dict(target_epsilon=math.nan), "target_epsilon"),
        (dict(target_epsilon=math.inf), "target_epsilon"),
        (dict(delta=0.0), "delta"),
        (dict(delta=1.0), "delta"),
        (dict(orders=""), "orders"),
        (dict(orders=[]), "orders"),
        (dict(clip=None), "clip"),
        (dict(compositions=0), "compositions"),
        (dict(lower=1e-3, upper=1e-2), "target_epsilon"),  # unreachable inside the given bounds
        (dict(solve_for="sigma"), "solve_for"),
    ],
)
def test_clip_softmax_bad_input(kwargs, param):
    args = dict(solve_for="temperature", target_epsilon=1.0, delta=1e-5, compositions=100, clip=1.0, batch_size=10)
    args.update(kwargs)
    with pytest.raises(PrivacyInputError) as ei:
        calibrate_clip_softmax(args.pop("solve_for"), args.pop("target_epsilon"), args.pop("delta"), **args)
    assert ei.value.param == param


def test_unreachable_batch_size():
    with pytest.raises(PrivacyInputError) as ei:
        calibrate_clip_softmax("batch-size", 0.5, 1e-5, compositions=100, temperature=1.0, clip=1.0, upper=10)
    assert ei.value.param == "target_epsilon"


def test_calibration_under_50_ms():
    # 98 orders; each calibration runs ~40 bisection steps (more than ICLInf's 22)
    t0 = time.perf_counter()
    n = 20
    for i in range(n):
        cal = calibrate_clip_softmax("temperature", 1.0 + i, 1e-5, compositions=2000, clip=10.0, batch_size=50, orders=GRID)
        assert cal.iterations >= 22
    per_call = (time.perf_counter() - t0) / n
    assert per_call < 0.05, per_call


def test_vectorised_conversion_is_fast():
    from app.privacy import convert_rdp

    grid = np.array(parse_orders(None))
    rdp = grid * 0.1
    t0 = time.perf_counter()
    for _ in range(1000):
        convert_rdp(grid, rdp, 1e-5)
    assert (time.perf_counter() - t0) / 1000 < 1e-3


def test_iclinf_section5_setting_optimal_order():
    # ICLInf Section 5.2 (s = 50, c = 10, 50 sequences x 40 tokens, orders 2..99): "for larger privacy
    # budgets the RDP optimizer settles at the minimal order (alpha = 2)"; small budgets use larger orders.
    big = calibrate_clip_softmax("temperature", 100.0, 1e-5, compositions=50 * 40, clip=10.0, batch_size=50, orders=GRID)
    small = calibrate_clip_softmax("temperature", 1.0, 1e-5, compositions=50 * 40, clip=10.0, batch_size=50, orders=GRID)
    assert big.alpha == 2.0 and small.alpha > 2.0
    # and different deltas move the optimal order (the "stage-like patterns" of ICLInf Figure 6)
    alphas = {calibrate_clip_softmax("temperature", 4.0, d, compositions=2000, clip=10.0, batch_size=50,
                                     orders=GRID).alpha for d in (1e-3, 1e-5, 1e-8)}
    assert len(alphas) == 3
