"""Sequential audits (issue 28): anytime-valid verdicts, type-I error by simulation.

Each simulation uses a fixed seed and a tolerance of 3 binomial standard deviations of the
observed rate around the stated level (a one-sided check: the rate may be far below it).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.audit import Canary, SimulatedVotingTarget, resolve_query, rnm_noise
from app.audit.sequential import BettingEProcess, max_pair_accuracy, run_sequential
from app.audit.targets import Observation

EX = [(f"text {i}", "b") for i in range(8)]
CANARY = Canary("hex", "00ff00ff00ff", "a")
ATTACK = resolve_query("input_output", CANARY, ["a", "b"], EX, None)


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


def test_correct_rnm_never_violates_beyond_level_and_mostly_passes():
    """1000 audits of a correct simulated rnm (Gaussian, 4 partitions, one vote moves) with the
    release floor in the violation e-process: false violations <= alpha; the pass comes early."""
    alpha, runs, eps, t = 0.05, 1000, 1.0, 4
    noise = rnm_noise({"epsilon": eps, "delta": 1e-5, "partitions": t, "shots_per_partition": 2}, 8)
    target = SimulatedVotingTarget([1, t - 1], [0, t], noise)
    verdicts = []
    for seed in range(runs):
        r = run_sequential(target, EX, ATTACK, claimed_epsilon=eps, delta=1e-5, noise=noise, partitions=t,
                           alternatives=["noise_quarter", "no_noise"], alpha=alpha, cap=200,
                           rng=np.random.default_rng(seed))
        verdicts.append(r.verdict)
    assert verdicts.count("violation") / runs <= _limit(alpha, runs)
    assert verdicts.count("pass") / runs > 0.9


@pytest.mark.parametrize("bug", ["noise_quarter", "noise_tenth", {"noise_multiplier": 1e-9}])
def test_broken_rnm_is_a_violation_and_reports_trials_and_e_value(bug):
    noise = rnm_noise({"epsilon": 1.0, "delta": 1e-5, "partitions": 4, "shots_per_partition": 2}, 8, bug)
    r = run_sequential(SimulatedVotingTarget([1, 3], [0, 4], noise), EX, ATTACK, claimed_epsilon=1.0, delta=1e-5,
                       noise=noise, partitions=4, alternatives=["noise_quarter", "no_noise"], alpha=0.05, cap=4000,
                       rng=np.random.default_rng(1))
    assert r.verdict == "violation", r.reason
    assert r.e_violation >= 20 and 0 < r.trials < 400 and f"after {r.trials} trials" in r.reason


def test_cap_is_inconclusive_with_what_was_reached():
    """A correct mechanism and a cap too small to reject noise_quarter: inconclusive, with the
    e-values reached."""
    noise = rnm_noise({"epsilon": 1.0, "delta": 1e-5, "partitions": 4, "shots_per_partition": 2}, 8)
    r = run_sequential(SimulatedVotingTarget([1, 3], [0, 4], noise), EX, ATTACK, claimed_epsilon=1.0, delta=1e-5,
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
    r = run_sequential(SimulatedVotingTarget(vw, vo, noise), EX, attack, claimed_epsilon=2.0, delta=1e-5,
                       noise=noise, partitions=2, alternatives=["no_noise"], alpha=0.05, cap=2000,
                       rng=np.random.default_rng(2))
    assert r.verdict == "pass" and r.vote_model == "observed" and r.trials < 200, r.reason


def test_max_pair_accuracy_matches_the_two_constraints():
    for eps, delta in [(0.5, 0.0), (1.0, 1e-5), (3.0, 0.01)]:
        a = max_pair_accuracy(eps, delta)
        assert a == pytest.approx(math.exp(eps) * (1 - a) + delta)  # on the boundary of 1 - FPR <= e^eps (1 - TPR) + delta
