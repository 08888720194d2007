"""The black-box floor (``eprocess.fewest_pairs_to_refute``): the fewest pairs after which any
level-alpha test can say violation against a target that always reveals the canary. Checked against
scipy's binomial law, on edge cases, and against the audits themselves: a valid audit can never say
violation earlier than the floor, and the sequential audit's violations of a perfect target come
within a small factor of it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from app.audit.eprocess import fewest_pairs_to_refute
from app.audit.gen_sequential import run_gen_sequential
from tests.audit.test_gen_sequential import ALPHA, ATTACK, EX, REQUIRED, FixedRates, _design


def _scipy_floor(eps: float, delta: float, alpha: float, power: float) -> int:
    """The smallest k for which the all-right outcome of k pairs (k both-right pairs of k, each with
    probability p0^2 under randomized response at the claim) has probability <= alpha / power."""
    p0 = (math.exp(eps) + delta) / (1.0 + math.exp(eps))
    k = 1
    while stats.binom.pmf(k, k, p0 * p0) > alpha / power:
        k += 1
    return k


@pytest.mark.parametrize("eps", [0.05, 0.1, 0.5, 1.0, 2.0, 3.0, 5.0, 8.0])
@pytest.mark.parametrize("delta", [0.0, 1e-5, 1e-2])
@pytest.mark.parametrize("alpha,power", [(0.05, 1.0), (0.05, 0.9), (0.01, 1.0), (0.001, 0.5)])
def test_the_floor_equals_scipys_binomial_count(eps, delta, alpha, power):
    assert fewest_pairs_to_refute(eps, delta, alpha, power) == _scipy_floor(eps, delta, alpha, power)


def test_the_claims_of_the_benchmarks():
    # claim 1: p0 = e / (1 + e) = 0.731, ln(20) / ln(1 / p0^2) = 4.78; claim 2: p0 = 0.881, 11.8
    assert fewest_pairs_to_refute(1.0, 0.0, 0.05) == 5
    assert fewest_pairs_to_refute(2.0, 0.0, 0.05) == 12
    assert fewest_pairs_to_refute(2.0, 1e-5, 0.05) == 12


def test_edge_cases():
    assert fewest_pairs_to_refute(0.0, 0.0, 0.05) == 3  # p0 = 1/2: (1/4)^k <= 0.05 from k = 3
    assert fewest_pairs_to_refute(1.0, 1.0, 0.05) is None  # delta 1 allows anything
    assert fewest_pairs_to_refute(800.0, 0.0, 0.05) is None  # e^-800 underflows: no finite count
    big = fewest_pairs_to_refute(50.0, 0.0, 0.05)
    assert big is not None and big == pytest.approx(math.log(20.0) / (2.0 * math.exp(-50.0)), rel=1e-9)
    assert fewest_pairs_to_refute(1.0, 0.0, 0.05, power=0.05) == 0
    for bad in [(-1.0, 0.0, 0.05, 1.0), (1.0, -0.1, 0.05, 1.0), (1.0, 0.0, 0.0, 1.0), (1.0, 0.0, 0.05, 1.5),
                (float("nan"), 0.0, 0.05, 1.0)]:
        with pytest.raises(ValueError):
            fewest_pairs_to_refute(*bad)


def test_the_all_right_test_at_the_floor_has_its_level_and_one_pair_less_would_not():
    """The test 'violation iff every one of k pairs is won' under randomized response at the claim:
    its false-violation probability is p0^(2k), at most alpha at the floor and above it one pair less."""
    for eps in (0.5, 1.0, 2.0, 4.0):
        k = fewest_pairs_to_refute(eps, 0.0, ALPHA)
        p0 = math.exp(eps) / (1.0 + math.exp(eps))
        assert p0 ** (2 * k) <= ALPHA < p0 ** (2 * (k - 1))
        draws = np.random.default_rng(7).random((100_000, 2 * k)) < p0
        rate = draws.all(axis=1).mean()
        sd = math.sqrt(p0 ** (2 * k) * (1 - p0 ** (2 * k)) / 100_000)
        assert abs(rate - p0 ** (2 * k)) <= 4 * sd


@pytest.mark.parametrize("eps", [1.0, 2.0])
@pytest.mark.parametrize("mech", ["clip_softmax", "esa", None])
def test_no_sequential_violation_comes_before_the_floor_and_a_perfect_release_is_caught_near_it(eps, mech):
    """The audit is a level-alpha test, so a target that always releases y1 with the canary and y0
    without it can never be called a violation before 2 x floor trials; the audit's bettors reach it
    within 2x the floor (the weights' and the bettor's learning cost: at claims 1 / 2, 12 / 30 trials
    with the one-token design's weights, 18 / 40 with esa's, 16 / 36 without a design model, against
    a floor of 10 / 24)."""
    floor = fewest_pairs_to_refute(eps, 1e-5, ALPHA)
    assert floor is not None
    trials = []
    for seed in range(3):
        r = run_gen_sequential(FixedRates(1.0, 0.0), EX, ATTACK, claimed_epsilon=eps, delta=1e-5,
                               design=None if mech is None else _design(mech, eps), alternatives=REQUIRED,
                               alpha=ALPHA, cap=400, rng=np.random.default_rng(seed))
        assert r.verdict == "violation"
        trials.append(r.trials)
    assert min(trials) >= 2 * floor
    assert max(trials) <= 2 * 2 * floor


def test_both_planners_report_the_floor():
    from app.audit.planner import plan_audit
    from tests.audit.test_one_power_model import _noise_2

    out = plan_audit(_noise_2, labels=3, exemplars=8, partitions=2, shots_per_partition=4, claimed_epsilon=2.0,
                     confidence=0.95, delta=1e-5, alternatives=["noise_quarter", "no_noise"], white_box=False,
                     max_trials=2_000)
    assert out["black_box_floor"] == {"pairs": 12, "trials": 24}
    assert any("at least 24 trials (12 pairs)" in n for n in out["notes"]), out["notes"]
    out = plan_audit(_noise_2, labels=3, exemplars=8, partitions=2, shots_per_partition=4, claimed_epsilon=900.0,
                     confidence=0.99, delta=1e-5, alternatives=["no_noise"], white_box=False, max_trials=200)
    assert out["black_box_floor"] is None
    assert any("more trials than any audit can run" in n for n in out["notes"]), out["notes"]
