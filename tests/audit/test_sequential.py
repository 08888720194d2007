"""Sequential audits (issue 28): anytime-valid verdicts, type-I error by simulation.

Each simulation uses a fixed seed and a tolerance of 3 binomial standard deviations of the
observed rate around the stated level (a one-sided check: the rate may be far below it).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.audit import Canary, SimulatedVotingTarget, resolve_query, rnm_noise
from app.audit.eprocess import max_both_right
from app.audit.power import DEFAULT_MIN_DETECTION
from app.audit.probe import probe_arm
from app.audit.sequential import BettingEProcess, max_pair_accuracy, pass_threshold, run_sequential
from app.audit.targets import Observation

EX = [(f"text {i}", "b") for i in range(8)]
CANARY = Canary("hex", "00ff00ff00ff", "a")
ATTACK = resolve_query("input_output", CANARY, ["a", "b"], EX, None)
MISS = 1.0 - DEFAULT_MIN_DETECTION  # the pass's level: P(pass | the target is a required alternative) <= MISS


class BoundaryRR:
    """Randomized response exactly at the claim: releases the canary label with probability
    e^eps / (1 + e^eps) with the canary and 1 / (1 + e^eps) without -- the pair accuracy equals
    p0, the hardest correct mechanism for the violation test (the least favourable null)."""

    name = "boundary-rr"
    white_box = False

    def __init__(self, epsilon: float) -> None:
        self.p = math.exp(epsilon) / (1.0 + math.exp(epsilon))

    def observe(self, context, attack, rng):
        present = attack.canary.exemplar() in context
        q = self.p if present else 1.0 - self.p
        return Observation(attack.labels[attack.positive_index] if rng.random() < q else attack.labels[1])


class Seen:
    """What a black-box auditor sees of a target: the released label, and the clean votes only where
    ``votes`` (a gateway that reports them without its noisy scores)."""

    white_box = False

    def __init__(self, target, votes: bool = False) -> None:
        self.target, self.votes, self.name = target, votes, "seen"
        self.votes_with, self.votes_without = target.votes_with, target.votes_without
        self.noise_model = target.noise_model

    def observe(self, context, attack, rng):
        o = self.target.observe(context, attack, rng)
        return Observation(o.label, None, o.clean_votes if self.votes else None)


def _limit(level: float, runs: int) -> float:
    return level + 3.0 * math.sqrt(level * (1.0 - level) / runs)


def test_betting_process_is_a_test_supermartingale_at_its_null():
    """Y ~ Bernoulli(m) exactly at the null: P(sup wealth >= 1/alpha) <= alpha over 2000 paths."""
    rng = np.random.default_rng(0)
    m, alpha, runs = 0.3, 0.1, 2000
    hits = 0
    for _ in range(runs):
        p = BettingEProcess(+1)
        for y in rng.random(100) < m:
            p.update(float(y), m)
            if p.e >= 1 / alpha:
                hits += 1
                break
    assert hits / runs <= _limit(alpha, runs)


@pytest.mark.parametrize("side,m,plug", [(+1, 0.063, 0.3), (-1, 0.683, 0.34), (-1, 0.683, 0.0)])
def test_plug_in_mix_is_a_test_supermartingale_at_its_null(side, m, plug):
    """The spread (+1 against 0.25 x floor) and leak (-1 against the DP bound) bettors: Y ~ Bernoulli(m)
    exactly at the null while the plug-in says the claim's mean (Kelly bets from the first trial, the
    most aggressive case): P(sup e >= 1/alpha) <= alpha over 2000 paths of 150 trials (+ 3 sd). A
    plug-in that peeked at the trial's own y would break it."""
    from app.audit.eprocess import PlugInMix

    rng = np.random.default_rng(1)
    alpha, runs = 0.1, 2000
    hits = 0
    for _ in range(runs):
        p = PlugInMix(side)
        for y in rng.random(150) < m:
            p.update(float(y), m, plug)
            if p.e >= 1 / alpha:
                hits += 1
                break
    assert hits / runs <= _limit(alpha, runs), hits


def test_boundary_mechanism_false_violation_rate_within_level():
    """1000 sequential audits of a mechanism exactly at its claim, each looking after every batch
    up to 200 trials: the share that ends 'violation' is <= alpha (Ville), not just at one look."""
    alpha, runs, eps = 0.05, 1000, 1.0
    target = BoundaryRR(eps)
    false = 0
    for seed in range(runs):
        r = run_sequential(target, EX, ATTACK, claimed_epsilon=eps, delta=0.0, noise=None, partitions=None,
                           alternatives=[], alpha=alpha, cap=200, rng=np.random.default_rng(seed), batch_pairs=5)
        false += r.verdict == "violation"
    assert false / runs <= _limit(alpha, runs), false


@pytest.mark.parametrize("view", ["white-box", "votes", "black-box"])
def test_correct_rnm_never_violates_beyond_level_and_mostly_passes(view):
    """1000 audits of a correct simulated rnm (Gaussian, 4 partitions, one vote moves) with the
    release floor in the violation e-process, seen white-box (the noise evidence too), with its
    clean votes, or by its labels alone (the design vote model): false violations <= alpha; the
    pass comes early."""
    alpha, runs, eps, t = 0.05, 1000, 1.0, 4
    noise = rnm_noise({"epsilon": eps, "delta": 1e-5, "partitions": t, "shots_per_partition": 2}, 8)
    sim = SimulatedVotingTarget([1, t - 1], [0, t], noise)
    target = sim if view == "white-box" else Seen(sim, votes=view == "votes")
    verdicts = []
    for seed in range(runs):
        r = run_sequential(target, EX, ATTACK, claimed_epsilon=eps, delta=1e-5, noise=noise, partitions=t,
                           alternatives=["noise_quarter", "no_noise"], alpha=alpha, cap=200,
                           rng=np.random.default_rng(seed))
        verdicts.append(r.verdict)
    assert verdicts.count("violation") / runs <= _limit(alpha, runs)
    assert verdicts.count("pass") / runs > 0.9


def test_correct_rnm_with_the_probe_never_violates_beyond_level():
    """The probe (one partition, the canary decides the vote: the least favourable design for its
    pair statistics) drawn first, then the design: 1000 black-box audits of a correct rnm at epsilon 1
    and 1000 at epsilon 2 end 'violation' at most at the level."""
    alpha, runs, t = 0.05, 1000, 4
    for eps in (1.0, 2.0):
        noise = rnm_noise({"epsilon": eps, "delta": 1e-5, "partitions": t, "shots_per_partition": 2}, 8)
        target = Seen(SimulatedVotingTarget([1, t - 1], [0, t], noise))
        probe = probe_arm(target.target, 8, noise, t)
        assert probe is not None and probe.partitions == 1
        probe.target = Seen(probe.target)
        false = 0
        for seed in range(runs):
            r = run_sequential(target, EX, ATTACK, claimed_epsilon=eps, delta=1e-5, noise=noise, partitions=t,
                               alternatives=["noise_quarter", "no_noise"], alpha=alpha, cap=200,
                               rng=np.random.default_rng(seed), probe=probe)
            false += r.verdict == "violation"
        assert false / runs <= _limit(alpha, runs), (eps, false)


@pytest.mark.parametrize("view", ["white-box", "black-box"])
@pytest.mark.parametrize("bug", ["noise_quarter", "noise_tenth", {"noise_multiplier": 1e-9}])
def test_broken_rnm_is_a_violation_and_reports_trials_and_e_value(bug, view):
    noise = rnm_noise({"epsilon": 1.0, "delta": 1e-5, "partitions": 4, "shots_per_partition": 2}, 8, bug)
    sim = SimulatedVotingTarget([1, 3], [0, 4], noise)
    r = run_sequential(sim if view == "white-box" else Seen(sim), EX, ATTACK, claimed_epsilon=1.0, delta=1e-5,
                       noise=noise, partitions=4, alternatives=["noise_quarter", "no_noise"], alpha=0.05, cap=4000,
                       rng=np.random.default_rng(1))
    assert r.verdict == "violation", r.reason
    assert r.e_violation >= 20 and 0 < r.trials < 400 and f"after {r.trials} trials" in r.reason


def test_cap_is_inconclusive_with_what_was_reached():
    """A correct mechanism and a cap too small to reject noise_quarter: inconclusive, with the
    e-values reached."""
    noise = rnm_noise({"epsilon": 1.0, "delta": 1e-5, "partitions": 4, "shots_per_partition": 2}, 8)
    r = run_sequential(Seen(SimulatedVotingTarget([1, 3], [0, 4], noise), votes=True), EX, ATTACK,
                       claimed_epsilon=1.0, delta=1e-5,
                       noise=noise, partitions=4, alternatives=["noise_quarter"], alpha=0.05, cap=6,
                       rng=np.random.default_rng(2))
    assert r.verdict == "inconclusive" and r.trials == 6 and "cap of 6 trials" in r.reason, r.reason
    assert r.e_alternatives["noise_quarter"] < 20 and r.e_violation < 20


def test_observed_votes_reject_no_noise_where_the_bound_never_could():
    """3 labels, 2 partitions: the canary's vote ties the other, so the bound never sees a missing
    noise (the planner says so). With the clean votes the target reports, a noise-free argmax
    predicts deterministic releases; the correct target's random releases reject it: pass."""
    attack = resolve_query("inquiry", CANARY, ["a", "b"], EX, None)
    k, neg = len(attack.labels), attack.negative_index
    noise = rnm_noise({"epsilon": 2.0, "delta": 1e-5, "partitions": 2, "shots_per_partition": 4}, 8)
    vw, vo = np.zeros(k), np.zeros(k)
    vw[attack.positive_index], vw[neg], vo[neg] = 1, 1, 2
    r = run_sequential(Seen(SimulatedVotingTarget(vw, vo, noise), votes=True), EX, attack, claimed_epsilon=2.0,
                       delta=1e-5, noise=noise, partitions=2, alternatives=["no_noise"], alpha=0.05, cap=2000,
                       rng=np.random.default_rng(2))
    assert r.verdict == "pass" and r.vote_model == "observed" and r.trials < 200, r.reason


def test_max_pair_accuracy_matches_the_two_constraints():
    for eps, delta in [(0.5, 0.0), (1.0, 1e-5), (3.0, 0.01)]:
        a = max_pair_accuracy(eps, delta)
        assert a == pytest.approx(math.exp(eps) * (1 - a) + delta)  # on the boundary of 1 - FPR <= e^eps (1 - TPR) + delta


def test_dp_release_bound_is_the_largest_p_in_both_constraints_allow():
    """Against a brute-force grid of P(in) (step 1e-5): the largest value with P(in) <= e^eps out + delta
    and 1 - out <= e^eps (1 - P(in)) + delta, at 0, 1 and in between; huge epsilon gives 1."""
    from app.audit.eprocess import dp_release_bound

    grid = np.linspace(0.0, 1.0, 100_001)
    for eps, delta in [(0.5, 0.0), (1.0, 1e-5), (2.0, 1e-5), (3.0, 0.01)]:
        for out in (0.0, 0.1, 0.2514, 0.5, 0.9, 1.0):
            ok = grid[(grid <= math.exp(eps) * out + delta) & (1 - out <= math.exp(eps) * (1 - grid) + delta + 1e-12)]
            assert dp_release_bound(out, eps, delta) == pytest.approx(ok.max(), abs=1e-5), (eps, delta, out)
    assert dp_release_bound(0.0, 1e308, 0.0) == 1.0


def test_max_both_right_is_the_maximum_over_the_dp_constraints():
    """p x a over a fine grid of (TPR, 1 - FPR) meeting both (epsilon, delta) constraints never
    exceeds p0^2, and the grid comes within its resolution of it."""
    g = np.linspace(0.0, 1.0, 2001)
    p, a = np.meshgrid(g, g)
    for eps, delta in [(0.25, 0.0), (1.0, 1e-5), (2.0, 1e-5), (3.0, 0.01)]:
        ok = (p <= math.exp(eps) * (1 - a) + delta + 1e-12) & (a <= math.exp(eps) * (1 - p) + delta + 1e-12)
        best = float(np.max((p * a)[ok]))
        assert best <= max_both_right(eps, delta) + 1e-12
        assert best >= max_both_right(eps, delta) - 2e-3


def test_noise_log_densities_equal_scipys():
    from scipy import stats

    from app.audit.eprocess import _logpdf

    z = np.linspace(-30, 30, 601)
    for kind, law in (("gaussian", stats.norm), ("laplace", stats.laplace), ("gumbel", stats.gumbel_r)):
        for m in (1.0, 0.5, 0.1):
            ref = law.logpdf(z / m) - math.log(m)
            ok = np.isfinite(ref)
            assert np.allclose(_logpdf(kind, z, m)[ok], ref[ok], rtol=1e-12, atol=1e-9), (kind, m)


def test_white_box_noise_evidence_is_valid_under_the_claim_and_under_each_alternative():
    """Residuals drawn from the claimed noise: the violation mixture crosses 1/alpha in <= alpha of
    1000 paths of 20 answers; drawn from an alternative's noise, that alternative's likelihood ratio
    does."""
    from app.audit.eprocess import NoiseEvidence
    from app.audit.power import alternative_noise

    alpha, runs = 0.05, 1000
    for kind in ("gaussian", "laplace", "gumbel"):
        claimed = rnm_noise({"epsilon": 1.0, "delta": 1e-5, "partitions": 4, "noise": kind}, 8)
        alts = {a: alternative_noise(claimed, a) for a in ("noise_half", "noise_quarter")}
        rng = np.random.default_rng(7)
        for truth in (None, "noise_half", "noise_quarter"):
            law = claimed if truth is None else alts[truth]
            hits = 0
            for _ in range(runs):
                ev = NoiseEvidence(claimed, alts)
                for _ in range(20):
                    clean = np.array([1.0, 3.0])
                    noisy = law.sample(clean, rng)
                    ev.update(clean, noisy, int(np.argmax(noisy)))
                    e = ev.e_violation if truth is None else ev.e_alternative(truth)
                    if e >= 1 / alpha:
                        hits += 1
                        break
            assert hits / runs <= _limit(alpha, runs), (kind, truth, hits)


def test_white_box_catches_winner_only_at_once_and_passes_a_correct_target_in_a_few_trials():
    noise = rnm_noise({"epsilon": 1.0, "delta": 1e-5, "partitions": 4, "shots_per_partition": 2}, 8)
    alts = ["noise_quarter", "winner_only", "no_noise"]
    r = run_sequential(SimulatedVotingTarget([1, 3], [0, 4], noise.with_bug("winner_only")), EX, ATTACK,
                       claimed_epsilon=1.0, delta=1e-5, noise=noise, partitions=4, alternatives=alts, alpha=0.05,
                       cap=2000, rng=np.random.default_rng(3))
    assert r.verdict == "violation" and r.trials == 2 and any("got no noise" in n for n in r.notes), r.reason
    r = run_sequential(SimulatedVotingTarget([1, 3], [0, 4], noise), EX, ATTACK, claimed_epsilon=1.0, delta=1e-5,
                       noise=noise, partitions=4, alternatives=alts, alpha=0.05, cap=2000,
                       rng=np.random.default_rng(3))
    assert r.verdict == "pass" and r.trials <= 10, r.reason


@pytest.mark.parametrize("eps", [1.0, 2.0])
@pytest.mark.parametrize("bug", ["noise_tenth", {"noise_multiplier": 1e-12}])
def test_the_probe_catches_a_gross_violation_in_a_fifth_of_the_prompts(eps, bug):
    """Black-box, 12 exemplars, 5 partitions x 2 shots (the planner's design for this claim: 30 trials
    at epsilon 1, 40 at epsilon 2, i.e. 150 / 200 prompts): with the probe, the mean prompts to a
    violation over 40 seeded audits are <= a fifth of those; every audit ends 'violation'."""
    n, t = 12, 5
    ex = [(f"text {i}", "b") for i in range(n)]
    attack = resolve_query("input_output", CANARY, ["a", "b"], ex, None)
    params = {"epsilon": eps, "delta": 1e-5, "partitions": t, "shots_per_partition": 2}
    noise = rnm_noise(params, n)
    sim = SimulatedVotingTarget([1, t - 1], [0, t], rnm_noise(params, n, bug))
    probe = probe_arm(sim, n, noise, t)
    probe.target = Seen(probe.target)
    prompts = []
    for seed in range(40):
        r = run_sequential(Seen(sim), ex, attack, claimed_epsilon=eps, delta=1e-5, noise=noise, partitions=t,
                           alternatives=["noise_quarter", "no_noise"], alpha=0.05, cap=2000,
                           rng=np.random.default_rng(seed), probe=probe)
        assert r.verdict == "violation", r.reason
        prompts.append(r.prompts)
    assert np.mean(prompts) <= (150 if eps == 1.0 else 200) / 5, np.mean(prompts)


def test_probe_applies_to_rnm_designs_of_several_partitions_and_few_exemplars_only():
    noise = rnm_noise({"epsilon": 1.0, "delta": 1e-5, "partitions": 4, "shots_per_partition": 2}, 8)
    sim = SimulatedVotingTarget([1, 3], [0, 4], noise)
    assert probe_arm(sim, 8, noise, 1) is None  # already one partition
    assert probe_arm(sim, 64, noise, 4) is None  # more exemplars than one prompt should hold
    assert probe_arm(sim, 8, None, 4) is None  # no noise model
    assert probe_arm(SimulatedVotingTarget([2, 2], [2, 2], noise), 8, noise, 4) is None  # no vote moves
    arm = probe_arm(sim, 8, noise, 4)
    assert arm is not None and list(arm.target.votes_with) == [1, 0] and list(arm.target.votes_without) == [0, 1]


def _as_alternative(alternative: str, view: str, t: int = 4, eps: float = 1.0):
    """(target, claimed noise, probe): a simulated rnm that IS ``alternative`` (one vote moves, as the
    design model says), seen white-box or by its labels alone, and the job's one-partition probe."""
    from app.audit.power import ALTERNATIVES

    params = {"epsilon": eps, "delta": 1e-5, "partitions": t, "shots_per_partition": 2}
    noise = rnm_noise(params, 8)
    bug = {k: (v if v > 0 else 1e-300) if k == "noise_multiplier" else v for k, v in ALTERNATIVES[alternative].items()}
    sim = SimulatedVotingTarget([1, t - 1], [0, t], rnm_noise(params, 8, bug))
    probe = probe_arm(sim, 8, noise, t)
    if view == "black-box":
        probe.target = Seen(probe.target)
    return (sim if view == "white-box" else Seen(sim)), noise, probe


def _audits_of(alternative: str, view: str, runs: int, min_detection: float, eps: float = 1.0):
    target, noise, probe = _as_alternative(alternative, view, eps=eps)
    return [run_sequential(target, EX, ATTACK, claimed_epsilon=eps, delta=1e-5, noise=noise, partitions=4,
                           alternatives=[alternative], alpha=0.05, cap=200, rng=np.random.default_rng(seed),
                           probe=probe, min_detection=min_detection) for seed in range(runs)]


@pytest.mark.parametrize("view", ["white-box", "black-box"])
@pytest.mark.parametrize("alternative", ["noise_quarter", "no_noise", "noise_half"])
def test_a_target_that_is_the_alternative_passes_at_most_at_the_pass_level(alternative, view):
    """The pass verdict's type-I error: 1000 audits of a target that IS a required alternative
    (its noise x 1/4, none, or x 1/2: the one nearest the claim, where the pass level binds), each
    looking after every pair up to 200 trials, with the probe: 'pass' in at most 1 - min_detection
    (+ 3 binomial sd) of them -- the miss rate the planner's fixed design promises (one power
    model), not alpha: the alternative is rejected at 1/(1 - min_detection) = 10."""
    runs = 1000
    res = _audits_of(alternative, view, runs, DEFAULT_MIN_DETECTION)
    passes = sum(r.verdict == "pass" for r in res)
    assert passes / runs <= _limit(MISS, runs), passes
    assert all(r.pass_level == pytest.approx(MISS) for r in res)


def test_the_pass_level_follows_min_detection():
    """config.power.min_detection 0.95: the alternative is rejected at 1/(1 - 0.95) = 20, so a
    target that IS noise_half (black-box, the case nearest the claim) passes in at most 0.05 + 3 sd
    of 1000 audits, and every pass has its e-value >= 20; the result and the reason say so. The
    correct target, same seeds, at 0.9 and 0.95: every pass at its own threshold, some passes at
    0.9 stop between 10 and 20 (the threshold is 1/(1 - min_detection), not 1/alpha = 20), and
    0.95 needs more trials on average."""
    runs = 1000
    res = _audits_of("noise_half", "black-box", runs, 0.95)
    passes = [r for r in res if r.verdict == "pass"]
    assert len(passes) / runs <= _limit(0.05, runs), len(passes)
    first = lambda r: min(v["e"] for v in r.rejected.values())  # noqa: E731 - each null's e at its first crossing
    assert all(first(r) >= 20.0 for r in passes)
    assert all(r.pass_level == pytest.approx(0.05) for r in res)

    t, eps = 4, 1.0
    noise = rnm_noise({"epsilon": eps, "delta": 1e-5, "partitions": t, "shots_per_partition": 2}, 8)
    target = Seen(SimulatedVotingTarget([1, t - 1], [0, t], noise))
    by = {md: [run_sequential(target, EX, ATTACK, claimed_epsilon=eps, delta=1e-5, noise=noise, partitions=t,
                              alternatives=["noise_quarter", "no_noise"], alpha=0.05, cap=400,
                              rng=np.random.default_rng(seed), min_detection=md) for seed in range(200)]
          for md in (0.9, 0.95)}
    assert any(first(r) < 20.0 for r in by[0.9] if r.verdict == "pass")
    assert np.mean([r.trials for r in by[0.95]]) > np.mean([r.trials for r in by[0.9]])
    for md, res in by.items():
        ok = [r for r in res if r.verdict == "pass"]
        assert len(ok) > 0.9 * len(res) and all(first(r) >= 1 / (1 - md) for r in ok)
        assert f"1/(1 - min_detection) = {1 / (1 - md):g}" in ok[0].reason
    assert pass_threshold(0.05, 0.95) == pytest.approx(20.0) and pass_threshold(0.05, 0.9) == pytest.approx(10.0)


def test_a_target_more_broken_than_the_alternative_does_not_pass():
    """Required: noise_half only. The target has a sixth of the noise (more broken than the
    alternative), seen by its clean votes; the release floor is left out so that the pass test is
    what decides (the pair bets barely move at 4 partitions). A two-sided bet would reject
    noise_half for it and pass; the directional bet keeps P(pass) <= 1 - min_detection."""
    alpha, runs, t = 0.05, 400, 4
    params = {"epsilon": 1.0, "delta": 1e-5, "partitions": t, "shots_per_partition": 2}
    noise = rnm_noise(params, 8)
    sim = Seen(SimulatedVotingTarget([1, t - 1], [0, t], rnm_noise(params, 8, {"noise_multiplier": 1 / 6})),
               votes=True)
    passes = 0
    for seed in range(runs):
        r = run_sequential(sim, EX, ATTACK, claimed_epsilon=1.0, delta=1e-5, noise=noise, partitions=t,
                           alternatives=["noise_half"], alpha=alpha, cap=200, rng=np.random.default_rng(seed),
                           release_floor=False)
        passes += r.verdict == "pass"
    assert passes / runs <= _limit(MISS, runs), passes


class Inverted(Seen):
    """A label-mapping bug: the gateway releases the other label of two (black-box)."""

    def observe(self, context, attack, rng):
        lab = self.target.observe(context, attack, rng).label
        return Observation(attack.labels[1 - attack.labels.index(lab)])


@pytest.mark.parametrize("bug,runs", [({"noise_multiplier": 1e-300}, 200), ({"noise_multiplier": 0.25}, 1000)])
def test_a_near_deterministic_release_outside_the_alternatives_does_not_pass(bug, runs):
    """Behind no noise (or a quarter of it) the inverted gateway releases the non-canary label ~always:
    no noise-multiplier alternative describes it, and its directional bets reject every one of them (its
    releases lie beyond the claim), so it passed after 6 trials before the spread check. Every label's
    release rate must now be shown above SPREAD x floor (the claim's floor holds whatever the votes).
    With no noise that label is never released: never a pass (every SPREAD > 0 excludes it), and the floor
    test finds the violation. Behind a quarter of the noise it is released with probability 0.054 at 5
    partitions: below 0.25 x 0.251 (SPREAD until stop 44, when Ville bounded P(pass) by the pass level)
    but above 0.1 x 0.251 (SPREAD now), so the bound here is the floor test's lead in the race with the
    pass (0 of 300 passes at either SPREAD, measured; asserted at the pass level + 3 sd)."""
    alpha, t, eps = 0.05, 5, 1.0
    params = {"epsilon": eps, "delta": 1e-5, "partitions": t, "shots_per_partition": 1}
    noise = rnm_noise(params, 8)
    sim = Inverted(SimulatedVotingTarget([1, t - 1], [0, t], rnm_noise(params, 8, bug)))
    verdicts = []
    for seed in range(runs):
        r = run_sequential(sim, EX, ATTACK, claimed_epsilon=eps, delta=1e-5, noise=noise, partitions=t,
                           alternatives=["noise_quarter", "no_noise"], alpha=alpha, cap=200,
                           rng=np.random.default_rng(seed))
        verdicts.append(r.verdict)
    passes = verdicts.count("pass")
    if bug["noise_multiplier"] < 1e-6:
        assert passes == 0 and verdicts.count("violation") == runs, verdicts[:5]
    else:
        assert passes / runs <= _limit(MISS, runs), passes


class Leaky:
    """Releases the canary's label with probability p_in with the canary and p_out without (black-box):
    p_in = 1, p_out = 0 is a non-private gateway (plain ICL over every exemplar, a copying model)."""

    white_box = False
    name = "leaky"

    def __init__(self, p_in: float, p_out: float) -> None:
        self.p_in, self.p_out = p_in, p_out

    def observe(self, context, attack, rng):
        p = self.p_in if attack.canary.exemplar() in context else self.p_out
        return Observation(attack.labels[attack.positive_index] if rng.random() < p else attack.labels[1])


def test_a_non_private_gateway_is_a_violation_never_a_pass():
    """The canary's label always with the canary, never without: every noise-multiplier alternative's
    directional bet rejects it (its release lies beyond the claim on the canary's side) and every label is
    released half the time, so it passed 100 of 100 audits at 5 partitions without the probe (the probe
    needs <= 32 exemplars). A pass now also rejects "P(canary label | in) >= the most (eps, delta)-DP
    allows beside the claim's rate without it", which it never can; the pair bets find the violation."""
    t, eps = 5, 1.0
    noise = rnm_noise({"epsilon": eps, "delta": 1e-5, "partitions": t, "shots_per_partition": 1}, 8)
    verdicts = [run_sequential(Leaky(1.0, 0.0), EX, ATTACK, claimed_epsilon=eps, delta=1e-5, noise=noise, partitions=t,
                               alternatives=["noise_quarter", "no_noise"], alpha=0.05, cap=400,
                               rng=np.random.default_rng(seed)).verdict for seed in range(200)]
    assert verdicts.count("violation") == 200, {v: verdicts.count(v) for v in set(verdicts)}


def test_a_target_at_the_leak_bound_passes_at_most_at_the_level():
    """The leak null's boundary: P(canary label | in) = the bound exactly (e^eps x the claim's rate without
    the canary, + delta), P(... | out) = the claim's rate: DP-tight for that event, so the violation bets
    stay quiet, and a pass needs the leak process to cross, which (rejected the first time, sticky) it
    does with probability <= 1 - min_detection (the pass level) over 600 audits up to 200 trials (+ 3 binomial sd)."""
    from app.audit.power import claimed_noise, design_votes, release_probability
    from app.audit.eprocess import dp_release_bound

    alpha, runs, t, eps = 0.05, 600, 5, 1.0
    noise = rnm_noise({"epsilon": eps, "delta": 1e-5, "partitions": t, "shots_per_partition": 1}, 8)
    out = float(release_probability(claimed_noise(noise), design_votes(2, t, 0, 1)[1], 0, ties="positive",
                                    draws=200_000)[0])
    target = Leaky(dp_release_bound(out, eps, 1e-5), out)
    passes = sum(run_sequential(target, EX, ATTACK, claimed_epsilon=eps, delta=1e-5, noise=noise, partitions=t,
                                alternatives=["noise_quarter", "no_noise"], alpha=alpha, cap=200,
                                rng=np.random.default_rng(seed)).verdict == "pass" for seed in range(runs))
    assert passes / runs <= _limit(MISS, runs), passes
