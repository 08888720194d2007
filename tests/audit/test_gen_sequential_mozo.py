"""White-box sequential audits of ``mozo`` (issue 28): its step, a Gumbel-argmax over the mean mixed
log-probability (1/E) sum_i log p~_i at its temperature tau, read through ``app.mechanisms.step_trace``
by ``app.audit.gen_noise`` as clip_softmax's and poe's are (``test_gen_sequential_tokens.py``).

The recorded law is mozo's own, exactly (softmax(statistic / tau) over the candidates = exp of
``mozo.step_log_probs``; padding experts, per-expert lam, subsampling, a non-default temperature),
and the claim the evidence uses (``GenerationDesign.scale``) is the temperature mozo samples at.
Simulations with mozo's own chooser (``TokenWhiteBoxTarget`` with ``config``; fixed seeds; a rate is
allowed up to its level + 3 binomial sd of its run count, one-sided): no false violation beyond the
level; noise x 1/10 and no_noise as the target never pass beyond the level and are found white-box
in fewer trials than black-box. The trace is invisible outside the audit. The real mechanism with a
scripted decoding model: correct passes, a colder temperature and greedy decoding are white-box
violations, and mozo run at 25x its epsilon (same tau, larger lam) is NOT seen white-box: the
evidence tests the sampling temperature, never lam or the mixing.
"""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from functools import partial
from unittest import mock

import numpy as np
import pytest
from scipy.special import log_softmax

from app.audit.gen_noise import TOKEN, compact_step, white_box_evidence, white_box_gap
from app.audit.gen_noise_tokens import TokenWhiteBoxTarget
from app.audit.gen_power import configured, generation_design
from app.audit.gen_sequential import run_gen_sequential
from app.mechanisms import mozo, step_trace
from tests.audit.test_gen_power import EX, TEMPLATE, SignalEmbedder
from tests.audit.test_gen_sequential import ALPHA, ATTACK, MISS, REQUIRED, _limit, fresh_audits
from tests.audit.test_gen_sequential import verdict_counts as _counts
from tests.audit.test_gen_sequential_tokens import SignalDecodeLM, _served


def _params(eps: float = 1.0, **own):
    return {"epsilon": eps, "delta": 1e-5, "experts": 1, "group_size": 8, **own}


def _sim(eps: float = 1.0, tokens: int = 1, **own):
    p = _params(eps, **own)
    d = generation_design("mozo", p, len(EX), max_tokens=tokens, white_box=False, distance=None)
    return d, configured("mozo", p, len(EX), max_tokens=tokens)


_audits = partial(fresh_audits, eps=1.0)


@pytest.mark.parametrize("own,n", [({}, 8),
                                   ({"temperature": 0.7, "lambda_mode": "public", "public_top_k": 0}, 8),
                                   ({"experts": 4, "group_size": 1, "temperature": 1.3}, 4),
                                   ({"experts": 3, "group_size": 1, "subsample": True, "uniform_mix": 0.3}, 8)])
def test_the_recorded_law_is_mozos_own_at_its_temperature(own, n):
    """Every step of mozo's own chooser (random one-shot and zero-shot logits, 12 tokens): the recorded
    statistic over the candidates at the recorded temperature is exactly the law mozo draws from
    (softmax(statistic / tau) = exp(step_log_probs), float tolerance), the recorded temperature is the
    configured tau, which is the design's scale, so the claimed law of the evidence (statistic / scale)
    is mozo's. Cases: the default (tau 0.25, per-expert lam, top-10); tau 0.7 with public lam over the
    whole vocabulary; 4 one-shot experts, tau 1.3, and the same with E = 6 in the weight (two padded
    zero-shot experts, as a smaller dataset than ``experts`` gives); subsampling 3 of 8 with mu 0.3. The
    trace draws no randomness: the same seed releases the same tokens untraced."""
    p = _params(2.0, **{"experts": 1, "group_size": n, **own})
    cfg = configured("mozo", p, n, max_tokens=4)
    d = generation_design("mozo", p, n, max_tokens=4, white_box=False, distance=None)
    assert cfg.temperature == d.scale == own.get("temperature", mozo.DEFAULT_TEMPERATURE)
    ev = white_box_evidence(d, ("noise_tenth", "no_noise"), 2.0, 1e-5)
    assert ev is not None and ev.kind == "gumbel" and ev.scale == cfg.temperature
    if n == 4:  # the padding path: E = 6 in the product weight, 4 experts built
        cfg = replace(cfg, weight_experts=6)
    g = np.random.default_rng(7)
    rows = cfg.population or cfg.experts
    draws = [(g.normal(0.0, 3.0, (rows, 12)), g.normal(0.0, 3.0, 12)) for _ in range(20)]
    with step_trace.collect() as steps:
        choose = mozo.chooser(cfg, np.random.default_rng(1), (11,))
        infos = [choose(z, pub)[1] for z, pub in draws]
    plain = mozo.chooser(cfg, np.random.default_rng(1), (11,))
    assert [plain(z, pub)[0] for z, pub in draws] == [i["token"] for i in infos]
    assert len(steps) == len(draws)
    for st, info, (z, pub) in zip(steps, infos, draws):
        rows_used = z[info["subset"]] if "subset" in info else z
        cand, lq, _, _ = mozo.step_law(cfg, rows_used, pub, (11,))
        assert st.temperature == cfg.temperature and st.token == info["token"]
        assert list(np.flatnonzero(np.isfinite(st.statistic))) == list(cand)
        vals, pos = compact_step(st.statistic, st.token)
        np.testing.assert_allclose(np.exp(log_softmax(vals / st.temperature)), np.exp(lq), rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(log_softmax(vals / ev.scale), lq, rtol=1e-11, atol=1e-11)
        assert log_softmax(vals / ev.scale)[pos] == pytest.approx(info["log_prob"], abs=1e-11)


def test_mozo_is_white_box_in_process_and_black_box_remote():
    """mozo joins the token mechanisms read through the step trace; a gateway's mozo stays black-box."""
    from app.audit.gen_noise import REMOTE_TOKEN_GAP

    assert "mozo" in TOKEN and white_box_gap("mozo") is None
    assert white_box_gap("mozo", remote=True) == REMOTE_TOKEN_GAP


@pytest.mark.parametrize("alt,tie,draws", [("claimed", "positive", 500), ("noise_half", "positive", 500),
                                           ("no_noise", "other", 20)])
def test_the_simulation_releases_y1_with_gen_powers_law(alt, tie, draws):
    """mozo's own chooser on the design model's decisive token (tau 0.6, three experts of 2 shots, so
    the canary is read with probability 6/8; two of 4 for no_noise: a clean tie, broken against the
    canary) releases y1 with gen_power's closed form: within 4 binomial sd of ``draws`` per hypothesis
    (no_noise: always the law's 0 or 1)."""
    d, cfg = _sim(1.0, experts=2 if alt == "no_noise" else 3, group_size=4 if alt == "no_noise" else 2,
                  temperature=0.6)
    c1 = [*EX[1:], ATTACK.canary.exemplar()]
    t = TokenWhiteBoxTarget(d, alt, tie, config=cfg)
    rng = np.random.default_rng(5)
    for ctx, p in ((c1, t.law[0]), (EX, t.law[1])):
        got = sum(t.observe(ctx, ATTACK, rng).label == ATTACK.labels[0] for _ in range(draws)) / draws
        assert abs(got - p) <= 4.0 * np.sqrt(max(p * (1 - p), 1e-4) / draws), (alt, got, p)


def test_correct_white_box_mozo_false_violations_within_level():
    """120 audits of a correct mozo seen white-box (one decisive token, claim 1, cap 150): false
    violations <= alpha + 3 sd of 120; most pass (non_private is rejected black-box only, so a pass
    waits for the design-model check's pairs), with the white-box half reading every answer. (A
    sanity check sized for the file's runtime: the evidence is a test martingale because the law it
    reads is exactly the one mozo samples from, which the first test checks; the e-process machinery
    has 1000-audit checks in ``test_gen_sequential_tokens.py``.)"""
    d, cfg = _sim()
    res = _audits(lambda: TokenWhiteBoxTarget(d, config=cfg), d, 120, cap=150)
    c = _counts(res)
    assert c.get("violation", 0) / 120 <= _limit(ALPHA, 120), c
    assert c.get("pass", 0) / 120 > 0.8, c
    r = next(r for r in res if r.verdict == "pass")
    assert "white-box" in r.decided_by and r.white_box["answers_read"] == r.trials
    assert r.white_box["temperature"] == cfg.temperature
    assert set(r.white_box["e_alternatives"]) == {"noise_tenth", "no_noise"}  # non_private: black-box only


@pytest.mark.parametrize("alt,tie", [("noise_tenth", "positive"), ("no_noise", "positive"), ("no_noise", "other")])
def test_noise_tenth_and_no_noise_are_found_white_box_sooner_than_black_box(alt, tie):
    """tau 0.7 (not the default), two experts of 4 shots (a clean tie for greedy decoding), claim 1,
    2 tokens (one more private step over 20 candidates, top-10), the target IS the alternative: 60
    audits white-box (cap 120): no pass (<= 1 - min_detection + 3 sd of 60), >= 95% violations, all decided
    white-box; on the first 12 seeds in fewer trials than black-box (cap 60) on every seed (black-box,
    noise x 1/10 at two experts and greedy decoding that breaks the tie against the canary never
    decide within the cap; the tie broken for the canary is found in 14)."""
    d, cfg = _sim(1.0, tokens=2, experts=2, group_size=4, temperature=0.7)
    assert d.scale == 0.7

    def make():
        return TokenWhiteBoxTarget(d, alt, tie, extra_steps=1, config=cfg)
    wb = _audits(make, d, 60, cap=120)
    bb = _audits(make, d, 12, cap=60, white_box=False)
    c = _counts(wb)
    assert c.get("pass", 0) / 60 <= _limit(MISS, 60) and c.get("violation", 0) / 60 >= 0.95, c
    assert {r.decided_by for r in wb if r.verdict == "violation"} == {"white-box"}
    assert all(w.trials < b.trials for w, b in zip(wb, bb)), ([w.trials for w in wb[:12]], [b.trials for b in bb])
    assert np.mean([r.trials for r in wb]) <= (4 if alt == "no_noise" else 12), np.mean([r.trials for r in wb])


# -- the real mechanism ------------------------------------------------------------------------------

def _target(eps: float, cls=None, **extra):
    from app.audit.gen_targets import GenerationMechanismTarget

    return (cls or GenerationMechanismTarget)(SignalDecodeLM(), SignalEmbedder(), "mozo", {
        **_params(eps), "public_top_k": 2, **extra}, TEMPLATE, max_tokens=4)


def test_the_trace_is_invisible_outside_the_audit():
    """A traced and an untraced mozo call with the same seed serve the same result (nothing of the
    statistic in the internals); a mozo call in another thread while this one collects records
    nothing into it; the audit target collects only while an audit turns tracing on."""
    from app.mechanisms.generation import generate

    t = _target(2.0, temperature=0.5)
    req = t.request(EX, ATTACK)
    plain = generate("mozo", req, t.lm, None, np.random.default_rng(3))
    with step_trace.collect() as steps:
        traced = generate("mozo", req, t.lm, None, np.random.default_rng(3))
        other: list[object] = []
        th = threading.Thread(target=lambda: other.append(generate("mozo", req, t.lm, None,
                                                                   np.random.default_rng(4))))
        th.start()
        th.join()
    assert _served(plain) == _served(traced) and len(other) == 1
    assert not any("statistic" in json.dumps(s) for s in traced.internals["steps"])
    assert len(steps) == len(traced.internals["steps"]) == 4  # the other thread's 4 steps are not there
    for st, info in zip(steps, traced.internals["steps"]):
        assert st.token == info["token"] and st.temperature == 0.5
        vals, pos = compact_step(st.statistic, st.token)
        assert log_softmax(vals / st.temperature)[pos] == pytest.approx(info["log_prob"], abs=1e-9)
    assert not step_trace.active()
    assert t.observe(EX, ATTACK, np.random.default_rng(0)).token_steps is None
    t.trace_token_steps(True)
    assert len(t.observe(EX, ATTACK, np.random.default_rng(0)).token_steps) == 4


def test_real_mozo_white_box():
    """The real mozo (its calibration, candidates, mixing, product and Gumbel-argmax) with a scripted
    decoding model, one expert of 8 shots, public top-2, 4 tokens, claim epsilon 2: correct, it passes
    with the white-box half; at temperature x 1/10 with the claim's lam (eps_tok x 10: gen_power's
    noise_tenth) and with greedy decoding it is a white-box violation within a few answers. Run at
    epsilon 50 while claiming 2 (the same tau, lam near 1: a far larger privacy loss) the noise
    evidence stays below 1/alpha: the white-box half tests the sampling temperature, not lam; the
    black-box half finds the violation."""
    from app.audit.gen_targets import GenerationMechanismTarget
    from app.audit.gen_sequential import DesignModelCheck

    class Colder(GenerationMechanismTarget):
        """BUG: samples at tau / 10 with the claim's lam."""

        def _run(self, context, attack, rng):
            real = mozo.configure

            def cold(req):
                cfg = real(req)
                return replace(cfg, temperature=cfg.temperature / 10, epsilon_per_token=cfg.epsilon_per_token * 10)
            with mock.patch("app.mechanisms.mozo.configure", cold):
                return super()._run(context, attack, rng)

    class Greedy(GenerationMechanismTarget):
        """BUG: decodes greedily (the Gumbel draw dropped)."""

        def _run(self, context, attack, rng):
            with mock.patch("app.mechanisms.mozo.gumbel_argmax", lambda a, r, size=None: int(np.argmax(a))):
                return super()._run(context, attack, rng)

    d = generation_design("mozo", {**_params(2.0), "public_top_k": 2}, len(EX), max_tokens=4, white_box=False,
                          distance=None)
    check = DesignModelCheck(d).pairs_needed(ALPHA)
    cases = ((_target(2.0), "pass", "white-box", 2 * check + 20), (_target(2.0, Colder), "violation", "white-box", 12),
             (_target(2.0, Greedy), "violation", "white-box", 6),
             (_target(50.0), "violation", "black-box", 60))
    for target, want, by, most in cases:
        r = run_gen_sequential(target, EX, ATTACK, claimed_epsilon=2.0, delta=1e-5, design=d, alternatives=REQUIRED,
                               alpha=ALPHA, cap=200, rng=np.random.default_rng(28), white_box=True)
        assert r.verdict == want and by in r.decided_by and r.trials <= most, (target.name, r.reason)
        assert r.white_box["answers_read"] == r.trials and not target.tracing
    assert r.decided_by == "black-box" and r.white_box["e_violation"] < 1.0 / ALPHA
