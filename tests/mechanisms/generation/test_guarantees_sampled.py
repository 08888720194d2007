"""Empirical privacy checks of the single-step generation mechanisms on small worlds.

Each test samples a mechanism's step many times on two neighbouring inputs
(fake logits / embeddings / answer sets: no model) and bounds the privacy loss
from below with one-sided Clopper-Pearson intervals
(``app.mechanisms.verify``, Bonferroni over every label and direction):

* pure DP: lower bound on max_y |log p(y)/q(y)| must be <= the claimed epsilon;
* (epsilon, delta): lower bound on P(S) - e^eps Q(S) for fixed events S <= delta.

Tolerance: alpha = 1e-6 per check, so a correct mechanism fails a check with
probability <= 1e-6; the seeds are fixed, so the suite is deterministic. The
worlds are near-worst-case (true loss 85-97% of the claim), and every check is
also run on a deliberately broken variant (temperature halved, inverse temperature
doubled, the notebook's Gumbel scale under a swapped answer, sigma halved, no PTR
shift), which the same check must reject: the checker has the power to fail.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.mechanisms import clip_softmax as cs
from app.mechanisms import esa, ksa, poe_decode
from app.mechanisms import sensitivity as sens
from app.mechanisms.verify import counts, hockey_stick, max_log_ratio, sampled_delta_lower_bound, sampled_epsilon_lower_bound
from app.privacy.adjacency import Adjacency
from app.privacy.clip_softmax import clip_softmax_em_epsilon

ALPHA = 1e-6
N = 200_000


def _sampled_eps(sample_p, sample_q, k: int) -> float:
    return sampled_epsilon_lower_bound(counts(sample_p, k), counts(sample_q, k), alpha=ALPHA).lower


# ---------------------------------------------------------------------------
# clip_softmax (ICLInf Algorithm 1), one token
# ---------------------------------------------------------------------------

V = 21
CLIP = 1.0
S = 2


def _clip_worlds() -> tuple[np.ndarray, np.ndarray]:
    """Prompt 1 is flat (every token at the top); prompt 2 puts token 0 at the top (D) or far
    below every other token (D'): the mean moves by +-2c/s on every coordinate."""
    flat = np.zeros(V)
    top0 = np.full(V, -50.0)
    top0[0] = 0.0
    bottom0 = np.zeros(V)
    bottom0[0] = -50.0
    return np.stack([flat, top0]), np.stack([flat, bottom0])


def _clip_claim(temperature: float) -> float:
    # Per-token pure epsilon of the step, from the privacy module (one prompt swapped).
    return clip_softmax_em_epsilon(CLIP, S, temperature, Adjacency.REPLACE_ONE)


def test_clip_softmax_step_sampled_within_claim_and_broken_variant_rejected():
    d, d2 = _clip_worlds()
    tau = 4.0 * CLIP / S  # claimed per-token epsilon 1
    claim = _clip_claim(tau)
    assert claim == pytest.approx(1.0)
    exact = max_log_ratio(np.exp(cs.step_log_probs(d, CLIP, tau)), np.exp(cs.step_log_probs(d2, CLIP, tau)))
    assert 0.9 * claim < exact <= claim + 1e-12  # near worst case, within the claim

    rng = np.random.default_rng(101)
    lower = _sampled_eps(cs.sample_token(d, CLIP, tau, rng, size=N), cs.sample_token(d2, CLIP, tau, rng, size=N), V)
    assert lower <= claim

    # Broken: the sampler uses half the calibrated temperature (claim unchanged) -> rejected.
    rng = np.random.default_rng(102)
    bad = _sampled_eps(cs.sample_token(d, CLIP, tau / 2, rng, size=N), cs.sample_token(d2, CLIP, tau / 2, rng, size=N), V)
    assert bad > claim


def test_clip_softmax_step_exact_on_random_neighbours():
    rng = np.random.default_rng(7)
    worst = 0.0
    for _ in range(300):
        s, v, c, tau = int(rng.integers(1, 6)), int(rng.integers(2, 40)), float(rng.uniform(0.1, 5)), float(rng.uniform(0.2, 5))
        z = rng.normal(0, 4, size=(s, v))
        z2 = z.copy()
        z2[int(rng.integers(s))] = rng.normal(0, 4, size=v) * rng.choice([0.1, 1.0, 20.0])
        loss = max_log_ratio(np.exp(cs.step_log_probs(z, c, tau)), np.exp(cs.step_log_probs(z2, c, tau)))
        claim = clip_softmax_em_epsilon(c, s, tau, Adjacency.REPLACE_ONE)
        assert loss <= claim * (1 + 1e-9)
        worst = max(worst, loss / claim)
    assert worst > 0.3  # the random worlds do exercise the bound


# ---------------------------------------------------------------------------
# PoE decoding, one token
# ---------------------------------------------------------------------------

PV = 50
PCLIP = 4.0


def _poe_add_worlds() -> tuple[np.ndarray, np.ndarray]:
    """D: three experts, flat over 50 tokens; D': the same plus a fourth expert sure of token 0."""
    flat = np.zeros((3, PV))
    sure = np.full(PV, -100.0)
    sure[0] = 0.0
    return flat, np.vstack([flat, sure])


def test_poe_step_add_remove_sampled_within_claim_and_broken_variant_rejected():
    eps = 1.0
    lam = sens.poe_inverse_temperature(eps, PCLIP, sens.UnitChange.ADD_UNIT)
    assert lam == pytest.approx(eps / PCLIP)
    d, d2 = _poe_add_worlds()
    exact = max_log_ratio(np.exp(poe_decode.step_log_probs(d, PCLIP, lam)),
                          np.exp(poe_decode.step_log_probs(d2, PCLIP, lam)))
    assert 0.9 * eps < exact <= eps + 1e-12

    rng = np.random.default_rng(201)
    lower = _sampled_eps(poe_decode.sample_token(d, PCLIP, lam, rng, size=N),
                         poe_decode.sample_token(d2, PCLIP, lam, rng, size=N), PV)
    assert lower <= eps
    # Broken: twice the inverse temperature for the same claim -> rejected.
    rng = np.random.default_rng(202)
    bad = _sampled_eps(poe_decode.sample_token(d, PCLIP, 2 * lam, rng, size=N),
                       poe_decode.sample_token(d2, PCLIP, 2 * lam, rng, size=N), PV)
    assert bad > eps


def test_poe_step_replace_one_exact_worst_case_and_random():
    """Swap: nine experts sure of token z, the tenth moves from z to a; lam = eps/(2c)."""
    eps, v = 1.0, 10
    lam = sens.poe_inverse_temperature(eps, PCLIP, sens.UnitChange.SWAP_UNIT)
    sure_z = np.full(v, -100.0)
    sure_z[0] = 0.0
    sure_a = np.full(v, -100.0)
    sure_a[1] = 0.0
    d = np.vstack([np.tile(sure_z, (9, 1)), sure_z])
    d2 = np.vstack([np.tile(sure_z, (9, 1)), sure_a])
    loss = max_log_ratio(np.exp(poe_decode.step_log_probs(d, PCLIP, lam)), np.exp(poe_decode.step_log_probs(d2, PCLIP, lam)))
    assert 0.9 * eps < loss <= eps + 1e-12
    # The add/remove constant (lam = eps/c) is not enough for a swap.
    bad = max_log_ratio(np.exp(poe_decode.step_log_probs(d, PCLIP, 2 * lam)),
                        np.exp(poe_decode.step_log_probs(d2, PCLIP, 2 * lam)))
    assert bad > 1.5 * eps

    rng = np.random.default_rng(9)
    for _ in range(300):
        e, vv, c = int(rng.integers(1, 6)), int(rng.integers(2, 40)), float(rng.uniform(0.5, 8))
        z = rng.normal(0, 5, size=(e, vv))
        z2 = z.copy()
        z2[int(rng.integers(e))] = rng.normal(0, 5, size=vv) * rng.choice([0.1, 1.0, 30.0])
        lam_s = sens.poe_inverse_temperature(eps, c, sens.UnitChange.SWAP_UNIT)
        loss = max_log_ratio(np.exp(poe_decode.step_log_probs(z, c, lam_s)), np.exp(poe_decode.step_log_probs(z2, c, lam_s)))
        assert loss <= eps * (1 + 1e-9)
        # Add/remove of a whole expert at lam = eps/c.
        lam_a = sens.poe_inverse_temperature(eps, c, sens.UnitChange.ADD_UNIT)
        z3 = np.vstack([z, rng.normal(0, 5, size=vv) * rng.choice([1.0, 30.0])])
        loss = max_log_ratio(np.exp(poe_decode.step_log_probs(z, c, lam_a)), np.exp(poe_decode.step_log_probs(z3, c, lam_a)))
        assert loss <= eps * (1 + 1e-9)


# ---------------------------------------------------------------------------
# KSA: exponential mechanism on the count gaps, and the PTR test
# ---------------------------------------------------------------------------


def _ksa_worlds() -> tuple[list[str], list[str]]:
    """16 answers: 'alpha' in 14, 'gamma' in 2, 'beta' in 2 -> gaps (12, 0). Swapping one
    'alpha gamma' answer for 'beta' gives counts (13, 3, 1) -> gaps (10, 2)."""
    d = ["alpha"] * 12 + ["alpha gamma"] * 2 + ["beta"] * 2
    d2 = ["alpha"] * 12 + ["alpha gamma", "beta"] + ["beta"] * 2
    return d, d2


def test_ksa_selection_sampled_within_claim_and_notebook_scale_rejected_under_swap():
    d, d2 = _ksa_worlds()
    g, g2 = ksa.count_gaps(ksa.keyword_histogram(d), 2), ksa.count_gaps(ksa.keyword_histogram(d2), 2)
    assert list(g) == [12, 0] and list(g2) == [10, 2]
    eps_em, dsens = 1.0, ksa.gap_sensitivity(sens.UnitChange.SWAP_UNIT)
    assert dsens == 2.0
    rng = np.random.default_rng(301)
    k1, _ = ksa.select_k(g, eps_em, dsens, rng, size=N)
    k2, _ = ksa.select_k(g2, eps_em, dsens, rng, size=N)
    assert _sampled_eps(k1 - 1, k2 - 1, 2) <= eps_em
    # The notebook's Gumbel(2/eps) is the D = 1 scale: under a swapped answer it leaks ~2 eps.
    rng = np.random.default_rng(302)
    b1, _ = ksa.select_k(g, eps_em, 1.0, rng, size=N)
    b2, _ = ksa.select_k(g2, eps_em, 1.0, rng, size=N)
    assert _sampled_eps(b1 - 1, b2 - 1, 2) > eps_em


def test_ksa_gap_sensitivity_on_random_answer_sets():
    """Counts move by <= 1 and gaps by <= D (2 for a swapped answer, 1 for an added one)."""
    rng = np.random.default_rng(5)
    vocab = [f"w{i}" for i in range(12)]
    worst_swap = worst_add = 0.0
    for _ in range(400):
        t = int(rng.integers(1, 12))
        answers = [" ".join(rng.choice(vocab, size=int(rng.integers(0, 6)))) for _ in range(t)]
        other = " ".join(rng.choice(vocab, size=int(rng.integers(0, 6))))
        swapped = list(answers)
        swapped[int(rng.integers(t))] = other
        added = answers + [other]
        g = ksa.count_gaps(ksa.keyword_histogram(answers), 8)
        worst_swap = max(worst_swap, float(np.abs(g - ksa.count_gaps(ksa.keyword_histogram(swapped), 8)).max()))
        worst_add = max(worst_add, float(np.abs(g - ksa.count_gaps(ksa.keyword_histogram(added), 8)).max()))
    assert worst_swap == ksa.gap_sensitivity(sens.UnitChange.SWAP_UNIT)  # attained, never exceeded
    assert worst_add == ksa.gap_sensitivity(sens.UnitChange.ADD_UNIT)


def test_ksa_ptr_unstable_set_passes_with_probability_delta0_only():
    """gap <= D: the test passes with probability exactly delta0 (a stable gap passes often)."""
    delta0, sigma, dsens, n = 0.05, 1.0, 2.0, 20_000
    rng = np.random.default_rng(401)
    passed = sum(ksa.ptr_test(2.0, dsens, sigma, delta0, rng)[0] for _ in range(n))
    from app.privacy.empirical import clopper_pearson_lower, clopper_pearson_upper

    assert clopper_pearson_lower(passed, n, 1 - ALPHA) <= delta0 <= clopper_pearson_upper(passed, n, 1 - ALPHA)
    assert ksa.pass_probability(2.0, dsens, sigma, delta0) == pytest.approx(delta0)
    assert ksa.pass_probability(0.0, dsens, sigma, delta0) == pytest.approx(delta0)  # max(D, gap) clamps
    assert ksa.pass_probability(20.0, dsens, sigma, delta0) > 0.999
    # Broken: without the Phi^-1(1 - delta0) shift an unstable set passes half the time.
    rng = np.random.default_rng(402)
    broken = int(np.sum(2.0 + rng.normal(0, dsens * sigma, size=n) > dsens))
    assert clopper_pearson_lower(broken, n, 1 - ALPHA) > delta0


# ---------------------------------------------------------------------------
# ESA: the Gaussian noisy mean
# ---------------------------------------------------------------------------


def _esa_worlds() -> tuple[np.ndarray, np.ndarray]:
    u, w = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    return np.stack([u, w]), np.stack([-u, w])  # one member's answer flips: the Lemma A.1 worst case


def test_esa_noisy_mean_sampled_within_epsilon_delta_and_half_sigma_rejected():
    eps, delta, t_members = 1.0, 0.05, 2
    sens_mean = esa.mean_sensitivity(t_members, 1.0, sens.UnitChange.SWAP_UNIT)
    assert sens_mean == pytest.approx(1.0)
    sigma = esa.calibrate_noise(eps, delta, sens_mean, "analytic").sigma
    d, d2 = _esa_worlds()
    thresholds = [0.0, 0.5, 1.0, 1.5, 1.78, 2.0, 2.5]  # fixed before sampling; Bonferroni over them

    def worst_delta(sig: float, seed: int) -> float:
        rng = np.random.default_rng(seed)
        x = esa.aggregate(d, 1.0, sig, rng, size=N)[1][:, 0]
        x2 = esa.aggregate(d2, 1.0, sig, rng, size=N)[1][:, 0]
        best = -math.inf
        for t in thresholds:
            for a, b in ((x, x2), (-x2, -x)):  # both directions (the worlds are mirror images)
                cp = counts((a > t).astype(int), 2)
                cq = counts((b > t).astype(int), 2)
                best = max(best, sampled_delta_lower_bound(cp, cq, eps, [1], alpha=ALPHA / (2 * len(thresholds))).lower)
        return best

    assert worst_delta(sigma, 501) <= delta
    assert worst_delta(sigma / 2, 502) > delta


def test_esa_noise_exact_hockey_stick_on_a_grid():
    """Discretised output law of the projected noisy mean: hockey stick <= delta (up to binning)."""
    from scipy.stats import norm

    eps, delta = 1.0, 1e-3
    sigma = esa.calibrate_noise(eps, delta, 1.0, "analytic").sigma
    edges = np.linspace(-40, 40, 4001)
    p = np.diff(norm.cdf(edges, loc=0.5, scale=sigma))
    q = np.diff(norm.cdf(edges, loc=-0.5, scale=sigma))
    assert hockey_stick(p, q, eps) <= delta * (1 + 1e-6)
    assert hockey_stick(np.diff(norm.cdf(edges, 0.5, sigma / 2)), np.diff(norm.cdf(edges, -0.5, sigma / 2)), eps) > 10 * delta


# ---------------------------------------------------------------------------
# Per-token Renyi divergence vs the curves the accountants compose (exact, small worlds)
# ---------------------------------------------------------------------------

ORDERS = np.array([1.25, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0])


def _renyi(lp: np.ndarray, lq: np.ndarray, alpha: float) -> float:
    from scipy.special import logsumexp

    return float(logsumexp(alpha * lp + (1 - alpha) * lq) / (alpha - 1))


def _max_ratio_to_curve(lp, lq, curve) -> float:
    return max(max(_renyi(lp, lq, a), _renyi(lq, lp, a)) / c for a, c in zip(ORDERS, curve))


def test_poe_token_renyi_within_the_bounded_range_curve():
    """PoE decoding composes min(alpha eps^2/8, sinh bound, eps) per token (eps-bounded range =>
    eps^2/8-zCDP). Exact D_alpha on the worst case (one expert flips a two-token vote) reaches 96%
    of the curve; a curve claiming a quarter of that rho is violated; random worlds stay under."""
    eps, c = 0.8, 4.0
    lam = sens.poe_inverse_temperature(eps, c, sens.UnitChange.SWAP_UNIT)
    curve = poe_decode.per_token_rdp(ORDERS, eps)
    z0, z1 = np.array([[0.0, -100.0]]), np.array([[-100.0, 0.0]])
    lp, lq = poe_decode.step_log_probs(z0, c, lam), poe_decode.step_log_probs(z1, c, lam)
    worst = _max_ratio_to_curve(lp, lq, curve)
    assert 0.95 < worst <= 1.0 + 1e-9
    assert _max_ratio_to_curve(lp, lq, ORDERS * eps**2 / 32) > 1.0  # a 4x smaller rho is caught
    rng = np.random.default_rng(12)
    for _ in range(300):
        e, v = int(rng.integers(1, 5)), int(rng.integers(2, 30))
        z = rng.normal(0, 5, size=(e, v))
        z2 = z.copy()
        z2[int(rng.integers(e))] = rng.normal(0, 5, size=v) * rng.choice([0.1, 1.0, 30.0])
        assert _max_ratio_to_curve(poe_decode.step_log_probs(z, c, lam), poe_decode.step_log_probs(z2, c, lam), curve) <= 1 + 1e-9


def test_clip_softmax_token_renyi_within_the_privacy_module_curve():
    """The clip-softmax per-token curve of ``app.privacy`` (ICLInf C.3.1, one prompt swapped)."""
    from app.privacy.accountant import ClipSoftmaxEvent

    c, tau, s = 1.0, 4.0, 1
    curve = ClipSoftmaxEvent(c, s, tau).rdp(ORDERS, Adjacency.REPLACE_ONE)
    z0, z1 = np.array([[0.0, -100.0]]), np.array([[-100.0, 0.0]])
    lp, lq = cs.step_log_probs(z0, c, tau), cs.step_log_probs(z1, c, tau)
    assert 0.95 < _max_ratio_to_curve(lp, lq, curve) <= 1.0 + 1e-9
    # The add/remove ("zero-out") curve of the module is too small for a swapped prompt: caught.
    assert _max_ratio_to_curve(lp, lq, ClipSoftmaxEvent(c, s, tau).rdp(ORDERS, Adjacency.ADD_REMOVE)) > 1.0
    rng = np.random.default_rng(13)
    for _ in range(300):
        s, v = int(rng.integers(1, 5)), int(rng.integers(2, 30))
        cc, tt = float(rng.uniform(0.2, 4)), float(rng.uniform(0.5, 5))
        z = rng.normal(0, 5, size=(s, v))
        z2 = z.copy()
        z2[int(rng.integers(s))] = rng.normal(0, 5, size=v) * rng.choice([0.1, 1.0, 30.0])
        cur = ClipSoftmaxEvent(cc, s, tt).rdp(ORDERS, Adjacency.REPLACE_ONE)
        assert _max_ratio_to_curve(cs.step_log_probs(z, cc, tt), cs.step_log_probs(z2, cc, tt), cur) <= 1 + 1e-9


# ---------------------------------------------------------------------------
# The same exact checks restricted to a public candidate set (``params.public_top_k``)
# ---------------------------------------------------------------------------


def _random_set(rng: np.random.Generator, v: int) -> np.ndarray:
    """A candidate set drawn independently of the two neighbours (as the public top-k is)."""
    return np.sort(rng.choice(v, size=int(rng.integers(1, v + 1)), replace=False))


def test_restricted_steps_exact_e_eps_and_renyi_within_the_unrestricted_claims():
    """Over any data-independent set C: zero mass outside C, and on C the e^eps bound and the
    per-token Renyi curves of the full-vocabulary step still hold (same claim, same curve: the
    accounting does not depend on the range). The worst cases are two-token worlds, so a
    set containing both tokens attains them."""
    from app.privacy.accountant import ClipSoftmaxEvent

    rng = np.random.default_rng(14)
    eps = 0.8
    worst_cs = worst_poe = 0.0
    for _ in range(300):
        s, v = int(rng.integers(1, 5)), int(rng.integers(2, 40))
        c, tau = float(rng.uniform(0.2, 4)), float(rng.uniform(0.5, 5))
        z = rng.normal(0, 5, size=(s, v))
        z2 = z.copy()
        z2[int(rng.integers(s))] = rng.normal(0, 5, size=v) * rng.choice([0.1, 1.0, 30.0])
        cand = _random_set(rng, v)
        outside = np.setdiff1d(np.arange(v), cand)

        lp, lq = cs.step_log_probs(z, c, tau, cand), cs.step_log_probs(z2, c, tau, cand)
        assert np.all(np.isneginf(lp[outside])) and np.all(np.isneginf(lq[outside]))
        claim = clip_softmax_em_epsilon(c, s, tau, Adjacency.REPLACE_ONE)
        loss = max_log_ratio(np.exp(lp[cand]), np.exp(lq[cand]))
        assert loss <= claim * (1 + 1e-9)
        worst_cs = max(worst_cs, loss / claim)
        curve = ClipSoftmaxEvent(c, s, tau).rdp(ORDERS, Adjacency.REPLACE_ONE)
        assert _max_ratio_to_curve(lp[cand], lq[cand], curve) <= 1 + 1e-9

        lam = sens.poe_inverse_temperature(eps, c, sens.UnitChange.SWAP_UNIT)
        lp, lq = poe_decode.step_log_probs(z, c, lam, cand), poe_decode.step_log_probs(z2, c, lam, cand)
        assert np.all(np.isneginf(lp[outside])) and np.all(np.isneginf(lq[outside]))
        loss = max_log_ratio(np.exp(lp[cand]), np.exp(lq[cand]))
        assert loss <= eps * (1 + 1e-9)
        worst_poe = max(worst_poe, loss / eps)
        assert _max_ratio_to_curve(lp[cand], lq[cand], poe_decode.per_token_rdp(ORDERS, eps)) <= 1 + 1e-9
    assert worst_cs > 0.3 and worst_poe > 0.3  # the random worlds exercise the bound

    # Worst cases inside a larger vocabulary, restricted to a set holding the two tokens:
    # the restricted step reaches the same fraction of the (unchanged) claim.
    v = 30
    cand = np.array([0, 1, 7, 12])
    z0 = np.full((1, v), -100.0)
    z0[0, 0] = 0.0
    z1 = np.full((1, v), -100.0)
    z1[0, 1] = 0.0
    c, tau = 1.0, 4.0
    curve = ClipSoftmaxEvent(c, 1, tau).rdp(ORDERS, Adjacency.REPLACE_ONE)
    lp, lq = cs.step_log_probs(z0, c, tau, cand)[cand], cs.step_log_probs(z1, c, tau, cand)[cand]
    assert max_log_ratio(np.exp(lp), np.exp(lq)) <= clip_softmax_em_epsilon(c, 1, tau, Adjacency.REPLACE_ONE) + 1e-12
    assert 0.5 < _max_ratio_to_curve(lp, lq, curve) <= 1.0 + 1e-9
    # PoE: nine experts sure of token 0, the tenth moves from 0 to 1 (the swap worst case).
    lam = sens.poe_inverse_temperature(eps, 4.0, sens.UnitChange.SWAP_UNIT)
    d, d2 = np.vstack([np.tile(z0, (9, 1)), z0]), np.vstack([np.tile(z0, (9, 1)), z1])
    lp, lq = poe_decode.step_log_probs(d, 4.0, lam, cand)[cand], poe_decode.step_log_probs(d2, 4.0, lam, cand)[cand]
    assert 0.9 * eps < max_log_ratio(np.exp(lp), np.exp(lq)) <= eps + 1e-12
    assert _max_ratio_to_curve(lp, lq, poe_decode.per_token_rdp(ORDERS, eps)) <= 1.0 + 1e-9


def test_restricted_clip_softmax_sampled_within_claim():
    d, d2 = _clip_worlds()
    tau = 4.0 * CLIP / S
    claim = _clip_claim(tau)
    cand = np.array([0, 3, 5, 9])
    rng = np.random.default_rng(103)
    a = cs.sample_token(d, CLIP, tau, rng, size=N, candidates=cand)
    b = cs.sample_token(d2, CLIP, tau, rng, size=N, candidates=cand)
    assert set(np.unique(a).tolist()) <= set(cand.tolist()) and set(np.unique(b).tolist()) <= set(cand.tolist())
    assert _sampled_eps(a, b, V) <= claim
