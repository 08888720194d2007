"""Audit statistics on simulated private voting (fixed clean votes + the mechanism's own noise; no model).

The clean votes are an assumption here (the canary moves exactly one vote, tight-auditing Lemma 3.1
with b = 1); the noise is the code under audit. Fixed seeds throughout.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from scipy import stats

from app.audit import (
    CampaignConfig,
    Canary,
    SimulatedVotingTarget,
    bootstrap_audit,
    gaussian_voting_noise,
    run_campaign,
)
from app.privacy.gdp import gdp_epsilon

DELTA = 1e-5
EX = [(f"customer message {i}", ["billing", "shipping"][i % 2]) for i in range(8)]
TASK = ["billing", "shipping"]
CANARY = Canary("hex", "0f1e2d3c4b5a6978", "billing")
# Labels of the inquiry query on this task: billing, shipping, Yes, No. T = 4 partitions.
WITH, WITHOUT = [0, 0, 1, 3], [0, 0, 0, 4]


def _campaign(eps, bug=None, *, seed, mode="direct", trials=2000, statistic="margin", run_eps=None, **kw):
    noise = gaussian_voting_noise(run_eps or eps, DELTA, bug=bug)
    if run_eps is not None:  # runs at run_eps while claiming eps
        noise = type(noise)(noise.kind, noise.scale, eps, DELTA)
    target = SimulatedVotingTarget(WITH, WITHOUT, noise)
    cfg = CampaignConfig(trials=trials, mode=mode, statistic=statistic, n_llm=4, **kw)
    return run_campaign(target, EX, CANARY, "inquiry", task_labels=TASK, config=cfg, rng=np.random.default_rng(seed))


@pytest.mark.parametrize("eps", [1.0, 2.0, 4.0])
def test_tightness_gdp_white_box_bootstrap(eps):
    """Acceptance 1: white-box bootstrap, inquiry, one vote moves: GDP epsilon within 10% of theory,
    and the rigorous bound below theory (a correct mechanism passes)."""
    noise = gaussian_voting_noise(eps, DELTA)
    assert gdp_epsilon(np.sqrt(2) / noise.scale, DELTA) == pytest.approx(eps, rel=1e-6)  # theory = GDP of the margin
    t0 = time.process_time()
    r = bootstrap_audit([WITH], [WITHOUT], noise, 2, 3, rng=np.random.default_rng(11), n_sample=400_000,
                        epsilon_theory=eps, objective="mu")
    cpu = time.process_time() - t0
    wb = r.estimates["white-box"]
    assert wb.gdp_applicable and abs(wb.epsilon_gdp - eps) <= 0.10 * eps, wb
    assert wb.epsilon_lower <= eps and r.estimates["black-box"].epsilon_lower <= eps
    # Acceptance 5: 400,000 trials per hypothesis with all estimates and the convergence table in < 2 s CPU.
    assert cpu < 2.0, cpu
    assert [row["n_sample"] for row in r.convergence if row["n_llm"] == 2][-1] == 400_000


def test_validity_over_many_seeds_small_trials():
    """Acceptance 2: a correct mechanism's rigorous bound exceeds its true epsilon in at most
    1 - confidence of campaigns (both threat models, Bonferroni inside). 120 campaigns of 60 trials:
    allowed count = the 99.9th percentile of Binomial(120, 0.05)."""
    runs = 120
    over = 0
    for seed in range(runs):
        r = _campaign(1.0, seed=1000 + seed, trials=60)
        over += r.epsilon > 1.0
    assert over <= stats.binom.ppf(0.999, runs, 0.05)


@pytest.mark.parametrize("eps", [1.0, 2.0, 4.0])
def test_correct_mechanism_passes(eps):
    for mode in ("direct", "bootstrap"):
        r = _campaign(eps, seed=5, mode=mode, n_sample=200_000)
        assert r.violation is False and r.epsilon <= eps, (mode, r.epsilon)


@pytest.mark.parametrize("mode", ["direct", "bootstrap"])
def test_noise_four_times_too_small_is_caught_black_and_white_box(mode):
    """Acceptance 3: noise scaled down 4x, audited at its claimed epsilon 1: violation in both threat
    models separately."""
    r = _campaign(1.0, "noise_quarter", seed=6, mode=mode, n_sample=200_000)
    assert r.violation is True
    assert r.estimates["black-box"].epsilon_lower > 1.0 and r.estimates["white-box"].epsilon_lower > 1.0, \
        {k: v.epsilon_lower for k, v in r.estimates.items()}


def test_noise_on_winner_only_is_caught():
    """Noise only on the winning count: the zero-vote labels tie and never win without the canary,
    so the released 'Yes' is a giveaway (black-box); the noise-free 'Yes' count is one too
    (white-box 'positive' statistic, ContextLeak A.3). The paper's margin statistic alone is blind to it."""
    r = _campaign(1.0, "winner_only", seed=8, statistic="positive")
    assert r.violation is True
    assert r.estimates["black-box"].epsilon_lower > 1.0 and r.estimates["white-box"].epsilon_lower > 1.0
    m = _campaign(1.0, "winner_only", seed=8, statistic="margin")
    assert m.estimates["white-box"].epsilon_lower < 1.0  # documented: the margin does not see this bug


def test_claimed_one_run_at_fifty_is_caught():
    r = _campaign(1.0, seed=9, run_eps=50.0, trials=400)
    assert r.epsilon_claimed == 1.0 and r.violation is True and r.epsilon > 2.0


def test_contextleak_insertion_and_bonferroni():
    r = _campaign(2.0, seed=10, insertion="contextleak", trials=1000)
    n = sum(e.tp + e.fn + e.fp + e.tn for e in [r.estimates["black-box"]])
    assert n == 1000  # black-box counts every trial
    wb = r.estimates["white-box"]
    assert wb.selection_trials == 500 and wb.tp + wb.fn + wb.fp + wb.tn == 500  # held-out split
    assert wb.confidence == pytest.approx(0.975) and r.confidence == 0.95
    assert r.epsilon == max(e.epsilon_lower for e in r.estimates.values())
