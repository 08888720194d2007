"""White-box sequential audits of the token mechanisms (issue 28): ``clip_softmax`` and ``poe`` read
through ``app.mechanisms.step_trace`` by ``app.audit.gen_noise``.

Type-I error by simulation with the mechanisms' own step code (``TokenWhiteBoxTarget``: fixed seeds;
a rate is allowed up to its level + 3 binomial standard deviations of 1000 runs, one-sided): false
violations of a correct target, false passes of each required alternative as the target (no_noise
with both tie-breaks), and those alternatives found within a few trials; the simulation releases y1
with gen_power's law; the step arithmetic; the collector is unset outside an audit and changes no
result; the real mechanisms (``GenerationMechanismTarget`` with a scripted decoding model) pass when
correct and are caught when their temperature is below the claim or they decode greedily.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.special import log_softmax

from app.audit.eprocess import INF_LOG
from app.audit.gen_noise import OUTSIDE, REMOTE_TOKEN_GAP, compact_step, observe_token, white_box_evidence
from app.audit.gen_noise_tokens import TokenWhiteBoxTarget
from app.audit.gen_power import GEN_ALTERNATIVES, generation_design
from app.audit.gen_sequential import DesignModelCheck, run_gen_sequential
from app.mechanisms import step_trace
from tests.audit.test_gen_power import CANARY, EX, TEMPLATE, Y0, Y1, SignalEmbedder
from tests.audit.test_gen_sequential import ALPHA, ATTACK, MISS, REQUIRED, RUNS, _limit
from tests.audit.test_gen_sequential import verdict_counts as _counts

UNIT = {"clip_softmax": ("prompts", "shots_per_prompt"), "poe": ("experts", "group_size")}


def _design(mech: str, units: int = 1, tokens: int = 1, eps: float = 1.0):
    k, shots = UNIT[mech]
    return generation_design(mech, {"epsilon": eps, "delta": 1e-5, k: units, shots: 8 // units}, len(EX),
                             max_tokens=tokens, white_box=False, distance=None)


def _audits(target, design, *, cap: int = 400, runs: int = RUNS, alternatives=REQUIRED, white_box: bool = True):
    return [run_gen_sequential(target, EX, ATTACK, claimed_epsilon=1.0, delta=1e-5, design=design,
                               alternatives=alternatives, alpha=ALPHA, cap=cap, rng=np.random.default_rng(seed),
                               white_box=white_box) for seed in range(runs)]


@pytest.mark.parametrize("mech,tokens", [("clip_softmax", 1), ("poe", 1), ("clip_softmax", 4)])
def test_correct_white_box_token_target_false_violations_within_level(mech, tokens):
    """1000 audits of a correct mechanism seen white-box (one decisive token; and 4 tokens: 3 more
    steps over 20 candidates), the claim's temperature: false violations <= alpha + 3 sd, and it
    passes (every required alternative rejected)."""
    d = _design(mech, tokens=tokens)
    res = _audits(TokenWhiteBoxTarget(d, extra_steps=tokens - 1), d)
    c = _counts(res)
    assert c.get("violation", 0) / RUNS <= _limit(ALPHA), c
    assert c.get("pass", 0) / RUNS > 0.9, c
    r = next(r for r in res if r.verdict == "pass")
    assert "white-box" in r.decided_by and r.white_box["answers_read"] == r.trials
    assert r.white_box["noise"] == "gumbel" and r.white_box["temperature"] == pytest.approx(d.scale)
    assert set(r.white_box["e_alternatives"]) == {"noise_tenth", "no_noise"}  # non_private: black-box only


def _cases():
    for mech, units in (("clip_softmax", 1), ("clip_softmax", 2), ("poe", 2)):
        for alt in ("noise_tenth", "no_noise"):
            if units == 2 and alt == "noise_tenth" and mech == "clip_softmax":
                continue  # the tie matters to no_noise only (poe covers two units at noise x 1/10)
            for tie in (("positive", "other") if GEN_ALTERNATIVES[alt] == 0.0 else ("positive",)):
                yield mech, units, alt, tie


@pytest.mark.parametrize("mech,units,alt,tie", list(_cases()))
def test_each_required_alternative_as_a_white_box_target_passes_at_most_the_pass_level(mech, units, alt, tie):
    """1000 audits of a target that IS the alternative (temperature x 1/10; greedy decoding, a clean
    tie -- two units -- broken for or against the canary) with 3 more steps over 20 candidates:
    false passes <= 1 - min_detection + 3 sd; violations >= 95 %, found by the white-box half within a few
    trials (greedy decoding that breaks the tie against the canary never moves the release: black-box
    it is never found)."""
    d = _design(mech, units, tokens=4)
    res = _audits(TokenWhiteBoxTarget(d, alt, tie, extra_steps=3), d)
    c = _counts(res)
    assert c.get("pass", 0) / RUNS <= _limit(MISS), c
    assert c.get("violation", 0) / RUNS >= 0.95, c
    found = [r.trials for r in res if r.verdict == "violation"]
    assert np.mean(found) <= (4 if alt == "no_noise" else 40), np.mean(found)
    assert {r.decided_by for r in res if r.verdict == "violation"} == {"white-box"}


def test_the_pass_level_follows_min_detection():
    """One power model: each required alternative is rejected at 1/(1 - min_detection). Here the pass
    does not wait for the design-model check (white-box clip_softmax, one decisive token, every
    required alternative covered by the step trace), so the alternatives' threshold is what decides.
    1000 audits of a target that IS noise_quarter (noise_quarter alone required), at min_detection
    0.9 and 0.95: false passes <= 1 - min_detection + 3 sd, every pass with its e-value >= 1/(1 -
    min_detection), the result's ``pass_level`` 1 - min_detection. The correct target (noise_tenth and
    no_noise required), the same 200 seeds at 0.9 and 0.99: on the same draws 0.9 stops no later than 0.99
    and earlier on some, so more trials on average at 0.99 (white-box evidence grows in large steps here: 0.95's
    threshold 20 is crossed on the same trial as 0.9's 10 on every seed)."""
    d = _design("clip_softmax")
    for md in (0.9, 0.95):
        res = [run_gen_sequential(TokenWhiteBoxTarget(d, "noise_quarter"), EX, ATTACK, claimed_epsilon=1.0,
                                  delta=1e-5, design=d, alternatives=("noise_quarter",), alpha=ALPHA, cap=200,
                                  rng=np.random.default_rng(seed), white_box=True, min_detection=md)
               for seed in range(RUNS)]
        passes = [r for r in res if r.verdict == "pass"]
        assert len(passes) / RUNS <= _limit(1.0 - md), (md, len(passes))
        assert all(r.e_alternatives["noise_quarter"] >= 1.0 / (1.0 - md) for r in passes)
        assert all(r.pass_level == pytest.approx(1.0 - md) for r in res)
    by = {md: [run_gen_sequential(TokenWhiteBoxTarget(d), EX, ATTACK, claimed_epsilon=1.0, delta=1e-5, design=d,
                                  alternatives=("noise_tenth", "no_noise"), alpha=ALPHA, cap=400,
                                  rng=np.random.default_rng(seed), white_box=True, min_detection=md)
               for seed in range(200)] for md in (0.9, 0.99)}
    # same seeds, same draws: the lower threshold stops no later on any seed and earlier on some
    pairs = list(zip(by[0.9], by[0.99]))
    assert all(a.trials <= b.trials for a, b in pairs if a.verdict == b.verdict == "pass")
    assert any(a.trials < b.trials for a, b in pairs if a.verdict == b.verdict == "pass")
    assert np.mean([r.trials for r in by[0.99]]) > np.mean([r.trials for r in by[0.9]])
    for md, res in by.items():
        ok = [r for r in res if r.verdict == "pass"]
        assert len(ok) > 0.9 * len(res) and all(min(r.e_alternatives.values()) >= 1.0 / (1.0 - md) for r in ok)
        assert f"1/(1 - min_detection) = {1.0 / (1.0 - md):g}" in ok[0].reason


def test_a_target_colder_than_noise_tenth_does_not_pass():
    """Temperature x 1/20: the likelihood ratio of the claim over noise_tenth is a supermartingale for
    any colder softmax (monotone likelihood ratio in the score), so no pass; the mixture finds it."""
    d = _design("clip_softmax", tokens=4)
    res = _audits(TokenWhiteBoxTarget(d, 0.05, extra_steps=3), d)
    c = _counts(res)
    assert c.get("pass", 0) / RUNS <= _limit(MISS) and c.get("violation", 0) / RUNS >= 0.95, c


@pytest.mark.parametrize("mech,units,alt,tie", [("clip_softmax", 1, "claimed", "positive"),
                                                ("poe", 1, "noise_tenth", "positive"),
                                                ("clip_softmax", 2, "no_noise", "positive"),
                                                ("poe", 2, "no_noise", "other"), ("poe", 3, "noise_half", "positive")])
def test_the_simulation_releases_y1_with_gen_powers_law(mech, units, alt, tie):
    """The mechanisms' own statistic and Gumbel-argmax on the design model's logits release y1 with
    gen_power's closed form (4 binomial sd of 4000 draws each)."""
    d = _design(mech, units)
    t = TokenWhiteBoxTarget(d, alt, tie)
    rng = np.random.default_rng(5)
    c1 = [*EX[1:], ATTACK.canary.exemplar()]
    for ctx, p in ((c1, t.law[0]), (EX, t.law[1])):
        n = 4000
        got = sum(t.observe(ctx, ATTACK, rng).label == ATTACK.labels[0] for _ in range(n)) / n
        assert abs(got - p) <= 4.0 * math.sqrt(max(p * (1 - p), 1e-4) / n), (mech, alt, tie, got, p)


def test_observe_token_arithmetic():
    """Per step: log P_f(x) - log P_1(x) against the claim, log P_1(x) - log P_f(x) against noise x f,
    a non-argmax release is impossible under no_noise (an argmax, tied or not, leaves it), a token
    outside the candidates is impossible under the claim."""
    d = _design("clip_softmax")
    ev = white_box_evidence(d, ("noise_tenth", "no_noise", "non_private"), 1.0, 1e-5)
    assert ev is not None and not ev.covers("non_private") and ev.covers("no_noise")
    stat = np.array([-np.inf, 2.0, 1.0, 2.0, -np.inf])  # candidates 1, 2, 3 (a tie at the top)
    vals, pos = compact_step(stat, 2)
    assert list(vals) == [2.0, 1.0, 2.0] and pos == 1
    observe_token(ev, vals, pos)
    a = vals / d.scale
    base = log_softmax(a)[1]
    want = [log_softmax(a / f)[1] - base for f in (0.5, 0.25, 0.1)]
    assert ev.log_down == pytest.approx(want, abs=1e-12)
    assert ev.log_alt["noise_tenth"] == pytest.approx(base - log_softmax(a / 0.1)[1], abs=1e-12)
    assert ev.log_alt["no_noise"] == INF_LOG and not ev.impossible
    ev2 = white_box_evidence(d, ("no_noise",), 1.0, 1e-5)
    assert ev2 is not None
    for tok in (1, 3):  # either end of the tie: an argmax
        observe_token(ev2, *compact_step(stat, tok))
    assert ev2.log_alt["no_noise"] == 0.0
    observe_token(ev2, *compact_step(stat, 0))  # -inf: outside the candidate set
    assert compact_step(stat, 0)[1] == -1 and ev2.impossible == [OUTSIDE] and ev2.e_violation == math.exp(INF_LOG)
    assert compact_step(stat, 99)[1] == -1


# -- the real mechanisms -----------------------------------------------------------------------------

class SignalDecodeLM:
    """A scripted decoding model that follows the signal query (the design model): token 0 says y1,
    token 1 y0, tokens 2.. are filler (no text). At the first step a prompt whose exemplars hold the
    canary gives token 0 all its mass, one with exemplars but not the canary token 1, the zero-shot
    prompt both (so the public top-2 is {y1, y0}); later steps: fixed pseudo-random logits per step
    and prompt kind, the zero-shot row ranking two fillers first. No EOS."""

    name = "signal-decode-lm"
    eos_token_ids = frozenset()
    V = 8

    def _row(self, prompt: str, t: int) -> np.ndarray:
        shots = prompt.count("Dialogue:") - 1
        kind = 0 if not shots else (1 if f"Summary: {CANARY}" in prompt else 2)
        z = np.full(self.V, -30.0)
        if t == 0:
            z[:2] = [5.0, 5.0] if kind == 0 else ([0.0, -1e4] if kind == 1 else [-1e4, 0.0])
            return z
        g = np.random.default_rng([t, kind])
        z[2:] = g.normal(0.0, 2.0, self.V - 2) + (np.arange(self.V - 2) < 2) * (20.0 if kind == 0 else 0.0)
        return z

    def start_decode(self, prompts, *, reuse_prefix: bool = True):
        lm = self

        class Session:
            def __init__(self) -> None:
                self.t = 0
                self.logits = np.vstack([lm._row(p, 0) for p in prompts])

            def step(self, token: int) -> np.ndarray:
                self.t += 1
                self.logits = np.vstack([lm._row(p, self.t) for p in prompts])
                return self.logits

            def close(self) -> None:
                pass
        return Session()

    def tokenize(self, text: str) -> list[int]:
        return [2]

    def detokenize(self, ids, skip_special_tokens: bool = True) -> str:
        first = next((i for i in ids if i in (0, 1)), None)
        return "" if first is None else (Y1 if first == 0 else Y0)


def _target(mech: str, eps: float, cls=None, **extra):
    from app.audit.gen_targets import GenerationMechanismTarget

    k, shots = UNIT[mech]
    return (cls or GenerationMechanismTarget)(SignalDecodeLM(), SignalEmbedder(), mech, {
        "epsilon": eps, "delta": 1e-5, k: 1, shots: 8, "public_top_k": 2, **extra}, TEMPLATE, max_tokens=4)


def _served(res) -> str:
    """What the API serialises of a result (with internals), less the wall-clock timings."""
    d = res.to_dict()
    for k in ("prefill_seconds", "step_seconds"):
        d["internals"].pop(k, None)
    return json.dumps(d, sort_keys=True)


def test_the_collector_is_unset_outside_an_audit_and_changes_no_result():
    """No collector outside ``collect``: ``record`` keeps nothing. A traced call and an untraced one
    with the same seed release the same text with the same internals and privacy (nothing new in
    what the API serialises); inside ``collect`` every private step is there, its statistic over the
    candidates times 1/temperature being the step law the internals report (log_prob)."""
    from app.mechanisms.generation import generate

    assert not step_trace.active()
    step_trace.record(np.zeros(3), 1.0, 0)  # no collector: a no-op
    with step_trace.collect() as steps:
        assert step_trace.active()
        import threading

        seen: list[bool] = []
        th = threading.Thread(target=lambda: (seen.append(step_trace.active()), step_trace.record(np.zeros(2), 1.0, 0)))
        th.start()
        th.join()
        assert seen == [False]  # another thread (a request, another job) never sees the audit's collector
    assert steps == [] and not step_trace.active()
    for mech in ("clip_softmax", "poe"):
        t = _target(mech, 2.0)
        req = t.request(EX, ATTACK)
        plain = generate(mech, req, t.lm, None, np.random.default_rng(3))
        with step_trace.collect() as steps:
            traced = generate(mech, req, t.lm, None, np.random.default_rng(3))
        assert _served(plain) == _served(traced)
        assert not any("statistic" in json.dumps(s) for s in traced.internals["steps"])
        assert len(steps) == len(traced.internals["steps"]) == 4
        for st, info in zip(steps, traced.internals["steps"]):
            assert st.token == info["token"] and np.isfinite(st.statistic).sum() == 2
            lp = log_softmax(st.statistic[np.isfinite(st.statistic)] / st.temperature)
            assert lp[compact_step(st.statistic, st.token)[1]] == pytest.approx(info["log_prob"], abs=1e-9)
        assert not step_trace.active()
    # the audit target collects only while an audit turns tracing on, and never for esa
    tgt = _target("clip_softmax", 2.0)
    assert tgt.observe(EX, ATTACK, np.random.default_rng(0)).token_steps is None
    tgt.trace_token_steps(True)
    assert len(tgt.observe(EX, ATTACK, np.random.default_rng(0)).token_steps) == 4


@pytest.mark.parametrize("mech", ["clip_softmax", "poe"])
def test_real_token_mechanism_white_box(mech):
    """The real mechanism (its calibration, statistic, public candidates and Gumbel-argmax) with a
    scripted decoding model, claim epsilon 2, 4 tokens: correct, it passes on the white-box evidence;
    run at epsilon 50 (a far colder temperature) it is a white-box violation within a few answers;
    greedy decoding (a bug: argmax of the same scores) is one too; a target that offers no trace (as a
    remote gateway) is audited black-box with the note."""
    from app.audit.gen_targets import GenerationMechanismTarget

    class Greedy(GenerationMechanismTarget):
        """BUG: decodes greedily (the chooser's Gumbel draw replaced by zeros)."""

        def _run(self, context, attack, rng):
            from unittest import mock

            with mock.patch("app.mechanisms.clip_softmax.gumbel_argmax",
                            lambda a, r, size=None: int(np.argmax(a))):
                return super()._run(context, attack, rng)

    class Untraced(GenerationMechanismTarget):
        trace_token_steps = None  # type: ignore[assignment]

    claimed = _target(mech, 2.0)
    k, shots = UNIT[mech]
    d = generation_design(mech, {"epsilon": 2.0, "delta": 1e-5, k: 1, shots: 8, "public_top_k": 2}, len(EX),
                          max_tokens=4, white_box=False, distance=None)
    # the pass: non_private is rejected by the black-box half only, so it waits for the design-model check's
    # pairs (gen_sequential.DesignModelCheck.pairs_needed: 35 here)
    check = DesignModelCheck(d).pairs_needed(ALPHA)
    cases = ((claimed, "pass", max(40, 2 * check + 4)), (_target(mech, 50.0), "violation", 12),
             (_target(mech, 2.0, Greedy), "violation", 4))
    for target, want, most in cases:
        r = run_gen_sequential(target, EX, ATTACK, claimed_epsilon=2.0, delta=1e-5, design=d, alternatives=REQUIRED,
                               alpha=ALPHA, cap=400, rng=np.random.default_rng(28), white_box=True)
        assert r.verdict == want and "white-box" in r.decided_by and r.trials <= most, (target.name, r.reason)
        assert r.white_box["answers_read"] == r.trials and not target.tracing  # turned off after the audit
    r = run_gen_sequential(_target(mech, 2.0, Untraced), EX, ATTACK, claimed_epsilon=2.0, delta=1e-5, design=d,
                           alternatives=REQUIRED, alpha=ALPHA, cap=4, rng=np.random.default_rng(28), white_box=True)
    assert r.white_box == {} and any(REMOTE_TOKEN_GAP in n for n in r.notes)
