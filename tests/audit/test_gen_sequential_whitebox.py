"""White-box sequential generation audits (issue 28): ``app.audit.gen_noise`` in
``app.audit.gen_sequential``.

Type-I error by simulation with esa's own noise and selection code (``ESAWhiteBoxTarget``: fixed
seeds; a rate is allowed up to its level + 3 binomial standard deviations of 1000 runs, one-sided):
false violations of a correct white-box esa, false passes of every alternative as the target; the
simulation's released text follows gen_power's law (one power model); the real esa code passes when
correct and is caught when its noise is below the claim or its release is not the noisy mean's
nearest candidate; mechanisms without noise in their internals stay black-box and say why.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from app.audit.eprocess import INF_LOG, NoiseEvidence
from app.audit.gen_noise import (
    NOT_NEAREST,
    REMOTE_TOKEN_GAP,
    WHITE_BOX_GAPS,
    ESAWhiteBoxTarget,
    white_box_evidence,
    white_box_gap,
)
from app.audit.gen_power import GEN_ALTERNATIVES
from app.audit.gen_sequential import run_gen_sequential
from app.audit.noise import VotingNoise
from tests.audit.test_gen_power import EX
from tests.audit.test_gen_sequential import ALPHA, ATTACK, MISS, REQUIRED, RUNS, _design, _limit

ALL = tuple(a for a in GEN_ALTERNATIVES if a != "claimed")


def _audits(target, design, *, eps: float = 1.0, cap: int = 200, runs: int = RUNS, alternatives=REQUIRED,
            white_box: bool = True):
    return [run_gen_sequential(target, EX, ATTACK, claimed_epsilon=eps, delta=1e-5, design=design,
                               alternatives=alternatives, alpha=ALPHA, cap=cap, rng=np.random.default_rng(seed),
                               white_box=white_box)
            for seed in range(runs)]


def _counts(res) -> dict[str, int]:
    v = [r.verdict for r in res]
    return {k: v.count(k) for k in set(v)}


@pytest.mark.parametrize("eps,dims", [(1.0, 384), (2.0, 384), (1.0, 2)])
def test_correct_white_box_esa_false_violations_within_level_and_it_passes_in_one_pair(eps, dims):
    """1000 audits of a correct esa seen white-box (384 noise draws per answer, MiniLM's; 2, where
    the scaled-down mixture wanders most), the claim's sigma: false violations <= alpha + 3 sd;
    every required alternative is rejected by the noise's likelihood ratio, so the audit passes
    after one pair (the black-box half alone needs ~15 trials)."""
    d = _design("esa", eps)
    res = _audits(ESAWhiteBoxTarget(d, dims=dims), d, eps=eps)
    c = _counts(res)
    assert c.get("violation", 0) / RUNS <= _limit(ALPHA), c
    assert c.get("pass", 0) / RUNS > 0.95, c
    assert np.mean([r.trials for r in res]) < 3
    r = res[0]
    assert r.decided_by == "white-box" and r.white_box["answers_read"] == r.trials == 2
    assert r.white_box["sigma"] == pytest.approx(d.scale) and not r.white_box["impossible"]
    assert "white-box" in r.reason and "noise" in r.e_components


def _white_cases():
    for alt in ALL:
        for tie in (("positive", "other") if GEN_ALTERNATIVES[alt] == 0.0 else ("positive",)):
            yield alt, tie


@pytest.mark.parametrize("alt,tie", list(_white_cases()))
def test_each_alternative_as_a_white_box_target_passes_at_most_the_pass_level(alt, tie):
    """1000 audits of a target that IS alternative ``alt`` (esa's noise at its multiplier, or the
    full-context release, which reports no internals), all six alternatives required: false passes
    <= 1 - min_detection + 3 sd. The noisy alternatives and no_noise are violations in one pair (the noise's
    likelihood ratio; no noise: zero residuals); non_private reports no noise, so the black-box half
    finds it (its pair accuracy is 1)."""
    d = _design("esa")
    res = _audits(ESAWhiteBoxTarget(d, alt, tie), d, alternatives=ALL)
    c = _counts(res)
    assert c.get("pass", 0) / RUNS <= _limit(MISS), c
    assert c.get("violation", 0) / RUNS >= 0.95, c
    if alt == "non_private":
        assert res[0].decided_by == "black-box" and res[0].white_box["answers_read"] == 0
        assert any("internals missing" in n for n in res[0].notes)
    else:
        assert max(r.trials for r in res) == 2 and {r.decided_by for r in res} == {"white-box"}
    if alt == "no_noise":
        assert any("got no noise" in n for n in res[0].notes), res[0].notes


def test_a_white_box_target_more_broken_than_an_alternative_does_not_pass():
    """Noise at a twentieth (beyond noise_tenth): the likelihood ratio of the claim over noise_tenth
    falls (a supermartingale for any smaller scale), so no pass; the scaled-down mixture finds it."""
    d = _design("esa")
    res = _audits(ESAWhiteBoxTarget(d, 0.05), d)
    c = _counts(res)
    assert c.get("pass", 0) / RUNS <= _limit(MISS) and c.get("violation", 0) == RUNS, c


@pytest.mark.parametrize("alt,tie", [("claimed", "positive"), ("noise_half", "positive"),
                                     ("noise_tenth", "positive"), ("no_noise", "positive"), ("no_noise", "other")])
def test_the_simulation_releases_y1_with_gen_powers_law(alt, tie):
    """ESAWhiteBoxTarget (esa.aggregate + esa.select_candidate on the design model's geometry)
    releases y1 with the probability gen_power's closed form gives, with and without the canary
    (4 binomial sd of 4000 draws each)."""
    d = _design("esa")
    t = ESAWhiteBoxTarget(d, alt, tie, dims=16)
    rng = np.random.default_rng(5)
    c1 = [*EX[1:], ATTACK.canary.exemplar()]
    for ctx, p in ((c1, t.law[0]), (EX, t.law[1])):
        n = 4000
        got = sum(t.observe(ctx, ATTACK, rng).label == ATTACK.labels[0] for _ in range(n)) / n
        assert abs(got - p) <= 4.0 * math.sqrt(max(p * (1 - p), 1e-4) / n), (alt, tie, got, p)


def test_noise_evidence_flag_and_vector_residuals():
    """A mean embedding's residuals are noise draws (no argmax check); ``flag`` records an event of
    probability 0 under the claim (the violation e-value at its cap); a residual where an alternative
    adds no noise is one under that alternative."""
    ev = NoiseEvidence(VotingNoise("gaussian", 0.5, 1.0, 1e-5),
                       {"no_noise": VotingNoise("gaussian", 0.5, 1.0, 1e-5, noise_multiplier=0.0),
                        "noise_half": VotingNoise("gaussian", 0.5, 1.0, 1e-5, noise_multiplier=0.5)})
    rng = np.random.default_rng(0)
    c = rng.standard_normal(32)
    ev.update(c, c + rng.normal(0.0, 0.5, 32), None)
    assert not ev.impossible and ev.e_violation < 1.0 and ev.log_alt["no_noise"] == INF_LOG
    assert ev.log_alt["noise_half"] > math.log(40.0)  # 32 draws: ~26 nats against half the scale
    ev.flag(NOT_NEAREST)
    assert ev.impossible == [NOT_NEAREST] and ev.e_violation == math.exp(INF_LOG)
    # a mechanism without a noise to read (one that claims nothing) gets no evidence; every private one is covered
    assert white_box_evidence(dataclasses.replace(_design("poe"), mechanism="zero_shot"), REQUIRED, 1.0, 1e-5) is None
    assert WHITE_BOX_GAPS == {} and white_box_gap("ksa") is None and white_box_gap("ksa", remote=True) is None
    assert white_box_gap("mozo") is None and white_box_gap("mozo", remote=True) == REMOTE_TOKEN_GAP


@pytest.mark.parametrize("mech", ["clip_softmax", "poe", "mozo"])
def test_token_mechanisms_without_a_step_trace_stay_black_box_and_say_why(mech):
    """clip_softmax, poe and mozo are read white-box only through an in-process target's step trace
    (``tests/audit/test_gen_sequential_tokens.py``, ``test_gen_sequential_mozo.py``), which a target
    that offers none (a gateway; here the design model's black-box release) lacks: white_box=True
    changes nothing but a note."""
    from app.audit.gen_sequential import DesignModelTarget

    d = _design(mech)
    wb = _audits(DesignModelTarget(d), d, runs=20, white_box=True)
    bb = _audits(DesignModelTarget(d), d, runs=20, white_box=False)
    assert [(r.verdict, r.trials) for r in wb] == [(r.verdict, r.trials) for r in bb]
    assert any(REMOTE_TOKEN_GAP in n for n in wb[0].notes) and wb[0].white_box == {}
    assert wb[0].decided_by == "black-box"


def test_real_esa_code_white_box():
    """The real esa mechanism (its calibration, noise and nearest-candidate selection) with a model
    that follows the signal query, 8-dim embeddings, claim epsilon 2 (one partition): correct, it
    passes after one pair on the noise; run at epsilon 50 (sigma / 13: black-box no violation, the
    audit reaches its cap) it is a white-box violation after one pair; a bug that releases the
    candidate farthest from the noisy mean is one too (probability 0 under the claim); the real
    full_context release reports no noise and is found black-box, with a note."""
    from app.audit.gen_targets import GenerationMechanismTarget
    from tests.audit.test_gen_power import TEMPLATE, SignalEmbedder, SignalLM

    def esa(eps: float, cls=GenerationMechanismTarget) -> GenerationMechanismTarget:
        return cls(SignalLM(), SignalEmbedder(), "esa", {
            "epsilon": eps, "delta": 1e-5, "partitions": 1, "shots_per_partition": 8, "candidates": 2}, TEMPLATE,
            max_tokens=8)

    class Farthest(GenerationMechanismTarget):
        """BUG: releases the candidate farthest from the noisy mean (internals unchanged)."""

        def _run(self, context, attack, rng):
            res = super()._run(context, attack, rng)
            i = int(np.argmax(res.internals["candidate_distances"]))
            return dataclasses.replace(res, text=res.internals["candidates"][i])

    claimed = esa(2.0)
    dist = float(np.linalg.norm(claimed.embedder.e1 - claimed.embedder.e0))
    from app.audit.gen_power import generation_design

    d = generation_design("esa", claimed.params, len(EX), max_tokens=8, white_box=False, distance=dist)
    full = GenerationMechanismTarget(SignalLM(), SignalEmbedder(), "full_context", {}, TEMPLATE, max_tokens=8)
    cases = ((claimed, "pass", "white-box"), (esa(50.0), "violation", "white-box"),
             (esa(2.0, Farthest), "violation", "white-box"), (full, "violation", "black-box"))
    for target, want, by in cases:
        r = run_gen_sequential(target, EX, ATTACK, claimed_epsilon=2.0, delta=1e-5, design=d, alternatives=REQUIRED,
                               alpha=ALPHA, cap=400, rng=np.random.default_rng(28), white_box=True)
        assert (r.verdict, r.decided_by) == (want, by), (target.name, r.reason)
        if by == "white-box":
            assert r.trials == 2 == r.white_box["answers_read"], r.reason
    r = run_gen_sequential(esa(2.0, Farthest), EX, ATTACK, claimed_epsilon=2.0, delta=1e-5, design=d,
                           alternatives=REQUIRED, alpha=ALPHA, cap=4, rng=np.random.default_rng(28), white_box=True)
    assert NOT_NEAREST in r.white_box["impossible"] and NOT_NEAREST in r.reason


def test_the_job_reads_the_noise_only_where_it_is_asked_for_and_the_claim_is_the_params():
    """canary_gen_seq: threat_model black-box, or a remote target without ``white_box``: no noise
    read; a claim tighter than the target's params' epsilon: none either (their sigma is what the
    noise would be tested against), with the note; otherwise read."""
    from app.jobs.kinds.canary_gen_seq import reads_noise
    from app.jobs.kinds.canary_mia import CanaryMIAConfig

    esa = {"type": "mechanism", "mechanism": "esa", "params": {"epsilon": 2.0, "partitions": 2}}
    remote = {"type": "remote", "url": "https://gateway.example", "mechanism": "esa", "params": {"epsilon": 2.0}}

    def cfg(**kw):
        return CanaryMIAConfig.model_validate({"task": "generation", "mode": "sequential", "trials": 10,
                                               "target": esa, **kw})
    assert reads_noise(cfg(), 2.0, 2.0) == (True, None)
    assert reads_noise(cfg(), 4.0, 2.0) == (True, None)  # a looser claim: the params' sigma is more noise
    assert reads_noise(cfg(threat_model="black-box"), 2.0, 2.0) == (False, None)
    assert reads_noise(cfg(target=remote), 2.0, 2.0) == (False, None)
    assert reads_noise(cfg(target={**remote, "white_box": True}), 2.0, 2.0) == (True, None)
    wb, note = reads_noise(cfg(), 1.0, 2.0)
    assert not wb and note is not None and "tighter" in note


class _TableEmbedder:
    """Fixed vectors per text (a unit test of SignalDecider.nearest's arithmetic, not of a model)."""

    def __init__(self, table):
        self.table = table

    def embed(self, texts):
        return np.array([self.table[t] for t in texts], dtype=float)


def test_nearest_check_is_skipped_where_the_target_embeds_with_another_model():
    """The nearest-candidate event is only evidence in the target's own embedding: where the target's
    reported candidate distances are not what the auditor's embedder gives, it is not checked (None),
    never a violation; where they agree, releasing the farther candidate is flagged."""
    from app.audit.gen_targets import SignalDecider

    dec = SignalDecider(_TableEmbedder({"a": [1.0, 0.0], "b": [0.0, 1.0]}))
    m = np.array([0.9, 0.1])
    same = np.linalg.norm(np.array([[1.0, 0.0], [0.0, 1.0]]) - m, axis=1)
    assert dec.nearest("a", m, ["a", "b"], same) is True
    assert dec.nearest("b", m, ["a", "b"], same) is False  # its own distances say "a" was nearer
    assert dec.nearest("b", m, ["a", "b"], same[::-1]) is None  # another embedder: "b" nearest there
    assert dec.nearest("b", np.array([0.9, 0.1, 0.0]), ["a", "b"], None) is None  # another dimension
    assert dec.nearest("b", m, ["a", "b"], None) is False  # nothing reported: the auditor's space decides
    assert dec.nearest("c", m, ["a", "b"], same) is False  # not a candidate at all
    # a gateway's internals are untrusted input: too many or non-text candidates are not embedded
    assert dec.nearest("a", m, ["a", "b"] * 101, None) is None
    assert dec.nearest("a", m, ["a", 3], None) is None
