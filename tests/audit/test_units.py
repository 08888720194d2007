"""Canaries, insertion, query resolution, noise bugs, threshold split, estimates (no model)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from app.audit import (
    FALSE_FACTS,
    QUERY_STRATEGIES,
    CampaignConfig,
    Canary,
    VotingNoise,
    estimates_from_counts,
    make_canary,
    plan_trials,
    replace_one,
    resolve_query,
    select_threshold,
)
from app.audit.estimates import bound_curves, split_selection
from app.privacy import epsilon_lower_bound

EX = [(f"message number {i}", ["billing", "shipping", "refund"][i % 3]) for i in range(9)]
LABELS = ["billing", "shipping", "refund"]


class WordTokenizer:
    """Whitespace 'tokenizer' with ids, enough to check rarity and decoding."""

    def __init__(self):
        self.vocab: dict[str, int] = {}
        self.words: list[str] = []

    def tokenize(self, text):
        out = []
        for w in text.split():
            if w not in self.vocab:
                self.vocab[w] = len(self.words)
                self.words.append(w)
            out.append(self.vocab[w])
        return out

    def detokenize(self, ids):
        return " ".join(self.words[i] for i in ids)


def test_canaries():
    rng = np.random.default_rng(0)
    h = make_canary("hex", rng, label="refund")
    assert h.kind == "hex" and len(h.text) == 16 and int(h.text, 16) >= 0 and h.exemplar() == (h.text, "refund")
    assert make_canary("hex", np.random.default_rng(0), label="refund") == h  # seeded
    assert make_canary("false_fact", rng, label="billing").text in FALSE_FACTS
    texts = ["the cat sat", "the cat ran", "the dog sat zebra"]
    u = make_canary("unigram", rng, label="billing", dataset_texts=texts, tokenizer=WordTokenizer(), n_tokens=3)
    # count-1 words only are sampled first: ran, dog, zebra (pool of the rarest)
    assert set(u.text.split()) <= {"ran", "dog", "zebra", "sat", "cat", "the"} and len(u.text.split()) == 3
    tok = WordTokenizer()
    from app.audit.canaries import rare_tokens
    assert [tok.detokenize([t]) for t in rare_tokens(tok, texts, 3)] == ["ran", "dog", "zebra"]
    held = make_canary("heldout", rng, heldout=[("a held-out message", "shipping")])
    assert held == Canary("heldout", "a held-out message", "shipping")
    with pytest.raises(ValueError):
        make_canary("hex", rng)  # no label
    with pytest.raises(ValueError):
        make_canary("nope", rng, label="x")


def test_replace_one_and_plans():
    c = ("CANARY", "refund")
    out = replace_one(EX, c, 4)
    assert out[4] == c and out[:4] == EX[:4] and out[5:] == EX[5:] and len(out) == len(EX)
    rng = np.random.default_rng(3)
    p = plan_trials(EX, c, 2000, "contextleak", rng)
    # coin flips: #members ~ Binomial(2000, 1/2); 4.4 sd covers 1e-5 two-sided
    assert abs(p.members.sum() - 1000) <= 4.4 * math.sqrt(2000 * 0.25)
    for m, ctx in zip(p.members, p.contexts):
        assert (c in ctx) == bool(m) and len(ctx) == len(EX)
    # the replaced index is uniform: every position replaced sometimes
    pos = {next(i for i, e in enumerate(ctx) if e == c) for m, ctx in zip(p.members, p.contexts) if m}
    assert pos == set(range(len(EX)))
    q = plan_trials(EX, c, 101, "paired", rng)
    assert len(q) == 100 and q.members.sum() == 50
    c1 = [ctx for m, ctx in zip(q.members, q.contexts) if m]
    assert all(x == c1[0] for x in c1) and all(ctx == EX for m, ctx in zip(q.members, q.contexts) if not m)
    with pytest.raises(ValueError):
        plan_trials(EX, EX[0], 10, "paired", rng)  # the canary is already there


def test_query_resolution():
    can = Canary("hex", "deadbeefdeadbeef", "refund")
    a = resolve_query("inquiry", can, LABELS, EX)
    assert a.labels == ("billing", "shipping", "refund", "Yes", "No") and a.positive == "Yes" and a.negative == "No"
    assert "deadbeefdeadbeef" in a.query and a.instruction
    b = resolve_query("if_then_explicit", can, LABELS, EX + [("x", "billing")])
    assert b.positive == "refund" and b.negative == "billing"  # @other = most frequent other label
    assert b.query.count("deadbeefdeadbeef") == 2 and "label refund" in b.query
    assert resolve_query("if_then_not_explicit", can, LABELS, EX).query.count("deadbeef") == 0
    io = resolve_query("input_output", can, LABELS, EX)
    assert io.query == can.text and io.negative is None and io.labels == tuple(LABELS)
    tmpl = {"input_prefix": "Message: ", "output_prefix": "Intent:"}
    bw = resolve_query("brainwash", can, LABELS, EX, tmpl)
    full = "Message: " + bw.query
    assert full.count(f"Message: {can.text}\nIntent: {bw.negative}") == 6 and full.endswith(f"Message: {can.text}")
    assert bw.positive == "refund"
    custom = resolve_query({"name": "mine", "query": "Seen {canary}?", "positive": "Aye", "negative": "Nay"}, can,
                           LABELS, EX)
    assert custom.labels[-2:] == ("Aye", "Nay") and custom.query == "Seen deadbeefdeadbeef?"
    assert set(QUERY_STRATEGIES) >= {"inquiry", "input_output", "if_then_explicit", "if_then_not_explicit", "gap",
                                     "brainwash"}


def test_noise_bugs():
    nz = VotingNoise("gaussian", 2.0, 1.0, 1e-5)
    rng = np.random.default_rng(0)
    v = np.tile([1.0, 3.0, 0.0], (20000, 1))
    z = nz.sample(v, rng) - v
    # sample sd within 5 standard errors of sigma (se of sd ~ sigma / sqrt(2n))
    assert np.all(np.abs(z.std(axis=0) - 2.0) < 5 * 2.0 / math.sqrt(40000))
    q = nz.with_bug("noise_quarter").sample(v, rng) - v
    assert np.all(np.abs(q.std(axis=0) - 0.5) < 5 * 0.5 / math.sqrt(40000))
    w = nz.with_bug("winner_only").sample(v, rng) - v
    assert np.all(w[:, [0, 2]] == 0) and w[:, 1].std() > 1.9
    assert not nz.is_broken and nz.with_bug({"noise_multiplier": 0.5}).applied_scale == 1.0
    with pytest.raises(ValueError):
        nz.with_bug("sloppy")


def test_threshold_selection_and_split():
    rng = np.random.default_rng(1)
    a, b = rng.normal(2, 1, 4000), rng.normal(0, 1, 4000)
    tau = select_threshold(a, b, confidence=0.95, delta=0.0)
    tp, fp = int((a > tau).sum()), int((b > tau).sum())
    # the chosen tau maximises the vectorised bound, which equals app.privacy's at that tau
    eps_vec, _ = bound_curves(np.array([tp]), a.size, np.array([fp]), b.size, 0.95, 0.0)
    assert eps_vec[0] == pytest.approx(epsilon_lower_bound(tp, a.size - tp, fp, b.size - fp, 0.95, 0.0).epsilon,
                                       rel=1e-9)
    for t in np.quantile(np.concatenate([a, b]), [0.1, 0.3, 0.5, 0.7]):
        e, _ = bound_curves(np.array([(a > t).sum()]), a.size, np.array([(b > t).sum()]), b.size, 0.95, 0.0)
        assert e[0] <= eps_vec[0] + 1e-12
    m = np.array([True] * 3 + [False] * 7)
    sel = split_selection(10, 0.2, m)
    assert sel[:4].all() and not sel[4:].any()  # grown from 2 until both hypotheses are in it


def test_estimates_side_by_side():
    e = estimates_from_counts(900, 100, 100, 900, threat_model="black-box", confidence=0.95, delta=0.0,
                              epsilon_theory=4.0, gdp_applicable=False)
    assert e.epsilon_lower == pytest.approx(1.98971, abs=1e-4)  # PRIOR_ART reference value
    assert e.accuracy == 0.9 and e.accuracy_epsilon == pytest.approx(math.log(9))
    assert e.ratio_lower_to_theory == pytest.approx(e.epsilon_lower / 4.0)
    assert e.gdp_mu_lower > 0 and any("NOT a bound" in s for s in e.assumptions)


def test_rigorous_bound_validity_on_exact_randomized_response():
    """The bound of a tight mechanism (eps-randomized response, guess = output: TPR/FPR = e^eps exactly)
    exceeds eps in at most 1 - confidence of runs. 400 runs; the exceedance count is at most
    Binomial(400, 0.05): 33 is beyond its 99.9th percentile."""
    eps, n, runs = 1.0, 2000, 400
    p = math.exp(eps) / (1 + math.exp(eps))
    rng = np.random.default_rng(7)
    tp = rng.binomial(n, p, runs)
    fp = rng.binomial(n, 1 - p, runs)
    over = sum(estimates_from_counts(int(a), n - int(a), int(b), n - int(b), threat_model="black-box",
                                     confidence=0.95, delta=0.0, epsilon_theory=eps,
                                     gdp_applicable=False).epsilon_lower > eps for a, b in zip(tp, fp))
    assert over <= stats.binom.ppf(0.999, runs, 0.05)
    # and it is a tight mechanism: the bound gets close (median within 25% of eps at n = 2000)
    med = np.median([epsilon_lower_bound(int(a), n - int(a), int(b), n - int(b), 0.95).epsilon
                     for a, b in zip(tp[:50], fp[:50])])
    assert 0.75 * eps < med <= eps


def test_campaign_config_validation():
    with pytest.raises(ValueError):
        CampaignConfig(mode="magic")
    with pytest.raises(ValueError):
        CampaignConfig(threat_models=("grey-box",))
    with pytest.raises(ValueError):
        CampaignConfig(statistic="median")


def test_positive_statistic_on_gumbel_noise_is_flagged():
    """One Gumbel-noised score is not covered by the claim (only the argmax is): the result says so."""
    from app.audit import CampaignConfig, SimulatedVotingTarget, VotingNoise, make_canary, run_campaign

    noise = VotingNoise("gumbel", 1.0, 1.0, 0.0)
    target = SimulatedVotingTarget([1, 3, 0, 0], [0, 4, 0, 0], noise)
    canary = make_canary("hex", np.random.default_rng(0), label="a")
    ex = [(f"text {i}", "b") for i in range(4)]
    kw = dict(task_labels=["a", "b"], rng=np.random.default_rng(1))
    flagged = run_campaign(target, ex, canary, "inquiry", config=CampaignConfig(trials=40, statistic="positive"), **kw)
    assert any("Gumbel" in n for n in flagged.notes)
    plain = run_campaign(target, ex, canary, "inquiry", config=CampaignConfig(trials=40), **kw)
    assert not any("Gumbel" in n for n in plain.notes)
