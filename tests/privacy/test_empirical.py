"""Empirical bounds: Clopper-Pearson against scipy, published values, coverage by simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binomtest, norm

from app.privacy import (
    PrivacyInputError,
    accuracy_epsilon_bound,
    accuracy_to_epsilon,
    clopper_pearson_lower,
    clopper_pearson_upper,
    epsilon_lower_bound,
    gdp_epsilon,
    gdp_mu_from_rates,
    gdp_mu_lower_bound,
)


@pytest.mark.parametrize("n", [1, 7, 100, 1000])
@pytest.mark.parametrize("level", [0.9, 0.95, 0.995])
def test_clopper_pearson_matches_scipy_binomtest(n, level):
    for k in sorted({0, 1, n // 3, n // 2, n - 1, n}):
        lo = binomtest(k, n, alternative="greater").proportion_ci(level, method="exact").low
        hi = binomtest(k, n, alternative="less").proportion_ci(level, method="exact").high
        assert clopper_pearson_lower(k, n, level) == pytest.approx(lo, abs=1e-12)
        assert clopper_pearson_upper(k, n, level) == pytest.approx(hi, abs=1e-12)


def test_clopper_pearson_edges_closed_form():
    # at k = 0 and k = n the exact bounds are (1-level)^(1/n) forms, never NaN
    assert clopper_pearson_lower(0, 50, 0.95) == 0.0
    assert clopper_pearson_upper(50, 50, 0.95) == 1.0
    assert clopper_pearson_lower(50, 50, 0.95) == pytest.approx(0.05 ** (1 / 50), rel=1e-12)
    assert clopper_pearson_upper(0, 50, 0.95) == pytest.approx(1 - 0.05 ** (1 / 50), rel=1e-12)


def test_jagielski_500_of_500():
    # Jagielski et al. 2020: 500/500 TP vs 0/500 FP, two-sided 99% Clopper-Pearson -> 4.5419
    b = epsilon_lower_bound(500, 0, 0, 500, confidence=0.99)
    assert b.epsilon == pytest.approx(4.5419, abs=5e-5)
    # closed form: log(((alpha/2)^(1/n)) / (1 - (alpha/2)^(1/n)))
    q = 0.005 ** (1 / 500)
    assert b.epsilon == pytest.approx(math.log(q / (1 - q)), rel=1e-12)


@pytest.mark.parametrize(
    "counts,conf,eps",
    [
        ((500, 0, 0, 500), 0.95, 4.90559),
        ((900, 100, 100, 900), 0.95, 1.98971),
        ((600, 400, 300, 700), 0.95, 0.54621),
        ((50, 50, 50, 50), 0.95, 0.0),
    ],
)
def test_prior_art_count_values(counts, conf, eps):
    assert epsilon_lower_bound(*counts, confidence=conf).epsilon == pytest.approx(eps, abs=5e-6)


def test_both_directions_are_used():
    # Few false negatives but many false positives: the TNR/FNR direction gives the bound.
    b = epsilon_lower_bound(tp=990, fn=10, fp=600, tn=400, confidence=0.95)
    tnr_lo = binomtest(400, 1000, alternative="greater").proportion_ci(0.975, method="exact").low
    fnr_hi = binomtest(10, 1000, alternative="less").proportion_ci(0.975, method="exact").high
    assert b.direction == "tnr/fnr"
    assert b.epsilon == pytest.approx(math.log(tnr_lo / fnr_hi), rel=1e-10)
    swapped = epsilon_lower_bound(tp=400, fn=600, fp=10, tn=990, confidence=0.95)
    assert swapped.direction == "tpr/fpr" and swapped.epsilon == pytest.approx(b.epsilon, rel=1e-12)


def test_delta_enters_as_tpr_minus_delta():
    b = epsilon_lower_bound(900, 100, 100, 900, confidence=0.95, delta=0.01)
    assert b.epsilon == pytest.approx(math.log((b.tpr_lower - 0.01) / b.fpr_upper), rel=1e-12)
    # TPR_lo <= delta -> 0
    assert epsilon_lower_bound(5, 95, 0, 100, confidence=0.95, delta=0.5).epsilon == 0.0


def test_gdp_mu_lower_bound_formula_and_floor():
    tp, fn, fp, tn = 800, 200, 150, 850
    alpha_hi = binomtest(fp, fp + tn, alternative="less").proportion_ci(0.975, method="exact").high
    beta_hi = binomtest(fn, tp + fn, alternative="less").proportion_ci(0.975, method="exact").high
    ref = norm.ppf(1 - beta_hi) - norm.ppf(alpha_hi)  # tight-auditing paper, Section 2
    assert gdp_mu_lower_bound(tp, fn, fp, tn, 0.95) == pytest.approx(ref, rel=1e-10)
    # a useless attack gives mu = 0, never |negative|
    assert gdp_mu_lower_bound(400, 600, 600, 400, 0.95) == 0.0


def test_gdp_epsilon_is_not_a_lower_bound_for_randomized_response():
    # Exact eps = 1 randomized response: TPR = e/(1+e), FPR = 1/(1+e). The GDP route reports ~5.58.
    tpr = math.e / (1 + math.e)
    mu = gdp_mu_from_rates(tpr, 1 - tpr)
    assert gdp_epsilon(mu, 1e-5) == pytest.approx(5.58, abs=0.01)
    # the rigorous route with the true rates gives exactly 1
    assert accuracy_to_epsilon(tpr) == pytest.approx(1.0, rel=1e-12)


def test_epsilon_gdp_reported_with_caveat():
    b = epsilon_lower_bound(500, 0, 0, 500, confidence=0.99, delta=1e-5)
    assert b.epsilon_gdp == pytest.approx(gdp_epsilon(b.gdp_mu_lower, 1e-5))
    assert epsilon_lower_bound(500, 0, 0, 500, confidence=0.99).epsilon_gdp is None  # delta = 0: no finite value


# ContextLeak Table 1 (Appendix C.3): (empirical epsilon, auditing accuracy %), both rounded.
# 28 of the 40 pairs (all llama rows, qwen/docvqa, three more) agree with log(a/(1-a)) to the rounding.
CONTEXTLEAK_AGREE = [
    (0.37, 59.2), (0.65, 65.8), (1.16, 76.2), (2.04, 88.5), (3.39, 96.8),  # llama docvqa
    (0.38, 59.4), (0.69, 66.6), (1.10, 75.0), (2.02, 88.3), (3.11, 95.8),  # llama samsum
    (0.32, 58.0), (0.66, 65.9), (0.93, 71.8), (1.59, 83.0), (3.18, 96.0),  # llama sarcasm
    (0.29, 57.2), (0.51, 62.6), (0.92, 71.6), (1.45, 81.0), (2.51, 92.5),  # llama subj
    (0.40, 59.9), (0.57, 63.9), (1.11, 75.1), (1.67, 84.1), (2.44, 92.0),  # qwen docvqa
    (0.60, 64.7), (1.63, 83.7),  # qwen samsum, eps = 2 and 8
    (0.85, 70.1),  # qwen subj, eps = 4
]
# The other qwen pairs in our copy of the table do not: e.g. 1.01 at 74.5% (log-odds 1.07) and 2.09 at
# 90.7% (2.28); the errors go both ways, so per-run averaging (Jensen) does not explain them. Kept
# here to document that the formula, not the table, is what we implement.
CONTEXTLEAK_DISAGREE = [
    (0.41, 59.4), (1.01, 74.5), (2.42, 91.7),  # qwen samsum
    (0.33, 57.0), (0.61, 64.3), (0.88, 70.3), (1.45, 80.1), (3.10, 95.6),  # qwen sarcasm
    (0.32, 56.5), (0.53, 62.3), (1.34, 79.5), (2.09, 90.7),  # qwen subj
]


def _rounding_interval(acc_pct: float) -> tuple[float, float]:
    return accuracy_to_epsilon((acc_pct - 0.05) / 100), accuracy_to_epsilon((acc_pct + 0.05) / 100)


@pytest.mark.parametrize("eps,acc_pct", CONTEXTLEAK_AGREE)
def test_contextleak_table1_agrees_to_rounding(eps, acc_pct):
    lo, hi = _rounding_interval(acc_pct)
    assert lo - 0.005 <= eps <= hi + 0.005  # [eps +- 0.005] meets [f(acc -+ 0.05%)]


def test_contextleak_table1_discrepant_rows_are_real():
    for eps, acc_pct in CONTEXTLEAK_DISAGREE:
        lo, hi = _rounding_interval(acc_pct)
        assert not (lo - 0.005 <= eps <= hi + 0.005)
    assert len(CONTEXTLEAK_AGREE) + len(CONTEXTLEAK_DISAGREE) == 40


def test_accuracy_bound_closed_form():
    b = accuracy_epsilon_bound(592, 1000, confidence=0.95)
    a_lo = binomtest(592, 1000, alternative="greater").proportion_ci(0.95, method="exact").low
    assert b.accuracy_lower == pytest.approx(a_lo, abs=1e-12)
    assert b.epsilon == pytest.approx(math.log(a_lo / (1 - a_lo)), rel=1e-12)
    assert b.epsilon_point == pytest.approx(math.log(0.592 / 0.408), rel=1e-12)
    assert b.epsilon < b.epsilon_point
    with_delta = accuracy_epsilon_bound(592, 1000, confidence=0.95, delta=0.01)
    assert with_delta.epsilon == pytest.approx(math.log((a_lo - 0.01) / (1 - a_lo)), rel=1e-12)


def test_coverage_by_simulation():
    """Exact eps-DP randomized response: the lower bound must not exceed eps in more than
    (1 - confidence) of repeated audits. 400 audits, seeded; binomial slack for 400 draws."""
    rng = np.random.default_rng(20250101)
    eps_true, n, conf = 1.0, 300, 0.9
    p = math.exp(eps_true) / (1 + math.exp(eps_true))  # TPR = TNR = p is on the DP boundary
    over_counts = over_acc = 0
    for _ in range(400):
        tp = rng.binomial(n, p)
        tn = rng.binomial(n, p)
        over_counts += epsilon_lower_bound(tp, n - tp, n - tn, tn, confidence=conf).epsilon > eps_true
        correct = rng.binomial(2 * n, p)
        over_acc += accuracy_epsilon_bound(correct, 2 * n, confidence=conf).epsilon > eps_true
    # expected <= 40 each; 60 is > 3 standard deviations above 40 for Binomial(400, 0.1)
    assert over_counts <= 60 and over_acc <= 60


@pytest.mark.parametrize(
    "args,param",
    [
        ((-1, 0, 0, 5), "tp"), ((0, 0, 0, 5), "tp"), ((5, 0, 0, 0), "fp"), ((5, 0, 1.5, 5), "fp"),
    ],
)
def test_counts_rejected(args, param):
    with pytest.raises(PrivacyInputError) as ei:
        epsilon_lower_bound(*args)
    assert ei.value.param == param


@pytest.mark.parametrize("conf", [0.0, 1.0, float("nan"), 2.0])
def test_confidence_rejected(conf):
    with pytest.raises(PrivacyInputError) as ei:
        epsilon_lower_bound(5, 5, 5, 5, confidence=conf)
    assert ei.value.param == "confidence"


def test_correct_above_trials_rejected():
    with pytest.raises(PrivacyInputError) as ei:
        accuracy_epsilon_bound(11, 10)
    assert ei.value.param == "correct"
