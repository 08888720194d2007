"""ICLInf arithmetic without a real model: Eq. 4 on fakes with hand-computed answers, Renyi divergences
against closed forms, the decoding audit's per-token loss against the clip-softmax bounds (Thm C.6-C.8)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.audit.iclinf import iclinf, iclinf_query, leave_one_out_losses, summarize
from app.audit.iclinf_decoding import (
    GENERATION_TEMPLATES,
    audit_decoding,
    empirical_epsilon,
    generation_batches,
    step_distributions,
    step_loss,
    theoretical,
)
from app.audit.iclinf_forward import trie_counts
from app.audit.iclinf_renyi import max_abs_log_ratio, renyi_divergence, renyi_symmetric
from app.privacy.clip_softmax import clip_softmax_rdp
from tests.audit.iclinf.fakes import CountingLM, RandomDecodeLM

LABELS = ("alpha", "beta")


def lse(*xs: float) -> float:
    return math.log(sum(math.exp(x) for x in xs))


# ---------------------------------------------------------------------------
# Eq. 4 on a fake whose label distribution is softmax(counts of demonstration labels)
# ---------------------------------------------------------------------------


def test_hand_computed_iclinf_label_only():
    lm = CountingLM(LABELS)
    ex = [("first", "alpha"), ("second", "alpha"), ("third", "beta")]
    q = iclinf_query(lm, ex, "a query", LABELS, use_trie=False)
    full = lse(2, 1)  # counts (2, 1)
    # Remove an alpha: counts (1, 1), uniform. |log p| changes: alpha 2-L+log2 (>0), beta |1-L+log2|.
    pos_alpha = max(abs(2 - full + math.log(2)), abs(1 - full + math.log(2)))
    assert pos_alpha == pytest.approx(full - 1 - math.log(2))  # = 0.62011
    # Remove the beta: counts (2, 0); the beta label moves most: |(1 - L) - (0 - L')|.
    pos_beta = 1 - full + lse(2, 0)
    assert q.per_position == pytest.approx((pos_alpha, pos_alpha, pos_beta), abs=1e-12)
    assert q.loss == pytest.approx(0.8136663, abs=1e-6) and q.argmax_position == 2
    assert q.predicted == "alpha" and lm.calls == 1  # the n+1 prompts in one batched call


def test_hand_computed_iclinf_full_vocabulary():
    # Appendix E.1: the distribution over the whole vocabulary (labels + two filler tokens, logits 0.5, -1).
    lm = CountingLM(LABELS)
    ex = [("first", "alpha"), ("third", "beta")]
    q = iclinf_query(lm, ex, "a query", LABELS, variant="full", use_trie=False)
    full = lse(1, 1, 0.5, -1)

    def loss(counts):
        other = lse(counts[0], counts[1], 0.5, -1)
        return max(abs((1 - full) - (counts[0] - other)), abs((1 - full) - (counts[1] - other)),
                   abs((0.5 - full) - (0.5 - other)), abs((-1 - full) - (-1 - other)))

    assert q.per_position == pytest.approx((loss((0, 1)), loss((1, 0))), abs=1e-6)  # float32 vocab rows


def test_calibration_removes_a_query_independent_bias():
    # Appendix B: W = diag(1/(p_cf + eps)). When the label distribution depends on the exemplars only
    # through a multiplicative bias (here: entirely), calibration maps every set to (almost) uniform.
    lm = CountingLM(LABELS, weight=1.5, query_bonus=2.0)
    ex = [("first", "alpha"), ("second", "alpha"), ("third", "beta")]
    raw = iclinf_query(lm, ex, "about alpha", LABELS, use_trie=False)
    cal = iclinf_query(lm, ex, "about alpha", LABELS, calibrate=True, use_trie=False)
    exact = iclinf_query(lm, ex, "about alpha", LABELS, calibrate=True, eps=0.0, use_trie=False)
    assert raw.loss > 0.5
    assert exact.loss < 1e-12 and cal.loss < 1e-4  # eps = 1e-6 perturbs by about eps / p_cf
    assert cal.predicted == "alpha"  # the query bonus survives calibration


def test_iclinf_mean_std_and_positions_over_queries():
    lm = CountingLM(LABELS, weight=0.7)
    pool = [(f"train {i}", LABELS[i % 3 == 0]) for i in range(12)]
    tests = [(f"test {i}", "alpha") for i in range(5)]
    res = iclinf(lm, pool, tests, LABELS, n_shots=3, m=5, seed=7, use_trie=False)

    def expected(ex_labels):
        w = 0.7
        c = [ex_labels.count(lab) for lab in LABELS]
        per = []
        for i in range(len(ex_labels)):
            rest = ex_labels[:i] + ex_labels[i + 1:]
            c2 = [rest.count(lab) for lab in LABELS]
            a, b = lse(*(w * x for x in c)), lse(*(w * x for x in c2))
            per.append(max(abs((w * c[k] - a) - (w * c2[k] - b)) for k in range(2)))
        return per

    per = np.array([expected([pool[i][1] for i in q.exemplar_indices]) for q in res.queries])
    assert res.m == 5 and len(res.queries) == 5 and sorted({q.query_index for q in res.queries}) == list(range(5))
    assert np.allclose([q.per_position for q in res.queries], per, rtol=0, atol=1e-12)
    assert res.mean == pytest.approx(per.max(axis=1).mean()) and res.std == pytest.approx(per.max(axis=1).std(ddof=1))
    assert res.per_position_mean == pytest.approx(per.mean(axis=0).tolist())
    assert all(len(set(q.exemplar_indices)) == 3 for q in res.queries)  # without replacement
    again = iclinf(lm, pool, tests, LABELS, n_shots=3, m=5, seed=7, use_trie=False)
    assert [q.exemplar_indices for q in again.queries] == [q.exemplar_indices for q in res.queries]
    calls = lm.calls
    batched = iclinf(lm, pool, tests, LABELS, n_shots=3, m=5, seed=7, use_trie=False, queries_per_call=5)
    assert lm.calls == calls + 1  # the five families in one model call, same numbers
    assert [q.per_position for q in batched.queries] == [q.per_position for q in res.queries]


def test_leave_one_out_losses_shapes_and_zero_probability():
    full = np.array([math.log(0.5), math.log(0.5), -np.inf])
    loo = np.array([[math.log(0.5), math.log(0.5), -np.inf], [math.log(0.25), math.log(0.75), -np.inf]])
    assert leave_one_out_losses(full, loo).tolist() == pytest.approx([0.0, math.log(2)])
    with pytest.raises(ValueError):
        leave_one_out_losses(full, loo[:, :2])
    assert summarize(np.array([1.0])) == (1.0, 0.0)


def test_trie_counts():
    assert trie_counts([[1, 2, 3], [1, 2, 4], [1, 5]]) == 5
    assert trie_counts([[1, 2, 3], [1, 2, 3]]) == 3
    assert trie_counts([[1, 2, 3], [1, 2, 4]], below=2) == 2


# ---------------------------------------------------------------------------
# Renyi divergence (ICLInf Def. C.1, Eq. 5-6) against closed forms
# ---------------------------------------------------------------------------


def test_renyi_categorical_by_hand():
    p, q = np.log([0.5, 0.5]), np.log([0.25, 0.75])
    # D_2(P||Q) = log sum P^2/Q = log(0.25/0.25 + 0.25/0.75) = log(4/3); D_2(Q||P) = log(1/8 + 9/8) = log(5/4).
    assert renyi_divergence(p, q, 2) == pytest.approx(math.log(4 / 3), abs=1e-14)
    assert renyi_divergence(q, p, 2) == pytest.approx(math.log(5 / 4), abs=1e-14)
    assert renyi_symmetric(p, q, 2) == pytest.approx(math.log(4 / 3), abs=1e-14)
    # alpha = 3: 1/2 log(sum P^3 Q^-2) = 1/2 log(0.125/0.0625 + 0.125/0.5625) = 1/2 log(20/9).
    assert renyi_divergence(p, q, 3) == pytest.approx(0.5 * math.log(20 / 9), abs=1e-14)
    assert max_abs_log_ratio(p, q) == pytest.approx(math.log(2))  # the alpha -> infinity limit
    assert renyi_divergence(p, p, 5) == 0.0
    half, point = np.log([0.5, 0.5]), np.array([0.0, -np.inf])
    assert renyi_divergence(half, point, 2) == np.inf  # P has mass where Q has none
    assert renyi_divergence(point, half, 2) == pytest.approx(math.log(2))
    with pytest.raises(ValueError):
        renyi_divergence(p, q, 1.0)


@pytest.mark.parametrize(
    "m1,s1,m2,s2,alpha",
    [(0.0, 1.0, 1.0, 1.0, 2.0), (0.0, 1.0, 0.5, 1.0, 7.5), (0.3, 1.0, -0.2, 1.3, 3.0), (0.0, 1.0, 1.0, 1.5, 2.0)],
)
def test_renyi_two_gaussians_closed_form(m1, s1, m2, s2, alpha):
    # D_a(N(m1,s1^2) || N(m2,s2^2)) = ln(s2/s1) + ln(s2^2/s_a^2)/(2(a-1)) + a (m1-m2)^2/(2 s_a^2),
    # s_a^2 = a s2^2 + (1-a) s1^2 > 0 (Gil, Alajaji & Linder 2013); equal variances: a (m1-m2)^2 / (2 s^2).
    sa2 = alpha * s2**2 + (1 - alpha) * s1**2
    exact = math.log(s2 / s1) + math.log(s2**2 / sa2) / (2 * (alpha - 1)) + alpha * (m1 - m2) ** 2 / (2 * sa2)
    x = np.linspace(-30, 30, 600_001)
    dx = x[1] - x[0]

    def logpdf(m, s):
        lp = -0.5 * ((x - m) / s) ** 2 - math.log(s * math.sqrt(2 * math.pi)) + math.log(dx)
        return lp - np.log(np.exp(lp).sum())

    got = renyi_divergence(logpdf(m1, s1), logpdf(m2, s2), alpha)
    assert got == pytest.approx(exact, rel=1e-6, abs=1e-9)
    if s1 == s2:
        assert exact == pytest.approx(alpha * (m1 - m2) ** 2 / (2 * s1**2))


# ---------------------------------------------------------------------------
# Decoding audit: one step
# ---------------------------------------------------------------------------


def _brute_renyi(p, q, a):
    return math.log(sum(pi**a * qi ** (1 - a) for pi, qi in zip(p, q))) / (a - 1)


def test_step_distributions_match_algorithm_1_by_hand():
    c, tau = 1.0, 0.5
    z = np.array([[3.0, 1.0, -4.0], [0.0, 0.5, 0.2], [2.0, 2.0, 1.0]])
    clipped = np.maximum(-c, z - z.max(axis=1, keepdims=True) + c)  # Algorithm 1, clip_c
    assert clipped[0].tolist() == [1.0, -1.0, -1.0]

    def softmax(v):
        e = np.exp(v - v.max())
        return e / e.sum()

    log_p, log_q = step_distributions(z, c, tau, "zero-out")
    assert np.exp(log_p) == pytest.approx(softmax(clipped.mean(0) / tau))
    for p in range(3):
        rest = np.delete(clipped, p, axis=0)
        assert np.exp(log_q[p]) == pytest.approx(softmax(rest.sum(0) / 3 / tau))  # zero-out: divisor s
    _, log_q_rm = step_distributions(z, c, tau, "remove")
    for p in range(3):
        assert np.exp(log_q_rm[p]) == pytest.approx(softmax(np.delete(clipped, p, axis=0).mean(0) / tau))
    loss = step_loss(z, c, tau, 4.0, "zero-out")
    want = max(max(_brute_renyi(np.exp(log_p), np.exp(log_q[p]), 4.0), _brute_renyi(np.exp(log_q[p]), np.exp(log_p), 4.0))
               for p in range(3))
    assert loss.loss == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("neighbour", ["zero-out", "remove"])
def test_per_token_loss_never_exceeds_the_clip_softmax_bound(neighbour):
    # Thm C.6 vs C.3.1: for zero-out neighbours the add-remove bound (ICLInf's rho) holds for every pair;
    # for remove-and-renormalise neighbours the replace-one bound (4 rho) does (docs/iclinf.md).
    rng = np.random.default_rng(3)
    adj = "add-remove" if neighbour == "zero-out" else "replace-one"
    worst = 0.0
    for trial in range(300):
        s = int(rng.integers(2, 6))
        v = int(rng.integers(2, 8))
        c = float(rng.uniform(0.5, 5))
        tau = float(rng.uniform(0.2, 5))
        alpha = float(rng.choice([2.0, 3.0, 6.0, 20.0, 99.0]))
        z = rng.normal(size=(s, v)) * rng.uniform(0.1, 20)
        if trial % 3 == 0:  # adversarial: clipped rows at the corners (c, -c) / (-c, c)
            z = np.where(rng.random((s, v)) < 0.5, 100.0, -100.0)
        got = step_loss(z, c, tau, alpha, neighbour).loss
        bound = float(clip_softmax_rdp(np.array([alpha]), c, s, tau, 1, adj)[0])
        assert got <= bound * (1 + 1e-9) + 1e-12, (trial, got, bound)
        worst = max(worst, got / bound)
    assert worst > 0.5  # the bound is not vacuous on these inputs


def test_remove_neighbours_break_the_add_remove_bound():
    # The privacy engineer's finding, seen by the audit: s = 2, rows (c,-c) and (-c,c), tau = 1, c = 1.
    # Full batch: uniform. Without prompt 0 (divisor s-1 = 1): softmax(-1, 1).
    z = np.array([[10.0, -10.0], [-10.0, 10.0]])
    got = step_loss(z, 1.0, 1.0, 2.0, "remove").loss
    q = np.exp([-1, 1]) / np.exp([-1, 1]).sum()
    assert got == pytest.approx(max(_brute_renyi([0.5, 0.5], q, 2), _brute_renyi(q, [0.5, 0.5], 2)))
    add_remove = float(clip_softmax_rdp(np.array([2.0]), 1.0, 2, 1.0, 1, "add-remove")[0])
    replace_one = float(clip_softmax_rdp(np.array([2.0]), 1.0, 2, 1.0, 1, "replace-one")[0])
    assert add_remove == pytest.approx(0.25) and replace_one == pytest.approx(1.0)
    assert add_remove < got <= replace_one


# ---------------------------------------------------------------------------
# Decoding audit: composition and conversion on a fake decoder
# ---------------------------------------------------------------------------


def test_theory_matches_the_calibration_in_docs():
    # docs/privacy.md: c = 10, s = 50, 2000 compositions, target 4, delta 1e-5, orders 2-99 -> tau 10.3554, alpha 6.
    th = theoretical(clip=10, batch_size=50, compositions=2000, delta=1e-5, target_epsilon=4)
    assert th.temperature == pytest.approx(10.3554030455, rel=1e-8) and th.alpha == 6.0
    assert th.epsilon <= 4.0 and th.epsilon == pytest.approx(4.0, rel=1e-8)
    # Thm C.8 at alpha*: eps = rdp + log((a-1)/a) - (log delta + log a)/(a-1).
    a = th.alpha
    assert th.epsilon == pytest.approx(th.rdp_at_alpha + math.log((a - 1) / a) - (math.log(1e-5) + math.log(a)) / (a - 1))


@pytest.mark.parametrize("neighbour", ["zero-out", "remove"])
def test_audit_sums_per_token_losses_and_stays_below_theory(neighbour):
    lm = RandomDecodeLM(vocab=10, scale=8.0, seed=1)
    batches = [["p"] * 4, ["q"] * 4, ["r"] * 4]
    for target in (0.5, 2.0, 8.0):
        res = audit_decoding(lm, batches, clip=2.0, delta=1e-5, max_tokens=5, target_epsilon=target,
                             neighbour=neighbour, rng=np.random.default_rng(0))
        assert res.tokens == 15 and len(res.per_token) == 15
        # Recompute each token's loss from the fake's logits (steps t = 0..4 of each sequence).
        want = [step_loss(lm.logits_at(t, 4), 2.0, res.temperature, res.alpha, neighbour).loss
                for _ in batches for t in range(5)]
        assert res.per_token == pytest.approx(want, rel=1e-12)
        assert res.rdp_empirical == pytest.approx(sum(want))
        a = res.alpha
        raw = res.rdp_empirical + math.log((a - 1) / a) - (math.log(1e-5) + math.log(a)) / (a - 1)
        assert res.epsilon_empirical == pytest.approx(max(raw, 0.0))
        assert res.epsilon_theoretical <= target * (1 + 1e-12)
        assert res.epsilon_empirical <= res.epsilon_theoretical  # the correctly calibrated mechanism
        assert res.rdp_empirical <= res.rdp_theoretical
        assert res.epsilon_empirical_x2 == 2 * res.epsilon_empirical
        assert res.to_dict()["ratio"] == pytest.approx(res.epsilon_empirical / res.epsilon_theoretical)
    assert empirical_epsilon(0.0, 6.0, 1e-5) == 0.0


def test_generation_batches_one_label_distinct_exemplars():
    ex = [(f"text {i}", "a" if i % 3 else "b") for i in range(30)]
    batches, idx, label = generation_batches(ex, batch_size=5, sequences=3, label=None,
                                             template=GENERATION_TEMPLATES["iclinf-agnews"],
                                             rng=np.random.default_rng(0))
    assert label == "a" and len(batches) == 3 and all(len(b) == 5 for b in batches)
    assert all(len(set(i)) == 5 and all(ex[j][1] == "a" for j in i) for i in idx)
    assert batches[0][0].startswith("Given a label of news type, generate the chosen type of news accordingly.\n\n"
                                     "News Type: a\nText: text ")
    assert batches[0][0].endswith("\n\nNews Type: a\nText:")
    with pytest.raises(ValueError):
        generation_batches(ex, batch_size=11, sequences=1, label="b", template=GENERATION_TEMPLATES["iclinf-agnews"],
                           rng=np.random.default_rng(0))
