"""The bettors behind the sequential audits' floor and pass processes (issue 28): the ONS + fixed-fraction
mixture (``OnsGridMix``) and the per-trial-kind product (``SplitBetting``).

Validity by simulation with fixed seeds, tolerance 3 binomial standard deviations around the level (one
sided); the loss bound and the winner-only detection are deterministic for their seeds.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.audit import Canary, SimulatedVotingTarget, resolve_query, rnm_noise
from app.audit.eprocess import GRID, ONS_SHARE, BettingEProcess, OnsGridMix, SplitBetting
from app.audit.sequential import run_sequential
from app.audit.targets import ReleasedLabelOnly

N = 12
EX = [(f"play some music number {i}", "music") for i in range(N)]
CANARY = Canary("hex", "00ff00ff00ff00ff", "weather")
ATTACK = resolve_query("input_output", CANARY, ["weather", "music"], EX, None)


def _limit(level: float, runs: int) -> float:
    return level + 3.0 * math.sqrt(level * (1.0 - level) / runs)


ALPHA, RUNS = 0.1, 2000


def _crossing_rate(make, step, trials: int, seed: int) -> float:
    """The share of RUNS paths on which a fresh process (``make()``) reaches 1/ALPHA within ``trials`` trials,
    ``step(process, t, rng)`` feeding trial t."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(RUNS):
        p = make()
        for t in range(trials):
            step(p, t, rng)
            if p.e >= 1 / ALPHA:
                hits += 1
                break
    return hits / RUNS


@pytest.mark.parametrize("side,m,b0", [(+1, 0.3, 0.0), (-1, 0.2514, 0.6), (+1, 0.05, 0.6)])
def test_ons_grid_mix_is_a_test_supermartingale_at_its_null(side, m, b0):
    """Y ~ Bernoulli(m) exactly at the null: P(sup e >= 1/alpha) <= alpha over 2000 paths of 150 trials."""
    rate = _crossing_rate(lambda: OnsGridMix(side, b0), lambda p, t, rng: p.update(float(rng.random() < m), m), 150, 7)
    assert rate <= _limit(ALPHA, RUNS), rate


def test_ons_grid_mix_per_trial_direction_holds_the_directional_null():
    """The alternatives' use: each trial's direction is set before it (side +1 or -1 alternating) and
    the mean sits at the bound both ways: still a test supermartingale."""
    m = 0.4
    rate = _crossing_rate(lambda: OnsGridMix(+1),
                          lambda p, t, rng: p.update(float(rng.random() < m), m, +1 if t % 2 else -1), 150, 8)
    assert rate <= _limit(ALPHA, RUNS), rate


def test_split_betting_is_a_test_supermartingale_when_every_kind_holds_the_null():
    """Two kinds of trial, one at the bound and one well inside it (the winner-only floor's canary
    trials): the product stays below 1/alpha on all but <= alpha of 2000 paths."""
    m = 0.2514

    def step(p, t, rng):
        kind = bool(t % 2)
        p.update(float(rng.random() < (m if kind else 0.35)), m, kind)  # H0: E[Y] >= m on every trial

    rate = _crossing_rate(lambda: SplitBetting(-1, 0.6), step, 200, 9)
    assert rate <= _limit(ALPHA, RUNS), rate


def test_the_grid_bounds_the_loss_where_the_null_holds_strictly():
    """1000 trials of P = 0.287 against a floor of 0.2514 (side -1: the null "E[Y] >= floor" holds):
    the ONS bettor that opens at 0.6 keeps betting and loses far more than the evidence warrants; the
    mixture's fraction-0 bettor keeps it >= (1 - ONS_SHARE) / len(GRID) whatever the data. Where the null is
    false (P = 0.17) the mixture grows."""
    rng = np.random.default_rng(0)
    ys = rng.random(1000) < 0.287
    ons, mix = BettingEProcess(-1, 0.6), OnsGridMix(-1, 0.6)
    for y in ys:
        ons.update(float(y), 0.2514)
        mix.update(float(y), 0.2514)
    assert 0.0 in GRID
    assert mix.e >= (1.0 - ONS_SHARE) / len(GRID)
    assert ons.e < 1e-3  # the failure the mixture bounds (measured: e^-52 on this seed)
    grow = OnsGridMix(-1, 0.6)
    for y in np.random.default_rng(1).random(1000) < 0.17:
        grow.update(float(y), 0.2514)
    assert grow.e > 1e3


def _black_box_audit(seed: int, bug, alternatives=("noise_quarter", "no_noise", "winner_only")):
    """A sequential audit (claim 1, 5 partitions x 2 shots) of simulated rnm with ``bug``, seen black-box."""
    noise = rnm_noise({"epsilon": 1.0, "delta": 1e-5, "partitions": 5, "shots_per_partition": 2}, N)
    sim = SimulatedVotingTarget([1.0, 4.0], [0.0, 5.0], noise.with_bug(bug))

    return run_sequential(ReleasedLabelOnly(sim), EX, ATTACK, claimed_epsilon=1.0, delta=1e-5, noise=noise, partitions=5,
                          alternatives=list(alternatives), alpha=0.05, cap=2000, rng=np.random.default_rng(seed))


def test_winner_only_noise_is_a_violation_black_box_by_the_floor_of_the_no_canary_trials():
    """Noise on the winning count only releases the minority label at 0.17 on the unanimous no-canary
    trials, below the claim's floor 0.251, and at 0.28 (above it) with the canary: one shared betting
    fraction over both kinds saw nothing (6 of 6 audits inconclusive at the 2000-trial cap, e-value
    < 0.1); the floor bet per kind of trial reaches the violation within the cap. A correct target with
    the same required alternatives passes (winner_only rejected) and is never a violation here."""
    for seed in (0, 1, 2):
        r = _black_box_audit(seed, "winner_only")
        assert r.verdict == "violation", r.reason
        assert "release_floor_0" in r.reason or r.e_components["release_floor_0"] >= 20 * 0.45
    ok = _black_box_audit(0, None)
    assert ok.verdict == "pass", ok.reason
    assert not any("were not tested" in n and "winner_only" in n for n in ok.notes)


def test_a_pass_says_which_alternatives_it_did_not_test():
    """With the default alternatives a black-box pass does not rule out winner-only noise (~800 prompts at the
    best design, a pass after ~150): the result says so, and what to add."""
    r = _black_box_audit(3, None, alternatives=("noise_quarter", "no_noise"))
    assert r.verdict == "pass", r.reason
    note = next(n for n in r.notes if "were not tested" in n)
    assert "noise_half, winner_only were not tested" in note and "power.alternatives" in note
    assert "black-box it needs many times the trials" in note and "dataset.decoy_labels" in note
