"""The generation audit's one-unit probe (``app.audit.probe.gen_probe_target``, ``gen_sequential``'s
``probe``): esa's design model with 4 partitions puts the canary's mean on the y0 side (gap
r d (1/4 - 1/2) < 0), so noise left out moves no black-box statistic and the audit ends
inconclusive; on one unit the canary decides the release and the same target is a violation within a
few pairs. Type-I error by simulation (1000 audits, fixed seeds, level + 3 binomial sd)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from app.audit.gen_power import generation_design
from app.audit.gen_sequential import DesignModelTarget, run_gen_sequential
from app.audit.probe import GEN_UNITS, PROBE_MAX_SHOTS, gen_probe_target
from tests.audit.test_gen_power import D, EX
from tests.audit.test_gen_sequential import ALPHA, ATTACK, REQUIRED, BoundaryRelease

RUNS = 1000


def _limit(level: float, runs: int = RUNS) -> float:
    return level + 3.0 * math.sqrt(level * (1.0 - level) / runs)


def _esa(eps: float, units: int, shots: int):
    return generation_design("esa", {"epsilon": eps, "delta": 1e-5, "partitions": units, "shots_per_partition": shots},
                             len(EX), max_tokens=8, white_box=False, distance=D)


def _audit(target, design, probe, seed: int, eps: float = 1.0, cap: int = 400, delta: float = 1e-5):
    return run_gen_sequential(target, EX, ATTACK, claimed_epsilon=eps, delta=delta, design=design,
                              alternatives=REQUIRED, alpha=ALPHA, cap=cap, rng=np.random.default_rng(seed),
                              probe=probe)


def test_the_design_model_says_why_four_partitions_hide_no_noise_and_one_does_not():
    four, one = _esa(1.0, 4, 2), _esa(1.0, 1, 8)
    assert four.release(0.0) == (0.0, 0.0)  # noise-free, 4 partitions: y0 with and without the canary
    assert one.release(0.0) == (1.0, 0.0)  # one unit: the canary decides


@pytest.mark.parametrize("eps", [1.0, 2.0])
def test_no_noise_is_a_violation_with_the_probe_and_not_without(eps):
    """200 audits each: with the probe every noise-free esa is a violation, within the probe's first
    pairs (one unit: P(y1 | in) = 1, P(y1 | out) = 0, each pair 'both right'; the probe weighs 0.1, so
    ~ln(20 / 0.1) / ln(1 / p0^2) pairs plus the bettor's warm-up); without it none is."""
    four, one = _esa(eps, 4, 2), _esa(eps, 1, 8)
    with_probe = [_audit(DesignModelTarget(four, "no_noise"), four, DesignModelTarget(one, "no_noise"), s, eps)
                  for s in range(200)]
    without = [_audit(DesignModelTarget(four, "no_noise"), four, None, s, eps) for s in range(200)]
    assert all(r.verdict == "violation" for r in with_probe), {r.verdict for r in with_probe}
    assert max(r.trials for r in with_probe) <= (30 if eps == 1.0 else 60)
    assert all(r.arms["design"]["trials"] == 0 for r in with_probe)  # decided on the probe alone
    assert "one-unit probe" in with_probe[0].reason
    assert not any(r.verdict == "violation" for r in without)


def test_a_correct_target_with_the_probe_false_violations_within_level_and_it_passes():
    """1000 audits of the correct esa (its design-model law on both arms): false violations <= alpha +
    3 sd, > 95% pass, and the probe gives up after a few pairs (its 'both right' rate <= p0^2)."""
    four, one = _esa(1.0, 4, 2), _esa(1.0, 1, 8)
    res = [_audit(DesignModelTarget(four), four, DesignModelTarget(one), s) for s in range(RUNS)]
    v = [r.verdict for r in res]
    assert v.count("violation") / RUNS <= _limit(ALPHA), v.count("violation")
    assert v.count("pass") / RUNS > 0.95, {k: v.count(k) for k in set(v)}
    assert np.median([r.arms["probe"]["trials"] for r in res]) == 8  # PROBE_MIN_PAIRS pairs
    assert all(r.trials == r.arms["probe"]["trials"] + r.arms["design"]["trials"] for r in res)


def test_the_least_favourable_release_on_both_arms_false_violations_within_level():
    """A release exactly at epsilon 1 (delta 0) on the probe and on the design, looking after every
    pair up to 400 trials: violations <= alpha + 3 sd (the probe's bets are supermartingales under
    the claim, and a fixed-weight average of them is one, whichever arm draws next)."""
    res = [_audit(BoundaryRelease(1.0), None, BoundaryRelease(1.0), s, delta=0.0) for s in range(RUNS)]
    false = sum(r.verdict == "violation" for r in res)
    assert false / RUNS <= _limit(ALPHA), false


def test_the_probe_never_counts_towards_a_pass():
    """The probe's trials are not the design's: a target that IS noise_tenth on the design passes no more
    often with a correct-looking probe than the pass level allows (the alternatives bet on design trials)."""
    four, one = _esa(1.0, 4, 2), _esa(1.0, 1, 8)
    res = [_audit(DesignModelTarget(four, "noise_tenth"), four, DesignModelTarget(one), s, cap=200)
           for s in range(RUNS)]
    assert sum(r.verdict == "pass" for r in res) / RUNS <= _limit(0.1)


class Refuses:
    name = "refuses"
    white_box = False

    def observe(self, context, attack, rng):
        raise ValueError("partitions x shots_per_partition: the gateway refuses one unit")


def test_a_target_that_refuses_the_one_unit_design_runs_the_design_alone():
    four = _esa(1.0, 4, 2)
    r = _audit(DesignModelTarget(four), four, Refuses(), 0)
    assert r.verdict == "pass" and "probe" in r.arms and r.arms["probe"]["trials"] == 0
    assert any("one-unit probe was refused" in n for n in r.notes)


def test_gen_probe_target_builds_one_unit_of_every_exemplar(lm, embedder):
    from app.audit.gen_targets import GenerationMechanismTarget, RemoteGenerationTarget

    t = GenerationMechanismTarget(lm, embedder, "esa", {"epsilon": 1.0, "partitions": 4, "shots_per_partition": 2},
                                  {"instruction": "x"}, max_tokens=6)
    p = gen_probe_target(t, 8, 4)
    assert isinstance(p, GenerationMechanismTarget) and p is not t
    assert p.params == {"epsilon": 1.0, "partitions": 1, "shots_per_partition": 8} and p.max_tokens == 6
    assert t.params["partitions"] == 4  # the configured target is unchanged
    assert gen_probe_target(t, 8, 1) is None  # a design on one unit already
    assert gen_probe_target(t, PROBE_MAX_SHOTS + 1, 4) is None
    assert gen_probe_target(GenerationMechanismTarget(lm, embedder, "esa", dict(t.params), defence="L1"), 8, 4) is None
    assert gen_probe_target(GenerationMechanismTarget(lm, embedder, "zero_shot", {}), 8, 4) is None
    r = RemoteGenerationTarget("http://127.0.0.1:9", embedder, "clip_softmax", {"epsilon": 1.0, "prompts": 4})
    try:
        q = gen_probe_target(r, 8, 4)
        assert dataclasses.is_dataclass(q) and q.client is r.client and q.datasets is r.datasets
        assert q.params == {"epsilon": 1.0, "prompts": 1, "shots_per_prompt": 8} and r.params["prompts"] == 4
    finally:
        r.close()
    assert set(GEN_UNITS) == {"esa", "clip_softmax", "poe", "mozo"}
