"""The paired generation audit's violation bets (``app.audit.pair_bets``): the four single-event DP
inequalities checked against a direct enumeration of the pair law, their level by simulation at the
boundary, and the rare release they exist for (esa on 4 partitions at a tenth of its noise)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from app.audit.eprocess import max_pair_accuracy
from app.audit.gen_sequential import DesignModelTarget, run_gen_sequential
from app.audit.gen_power import alternative_release
from app.audit.pair_bets import RATIOS, WEIGHTS, PairBets, ratio_statistics
from tests.audit.test_gen_sequential import ALPHA, ATTACK, EX, REQUIRED, FixedRates, _design, verdict_counts


def _mean(stat: str, p_in: float, p_out: float, eps: float) -> float:
    """E[statistic] over the four outcomes of an independent pair (r_in ~ B(p_in), r_out ~ B(p_out))."""
    return sum((p_in if a else 1 - p_in) * (p_out if b else 1 - p_out) * ratio_statistics(a, b, eps)[stat]
               for a, b in itertools.product((0.0, 1.0), repeat=2))


def _dp(p_in: float, p_out: float, eps: float, delta: float) -> bool:
    """(eps, delta)-DP on the events y1 and y0, written out directly (Dwork & Roth Def. 2.4)."""
    k = math.exp(eps)
    return (p_in <= k * p_out + delta and p_out <= k * p_in + delta
            and 1 - p_in <= k * (1 - p_out) + delta and 1 - p_out <= k * (1 - p_in) + delta)


def test_weights_sum_to_one_and_cover_every_bettor():
    assert math.isclose(sum(WEIGHTS.values()), 1.0)
    assert set(PairBets(1.0, 0.7, 0.5).procs) == set(WEIGHTS)


@pytest.mark.parametrize("eps", [0.1, 1.0, 2.0, 5.0])
@pytest.mark.parametrize("delta", [0.0, 1e-5, 0.01])
def test_each_ratio_mean_is_p0_at_its_boundary_and_below_inside_the_dp_region(eps, delta):
    p0, k = max_pair_accuracy(eps, delta), math.exp(eps)
    for q in (0.0, 0.001, 0.05, 0.3):  # on each inequality's boundary: P(E | a) = e^eps P(E | b) + delta
        a = min(1.0, k * q + delta)
        if a >= 1.0:
            continue
        laws = {"ratio_y1_in": (a, q), "ratio_y1_out": (q, a), "ratio_y0_out": (1 - q, 1 - a),
                "ratio_y0_in": (1 - a, 1 - q)}
        for stat, (p_in, p_out) in laws.items():
            assert math.isclose(_mean(stat, p_in, p_out, eps), p0, rel_tol=0, abs_tol=1e-12), (stat, q)
    grid = np.linspace(0.0, 1.0, 41)
    for p_in, p_out in itertools.product(grid, grid):
        if _dp(p_in, p_out, eps, delta):
            assert all(_mean(s, p_in, p_out, eps) <= p0 + 1e-12 for s in RATIOS)
        else:  # outside the region at least one statistic's mean exceeds p0: the four are the whole test
            assert max(_mean(s, p_in, p_out, eps) for s in RATIOS) > p0 - 1e-12


def test_a_huge_epsilon_does_not_overflow():
    for a, b in itertools.product((0.0, 1.0), repeat=2):
        assert all(0.0 <= v <= 1.0 for v in ratio_statistics(a, b, 1e6).values())
    bets = PairBets(1e6, max_pair_accuracy(1e6, 0.0), 1.0)
    for _ in range(50):
        bets.update({True: 1.0, False: 0.0})
    assert math.isfinite(bets.e) and bets.e <= 1.0 + 1e-9  # p0 = 1: nothing can be shown against it


def test_the_rare_release_exceeds_one_ratio_while_the_pair_accuracy_stays_inside():
    """esa 4 x 2 at a tenth of its noise, claim 2 (gen_power's design model): y1 with 0.082 / 0.0026.
    The pair accuracy (the average of two ratios) sits far inside its null; ratio_y1_in does not."""
    p_in, p_out = alternative_release(_design("esa", 2.0), "noise_tenth")
    p0 = max_pair_accuracy(2.0, 1e-5)
    acc = 0.5 * (p_in + 1.0 - p_out)
    assert acc < p0 - 0.3
    assert _mean("ratio_y1_in", p_in, p_out, 2.0) > p0
    assert not _dp(p_in, p_out, 2.0, 1e-5)


def test_a_release_on_a_ratio_boundary_is_no_violation_beyond_level():
    """y1 with e^2 x 0.01 + delta with the canary and 0.01 without: DP at claim 2 exactly on the
    inequality ratio_y1_in bets on. 1000 audits looking after every pair up to 1000 trials: false
    violations <= alpha + 3 binomial sd (Ville bounds the mixture at any stopping time)."""
    runs = 1000
    q = 0.01
    target = FixedRates(math.exp(2.0) * q + 1e-5, q)
    res = [run_gen_sequential(target, EX, ATTACK, claimed_epsilon=2.0, delta=1e-5, design=None, alternatives=REQUIRED,
                              alpha=ALPHA, cap=1000, rng=np.random.default_rng(seed)) for seed in range(runs)]
    false = sum(r.verdict == "violation" for r in res)
    assert false / runs <= ALPHA + 3.0 * math.sqrt(ALPHA * (1 - ALPHA) / runs), false


def test_esa_at_a_tenth_of_its_noise_is_a_black_box_violation():
    """The issue-28 gap: black-box esa on 4 partitions at a tenth of its noise (design-model target,
    claim 2, the job's "auto" cap of 10,000 trials) was inconclusive in every audit; the benchmark
    (bench_gen_sequential.py, other seeds) finds 95 of 100 violations: the bound asks >= 85 of 100
    (3 binomial sd below 0.95)."""
    d = _design("esa", 2.0)
    res = [run_gen_sequential(DesignModelTarget(d, "noise_tenth"), EX, ATTACK, claimed_epsilon=2.0, delta=1e-5,
                              design=d, alternatives=REQUIRED, alpha=ALPHA, cap=10_000, rng=np.random.default_rng(s))
           for s in range(100)]
    counts = verdict_counts(res)
    assert counts.get("violation", 0) >= 85 and not counts.get("pass"), counts
    v = next(r for r in res if r.verdict == "violation")
    assert "y1 was released in" in v.reason and "allows at most" in v.reason, v.reason
    assert v.e_components["ratio_y1_in"] > v.e_components["accuracy"]


def test_design_weights_move_half_onto_the_bettor_the_slowest_alternative_needs():
    """esa 4 x 2: noise_tenth exceeds ratio_y1_in only, so it gets half the weight (0.6); on the one-unit
    token designs every required alternative wins nearly every pair, where 'both right' grows fastest:
    it gets half (0.625). With no design model, or no law that violates the claim: the default weights."""
    from app.audit.eprocess import max_both_right
    from app.audit.gen_power import alternative_ties
    from app.audit.pair_bets import design_weights

    for eps in (1.0, 2.0):
        p0, c2 = max_pair_accuracy(eps, 1e-5), max_both_right(eps, 1e-5)
        for mech, boosted in (("esa", "ratio_y1_in"), ("clip_softmax", "both_right"), ("mozo", "both_right")):
            d = _design(mech, eps)
            laws = [alternative_release(d, a, t) for a in REQUIRED for t in alternative_ties(a)]
            w = design_weights(laws, eps, p0, c2, ALPHA)
            assert math.isclose(sum(w.values()), 1.0) and min(w.values()) > 0.0
            assert {n for n in WEIGHTS if w[n] > WEIGHTS[n]} == {boosted}, (mech, eps, w)
            assert math.isclose(w[boosted], 0.5 * WEIGHTS[boosted] + 0.5)
        assert design_weights([], eps, p0, c2) == WEIGHTS
        assert design_weights([(0.5, 0.5), (0.6, 0.4)], eps, p0, c2) == WEIGHTS  # inside every claim here
    with pytest.raises(ValueError):
        PairBets(1.0, 0.7, 0.5, {**WEIGHTS, "accuracy": 0.5})


def test_growth_rates_match_the_closed_forms_of_a_perfect_release():
    """A release that is always right: 'both right' at fraction b gains ln(1 + b (1 - c2) / c2) per pair,
    the pair accuracy ln(1 + b (1 - p0) / p0), at the largest fraction; the mirrored bets lose, so 0."""
    from app.audit.eprocess import B_MAX, max_both_right
    from app.audit.pair_bets import growth_rates

    for eps in (0.5, 1.0, 2.0, 4.0):
        p0, c2 = max_pair_accuracy(eps, 0.0), max_both_right(eps, 0.0)
        g = growth_rates(1.0, 0.0, eps, p0, c2)
        assert math.isclose(g["both_right"], math.log1p(B_MAX * (1 - c2) / c2), rel_tol=1e-12)
        assert math.isclose(g["accuracy"], math.log1p(B_MAX * (1 - p0) / p0), rel_tol=1e-12)
        assert g["both_right_mirrored"] == 0.0 and g["accuracy_mirrored"] == 0.0
        # inside the claim nothing grows
        assert max(growth_rates(p0, 1 - p0, eps, p0, c2).values()) <= 1e-9


def test_an_inconclusive_audit_says_when_the_shares_exceed_an_inequality():
    """At a cap too small for the bet (2000 trials), esa at a tenth of its noise mostly ends inconclusive;
    the result then says which inequality its observed shares exceed (as point estimates, not
    evidence); a correct release's inconclusive audits never carry that note."""
    d = _design("esa", 2.0)
    res = [run_gen_sequential(DesignModelTarget(d, "noise_tenth"), EX, ATTACK, claimed_epsilon=2.0, delta=1e-5,
                              design=d, alternatives=REQUIRED, alpha=ALPHA, cap=400, rng=np.random.default_rng(s))
           for s in range(20)]
    inconclusive = [r for r in res if r.verdict == "inconclusive"]
    assert len(inconclusive) >= 15
    noted = [r for r in inconclusive if any(n.startswith("not evidence yet: y1 was released") for n in r.notes)]
    assert len(noted) >= 0.7 * len(inconclusive), [r.notes for r in inconclusive[:2]]
    ok = [run_gen_sequential(DesignModelTarget(d), EX, ATTACK, claimed_epsilon=2.0, delta=1e-5, design=d,
                             alternatives=REQUIRED, alpha=ALPHA, cap=40, rng=np.random.default_rng(s)) for s in range(20)]
    assert not any(n.startswith("not evidence yet") for r in ok for n in r.notes)
