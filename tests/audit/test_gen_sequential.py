"""Sequential generation audits (issue 28 item 3): ``app.audit.gen_sequential``.

Type-I error by simulation (fixed seeds; a rate is allowed up to its level + 3 binomial standard
deviations of 1000 runs, one-sided: a violation's level alpha, a pass's 1 - min_detection), every broken alternative caught, the release laws equal to
gen_power's (one power model), and the real ``esa`` code (a model that follows the signal query)
passed when correct and caught when its noise is below its claim.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.audit import Canary
from app.audit.gen_power import GEN_ALTERNATIVES, gen_design_power, generation_design
from app.audit.gen_queries import resolve_generation_query
from app.audit.gen_sequential import ASSUMED_NOTE, DesignModelTarget, run_gen_sequential
from app.audit.power import DEFAULT_MIN_DETECTION
from app.audit.sequential import max_pair_accuracy
from app.audit.targets import Observation
from tests.audit.test_gen_power import CANARY, D, EX

ATTACK = resolve_generation_query("signal_text", Canary("false_fact", CANARY, CANARY))
REQUIRED = ("noise_tenth", "no_noise", "non_private")
ALPHA, RUNS = 0.05, 1000
MISS = 1.0 - DEFAULT_MIN_DETECTION  # the pass level: P(pass | the target is a required alternative) <= MISS
# Designs where a pass is reachable (claim epsilon 1): esa with 4 partitions of 2 shots (8 exemplars);
# the token mechanisms with one unit of 8 shots and one decisive token (max_tokens 1: the claim's
# epsilon is the token's; gen_power's planner proposes these).
DESIGNS = {
    "esa": ({"partitions": 4, "shots_per_partition": 2}, 8),
    "clip_softmax": ({"prompts": 1, "shots_per_prompt": 8}, 1),
    "poe": ({"experts": 1, "group_size": 8}, 1),
    "mozo": ({"experts": 1, "group_size": 8}, 1),
}


def _design(mech: str, eps: float = 1.0):
    params, tokens = DESIGNS[mech]
    return generation_design(mech, {"epsilon": eps, "delta": 1e-5, **params}, len(EX), max_tokens=tokens,
                             white_box=False, distance=D)


def _limit(level: float, runs: int = RUNS) -> float:
    return level + 3.0 * math.sqrt(level * (1.0 - level) / runs)


def _audits(target, design, eps: float = 1.0, cap: int = 400, runs: int = RUNS, alternatives=REQUIRED):
    return [run_gen_sequential(target, EX, ATTACK, claimed_epsilon=eps, delta=1e-5, design=design,
                               alternatives=alternatives, alpha=ALPHA, cap=cap, rng=np.random.default_rng(seed))
            for seed in range(runs)]


def fresh_audits(make, design, runs: int, *, eps: float, cap: int = 200, white_box: bool = True,
                 alternatives=REQUIRED):
    """``runs`` audits seeded 0 .. runs - 1, each of a fresh ``make()`` target (white-box by default)."""
    return [run_gen_sequential(make(), EX, ATTACK, claimed_epsilon=eps, delta=1e-5, design=design,
                               alternatives=alternatives, alpha=ALPHA, cap=cap, rng=np.random.default_rng(seed),
                               white_box=white_box) for seed in range(runs)]


def verdict_counts(res) -> dict[str, int]:
    v = [r.verdict for r in res]
    return {k: v.count(k) for k in set(v)}

class BoundaryRelease:
    """A generation release exactly at its claim, the least favourable correct one for the violation
    test: y1 with probability e^eps / (1 + e^eps) with the canary, 1 / (1 + e^eps) without (pair
    accuracy = p0 with delta 0)."""

    name = "boundary-release"
    white_box = False

    def __init__(self, eps: float) -> None:
        self.p = math.exp(eps) / (1.0 + math.exp(eps))

    def observe(self, context, attack, rng):
        q = self.p if attack.canary.exemplar() in context else 1.0 - self.p
        return Observation(attack.labels[0] if rng.random() < q else attack.labels[1])


def test_boundary_release_false_violation_rate_within_level():
    """1000 audits of a release exactly at epsilon 1 (delta 0), each looking after every batch of 4
    pairs up to 400 trials: the share ending 'violation' is <= alpha + 3 sd (Ville, at any look)."""
    res = [run_gen_sequential(BoundaryRelease(1.0), EX, ATTACK, claimed_epsilon=1.0, delta=0.0, design=None,
                              alternatives=REQUIRED, alpha=ALPHA, cap=400, rng=np.random.default_rng(seed))
           for seed in range(RUNS)]
    false = sum(r.verdict == "violation" for r in res)
    assert false / RUNS <= _limit(ALPHA), false
    assert not any(r.verdict == "pass" for r in res)  # no design model: never a pass
    assert "no alternative can be rejected" in res[0].notes[0]


@pytest.mark.parametrize("mech", list(DESIGNS))
def test_correct_mechanism_false_violations_within_level_and_it_passes(mech):
    """1000 audits of each mechanism's correct release (gen_power's law at the claimed scale, the
    default required alternatives): false violations <= alpha + 3 sd; the pass comes early."""
    d = _design(mech)
    res = _audits(DesignModelTarget(d), d)
    v = [r.verdict for r in res]
    assert v.count("violation") / RUNS <= _limit(ALPHA), v.count("violation")
    assert v.count("pass") / RUNS > 0.95, {k: v.count(k) for k in set(v)}
    assert np.mean([r.trials for r in res]) < 100
    r = res[0]
    assert r.vote_model == "assumed" and r.notes[0] == ASSUMED_NOTE and r.design["mechanism"] == mech
    # a pass says what it did not test: the alternatives not required (default: noise_half, noise_quarter)
    assert r.notes[1:] == ["a pass rules out the required alternatives only: noise_half, noise_quarter were not "
                           "tested (add them to power.alternatives)"], r.notes
    assert f"after {r.trials} trials" in r.reason and set(r.e_alternatives) == set(REQUIRED)


def _alternative_cases():
    for mech in ("esa", "clip_softmax"):
        for alt in (a for a in GEN_ALTERNATIVES if a != "claimed"):
            for tie in (("positive", "other") if GEN_ALTERNATIVES[alt] == 0.0 else ("positive",)):
                yield mech, alt, tie


@pytest.mark.parametrize("mech,alt,tie", list(_alternative_cases()))
def test_broken_alternative_is_caught(mech, alt, tie):
    """1000 audits of a target that IS alternative ``alt`` (its gen_power law, each tie-break of a
    clean argmax), all six alternatives required: a pass (which needs ``alt`` rejected at
    1/(1 - min_detection)) in at most 1 - min_detection + 3 sd (the fixed plan's miss rate). Where the alternative's pair accuracy exceeds the claim's p0 the audit also finds
    the violation in >= 95% within 200 trials (the black-box test sees it); where it does not (esa's noise-free
    mean with 4 partitions never moves past the midpoint: no black-box evidence against the claim
    exists) the audit ends at its cap, inconclusive."""
    d = _design(mech)
    target = DesignModelTarget(d, alt, tie)
    alts = tuple(a for a in GEN_ALTERNATIVES if a != "claimed")
    res = _audits(target, d, cap=200, alternatives=alts)
    v = [r.verdict for r in res]
    assert v.count("pass") / RUNS <= _limit(MISS), v.count("pass")
    acc = 0.5 * (target.p_in + 1.0 - target.p_out)
    p0 = max_pair_accuracy(1.0, 1e-5)
    if acc > p0 + 0.1:  # gross: noise_quarter (acc 0.88 vs p0 0.73) is the weakest of these, 98.8% measured
        assert v.count("violation") / RUNS >= 0.95, {k: v.count(k) for k in set(v)}
    elif acc <= p0:
        assert v.count("violation") / RUNS <= _limit(ALPHA)  # not a violation of the claim: Ville again


@pytest.mark.parametrize("mech", ["esa", "clip_softmax"])
def test_a_target_more_broken_than_an_alternative_does_not_pass(mech):
    """The directional bets' null is "the alternative, or further from the claim": a release at a
    twentieth of the noise (beyond noise_tenth) passes in at most 1 - min_detection + 3 sd of 1000 audits."""
    d = _design(mech)
    res = _audits(DesignModelTarget(d, 0.05), d, cap=200)
    assert sum(r.verdict == "pass" for r in res) / RUNS <= _limit(MISS)


@pytest.mark.parametrize("mech", list(DESIGNS))
def test_release_laws_are_gen_powers(mech):
    """The laws the sequential audit bets with are those gen_design_power reports (tpr, fpr) for the
    same design: one power model, no second formula."""
    d = _design(mech)
    alts = tuple(a for a in GEN_ALTERNATIVES if a != "claimed")
    r = run_gen_sequential(DesignModelTarget(d), EX, ATTACK, claimed_epsilon=1.0, delta=1e-5, design=d,
                           alternatives=alts, alpha=ALPHA, cap=4, rng=np.random.default_rng(0))
    rep = gen_design_power(d, trials=100, claimed_epsilon=1.0, confidence=0.95, threat_models=("black-box",),
                           delta=1e-5, required=alts)
    for a in alts:
        laws = r.laws[a]
        assert len(laws) == (2 if a == "no_noise" else 1)
        assert [rep.alternatives[a].tpr, rep.alternatives[a].fpr] in laws.values()  # the fixed power's worse tie


def test_cap_is_inconclusive_with_what_was_reached():
    d = _design("esa")
    r = run_gen_sequential(DesignModelTarget(d), EX, ATTACK, claimed_epsilon=1.0, delta=1e-5, design=d,
                           alternatives=REQUIRED, alpha=ALPHA, cap=6, rng=np.random.default_rng(3))
    assert r.verdict == "inconclusive" and r.trials == 6 and "cap of 6 trials" in r.reason, r.reason
    assert r.e_violation < 20 and min(r.e_alternatives.values()) < 20 and len(r.history) == 3  # a look per pair


def test_the_repeat_attack_is_refused():
    attack = resolve_generation_query("repeat", Canary("false_fact", CANARY, CANARY))
    with pytest.raises(ValueError, match="signal query"):
        run_gen_sequential(DesignModelTarget(_design("esa")), EX, attack, claimed_epsilon=1.0, delta=1e-5,
                           design=None, alternatives=REQUIRED, alpha=ALPHA, cap=10, rng=np.random.default_rng(0))


def test_real_mechanism_code_passes_when_correct_and_is_caught_when_broken():
    """The real esa mechanism (partitioning, calibrated Gaussian noise, nearest candidate) with a
    model that follows the signal query (the design model's premise): at its claim (epsilon 2, one
    partition) it passes. Broken: esa run at epsilon 400 while claiming 2 (sigma / 49) and the real
    full_context release (the non-private alternative) are violations; esa at epsilon 50 (sigma /
    13.3, beyond noise_tenth) is no black-box violation of this claim (its pair accuracy 0.84 stays
    below p0 = 0.88: the claim is loose for a one-dimensional decision), so the audit must not pass
    it and reaches its cap (a two-sided bet on noise_tenth would reject it and pass). Fixed seeds;
    the laws are the claimed configuration's."""
    from app.audit.gen_targets import GenerationMechanismTarget
    from tests.audit.test_gen_power import TEMPLATE, SignalEmbedder, SignalLM

    def esa(eps: float) -> GenerationMechanismTarget:  # one partition of all 8 exemplars: the canary is read
        return GenerationMechanismTarget(SignalLM(), SignalEmbedder(), "esa", {
            "epsilon": eps, "delta": 1e-5, "partitions": 1, "shots_per_partition": 8, "candidates": 2}, TEMPLATE,
            max_tokens=8)

    claimed = esa(2.0)
    dist = float(np.linalg.norm(claimed.embedder.e1 - claimed.embedder.e0))
    d = generation_design("esa", claimed.params, len(EX), max_tokens=8, white_box=False, distance=dist)
    full = GenerationMechanismTarget(SignalLM(), SignalEmbedder(), "full_context", {}, TEMPLATE, max_tokens=8)
    for target, want, cap in ((claimed, "pass", 2000), (esa(400.0), "violation", 2000), (full, "violation", 2000),
                              (esa(50.0), "inconclusive", 400)):
        r = run_gen_sequential(target, EX, ATTACK, claimed_epsilon=2.0, delta=1e-5, design=d,
                               alternatives=REQUIRED, alpha=ALPHA, cap=cap, rng=np.random.default_rng(28))
        assert r.verdict == want, (target.name, r.reason)
        assert r.trials == target.calls <= cap and r.history[-1]["trials"] == r.trials


class FixedRates:
    """y1 with probability p_in with the canary, p_out without (whatever the mechanism)."""

    white_box = False

    def __init__(self, p_in: float, p_out: float) -> None:
        self.p_in, self.p_out, self.name = p_in, p_out, f"rates-{p_in}-{p_out}"

    def observe(self, context, attack, rng):
        q = self.p_in if attack.canary.exemplar() in context else self.p_out
        return Observation(attack.labels[0] if rng.random() < q else attack.labels[1])


def test_the_mirrored_boundary_release_is_no_violation_beyond_level():
    """The mirrored guess ('y0: canary in') is bet on too: a release exactly at the claim the other way
    round (y1 with 1 / (1 + e^eps) with the canary, e^eps / (1 + e^eps) without) is DP at the claim:
    false violations <= alpha + 3 sd over 1000 audits."""
    p = math.exp(1.0) / (1.0 + math.exp(1.0))
    res = [run_gen_sequential(FixedRates(1.0 - p, p), EX, ATTACK, claimed_epsilon=1.0, delta=0.0, design=None,
                              alternatives=REQUIRED, alpha=ALPHA, cap=400, rng=np.random.default_rng(seed))
           for seed in range(RUNS)]
    assert sum(r.verdict == "violation" for r in res) / RUNS <= _limit(ALPHA)


def test_a_release_that_separates_the_contexts_the_other_way_round_is_a_violation():
    """esa's greedy full_context on SmolLM2 released y0 with the canary and y1 without it every time
    (benchmarks/gen_sequential_inprocess.py): perfectly separating, so a violation of any finite claim."""
    for eps in (1.0, 2.0):
        r = run_gen_sequential(FixedRates(0.0, 1.0), EX, ATTACK, claimed_epsilon=eps, delta=1e-5,
                               design=_design("esa", eps), alternatives=REQUIRED, alpha=ALPHA, cap=400,
                               rng=np.random.default_rng(1))
        assert r.verdict == "violation" and "other way round" in r.reason and r.trials <= 60, r.reason


def test_no_black_box_pass_for_a_target_the_design_model_does_not_describe():
    """A release that gives y1 75% of the time with or without the canary (SmolLM2's broken esa and mozo
    measured 0.75 / 0.75 and 1.00 / 1.00): the alternatives' design-model laws are rejected on its trials,
    but the claimed law is too, so it must not pass (it passed after 6-10 calls before the check)."""
    d = _design("esa")
    res = _audits(FixedRates(0.75, 0.75), d, runs=200)
    assert sum(r.verdict == "pass" for r in res) == 0
    assert sum(any("design model refuted" in n for n in r.notes) for r in res) >= 190


def test_a_refuted_design_model_without_a_coming_violation_stops_early():
    """A release the design model does not describe (y1 with 0.75 with and without the canary: refuted,
    so no pass can follow) and that lies well inside every DP inequality: it ran to the cap of 2000
    trials. It now stops, inconclusive, once it has drawn as many pairs again as when refuted (and
    min_pairs more) with the violation e-value below 1 and the observed shares more than FUTILITY_Z (3)
    standard errors inside each inequality (pair_bets.PairBets.may_exceed_ratio) -- an optional stop, so the
    violation test keeps its level; a correct target's verdicts are unchanged. (esa at a tenth of its
    noise stopped here too until its rare y1 release was bet on: test_pair_bets.)"""
    d = _design("esa")
    res = _audits(FixedRates(0.75, 0.75), d, cap=2000, runs=100)
    assert all(r.verdict == "inconclusive" and r.trials < 1000 for r in res), verdict_counts(res)
    assert all("no pass possible: the design model was refuted" in r.reason for r in res)
    ok = _audits(DesignModelTarget(d), d, cap=2000, runs=100)
    assert verdict_counts(ok).get("pass", 0) >= 90 and not verdict_counts(ok).get("violation")
