"""Generation audits without a model: the exact noise reduction of the ESA bootstrap, the
queries, and the statistics of the decisions on synthetic clean means whose answer is known.

Synthetic world: unit signal embeddings e1 = u, e0 = -u (distance 2, the largest possible);
with the canary one of T partitions answers y1, so the clean mean moves by exactly 2/T, ESA's
replace-one sensitivity at clip norm 1 (tight-auditing Lemma A.1). The projection on the
reference vector is then Gaussian with mean gap = sensitivity, so its GDP epsilon must match the
analytic calibration, and the Clopper-Pearson bound must stay below it.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from app.audit import make_canary
from app.audit.gen_bootstrap import esa_bootstrap, sample_sq_distances
from app.audit.gen_queries import (
    DEFAULT_SIGNALS,
    GENERATION_STRATEGIES,
    resolve_generation_query,
    split_canary,
)
from app.audit.gen_targets import CleanDraw
from app.mechanisms import esa
from app.privacy.calibration import calibrate_gaussian

D = 32
T = 4
DELTA = 1e-5


def _world(seed: int = 0, n_cand: int = 6):
    rng = np.random.default_rng(seed)
    u = rng.standard_normal(D)
    u /= np.linalg.norm(u)
    e1, e0 = u, -u
    # Prompt 3: with no examples the zero-shot candidates say y1 or y0 at random.
    cands = np.array([e1 if i % 2 == 0 else e0 for i in range(n_cand)])
    with_mean = ((T - 1) * e0 + e1) / T
    return e1, e0, cands, with_mean, e0.copy()


def _sigma(eps: float) -> float:
    s = esa.mean_sensitivity(T, 1.0, esa.sens.UnitChange.SWAP_UNIT)  # 2R/T
    return calibrate_gaussian(eps, DELTA, sensitivity=s, method="analytic").value


def test_reduction_is_exact():
    """Squared distances drawn through the r-dimensional reduction have the distribution of full
    d-dimensional draws (two-sample KS per point; and the projection's mean and sd)."""
    rng = np.random.default_rng(1)
    c = rng.standard_normal(D) * 0.3
    pts = rng.standard_normal((3, D))
    v = rng.standard_normal(D)
    sigma, n = 0.7, 40_000
    sq, proj = sample_sq_distances(c, pts, sigma, n, np.random.default_rng(2), v)
    z = np.random.default_rng(3).standard_normal((n, D)) * sigma
    full = np.sum((c[None, None, :] + z[:, None, :] - pts[None, :, :]) ** 2, axis=2)
    for j in range(3):
        # KS at n = 40,000 per side: the 0.001 critical value is about 1.95 * sqrt(2/n) = 0.0138.
        assert stats.ks_2samp(sq[:, j], full[:, j]).statistic < 0.0138
    assert proj.mean() == pytest.approx(c @ v, abs=4 * sigma * np.linalg.norm(v) / np.sqrt(n))
    assert proj.std() == pytest.approx(sigma * np.linalg.norm(v), rel=0.02)
    # Joint structure: the correlation of two distances matches the full draws'.
    assert np.corrcoef(sq[:, 0], sq[:, 1])[0, 1] == pytest.approx(np.corrcoef(full[:, 0], full[:, 1])[0, 1], abs=0.02)


@pytest.mark.parametrize("eps", [1.0, 2.0, 4.0])
def test_reference_vector_is_tight_and_valid_on_the_worst_case_world(eps):
    """The projection is exactly Gaussian with mu = sensitivity / sigma, so the GDP estimate should
    reach epsilon_theory. One run's estimate is biased low and spread (the threshold is chosen on
    half the draws and the mu lower bound is a 95% bound): over 8 seeds at eps 1 it ranged 0.76-0.97
    (mean 0.92, sd 0.065), so the median of 5 seeded runs is held to 10%; every run's rigorous bound
    stays below the claim."""
    e1, e0, cands, cw, co = _world()
    sigma = _sigma(eps)
    dw = [CleanDraw(cw, cands, sigma)] * 4
    do = [CleanDraw(co, cands, sigma)] * 4
    gdp = []
    for seed in range(5):
        b = esa_bootstrap(dw, do, np.vstack([e1, e0]), "signal", rng=np.random.default_rng(seed), n_sample=400_000,
                          statistic="reference_vector", delta=DELTA, epsilon_theory=eps, objective="mu",
                          convergence=False)
        wb = b.estimates["white-box"]
        assert wb.gdp_applicable
        assert wb.epsilon_lower <= eps and b.estimates["black-box"].epsilon_lower <= eps
        gdp.append(wb.epsilon_gdp)
    assert np.median(gdp) == pytest.approx(eps, rel=0.10), gdp


def test_signal_margin_and_black_box_stay_below_theory_and_catch_quartered_noise():
    e1, e0, cands, cw, co = _world()
    eps = 2.0
    sigma = _sigma(eps)
    ok = esa_bootstrap([CleanDraw(cw, cands, sigma)], [CleanDraw(co, cands, sigma)], np.vstack([e1, e0]), "signal",
                       rng=np.random.default_rng(3), n_sample=200_000, delta=DELTA, epsilon_theory=eps)
    for e in ok.estimates.values():
        assert e.epsilon_lower <= eps
    broken = esa_bootstrap([CleanDraw(cw, cands, sigma / 4)], [CleanDraw(co, cands, sigma / 4)],
                           np.vstack([e1, e0]), "signal", rng=np.random.default_rng(3), n_sample=200_000,
                           delta=DELTA, epsilon_theory=eps)
    assert broken.estimates["white-box"].epsilon_lower > eps  # caught white-box
    assert broken.estimates["black-box"].epsilon_lower > eps  # and black-box (the released candidate)


def test_black_box_needs_candidates_that_can_say_y1():
    """Prompt 3's point (tight-auditing 3.4): ESA releases a zero-shot candidate; if none says y1,
    the black-box auditor sees nothing whatever the noise."""
    e1, e0, _, cw, co = _world()
    only_y0 = np.vstack([e0, e0, e0])
    b = esa_bootstrap([CleanDraw(cw, only_y0, 0.01)], [CleanDraw(co, only_y0, 0.01)], np.vstack([e1, e0]),
                      "signal", rng=np.random.default_rng(0), n_sample=10_000, delta=DELTA)
    assert b.estimates["black-box"].tp == 0 and b.estimates["black-box"].epsilon_lower == 0.0
    assert b.estimates["white-box"].epsilon_lower > 1.0  # the noisy mean still shows it


def test_no_shift_no_leak():
    e1, e0, cands, _, co = _world()
    b = esa_bootstrap([CleanDraw(co, cands, 0.2)], [CleanDraw(co, cands, 0.2)], np.vstack([e1, e0]), "signal",
                      rng=np.random.default_rng(4), n_sample=100_000, statistic="reference_vector", delta=DELTA)
    assert all(e.epsilon_lower == 0.0 for e in b.estimates.values())


def test_bootstrap_refuses_mixed_noise_and_unknown_statistic():
    e1, e0, cands, cw, co = _world()
    with pytest.raises(ValueError, match="noise scales"):
        esa_bootstrap([CleanDraw(cw, cands, 0.1)], [CleanDraw(co, cands, 0.2)], np.vstack([e1, e0]), "signal",
                      rng=np.random.default_rng(0), n_sample=100)
    with pytest.raises(ValueError, match="statistic"):
        esa_bootstrap([CleanDraw(cw, cands, 0.1)], [CleanDraw(co, cands, 0.1)], np.vstack([e1, e0]), "signal",
                      rng=np.random.default_rng(0), n_sample=100, statistic="positive")


def test_generation_queries_resolve():
    canary = make_canary("false_fact", np.random.default_rng(0), label="x")
    a = resolve_generation_query("signal_text", canary)
    assert a.labels == DEFAULT_SIGNALS and a.positive_index == 0 and a.negative_index == 1
    assert canary.text in a.query and DEFAULT_SIGNALS[0] in a.query and DEFAULT_SIGNALS[1] in a.query
    r = resolve_generation_query("reference", canary)
    assert r.labels == GENERATION_STRATEGIES["reference"].signals
    rep = resolve_generation_query("repeat", canary)
    prefix, rest = split_canary(canary.text)
    assert prefix in rep.query and rest not in rep.query and rep.reference == rest
    assert split_canary("abcdef") == ("abc", "def")
    custom = resolve_generation_query("signal_text", canary, ("A cat.", "A dog."))
    assert custom.labels == ("A cat.", "A dog.")
    with pytest.raises(ValueError, match="unknown generation query"):
        resolve_generation_query("nope", canary)
    with pytest.raises(ValueError, match="differ"):
        resolve_generation_query("signal_text", canary, ("same", "same"))


def test_convergence_in_n_sample_and_n_llm():
    e1, e0, cands, cw, co = _world()
    sigma = _sigma(2.0)
    b = esa_bootstrap([CleanDraw(cw, cands, sigma)] * 8, [CleanDraw(co, cands, sigma)] * 8, np.vstack([e1, e0]),
                      "signal", rng=np.random.default_rng(5), n_sample=64_000, statistic="reference_vector",
                      delta=DELTA, epsilon_theory=2.0)
    by_sample = [r for r in b.convergence if r["n_llm"] == 16]
    assert [r["n_sample"] for r in by_sample] == [1000, 4000, 16000, 64000]
    assert sorted(r["n_llm"] for r in b.convergence if r["n_llm"] != 16) == [4, 8]
    # More draws, tighter rigorous bound (same threshold, nested counted prefixes).
    assert by_sample[-1]["white_box_epsilon_lower"] >= by_sample[0]["white_box_epsilon_lower"]
