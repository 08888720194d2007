"""Power of generation audits (issue 28 item 2): ``app.audit.gen_power``.

Closed forms of the design model, a check of them against the real ``esa`` mechanism code
(a scripted model that follows the signal query exactly, i.e. the design model, and a fixed
embedder), plan == verdict power over a grid of real campaigns, and a pass / inconclusive
verdict from the job's own ``verdict``.
"""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats

from app.audit import Canary, CampaignConfig, run_campaign
from app.audit.gen_power import (
    GEN_ALTERNATIVES,
    NoPowerModel,
    assess_generation_power,
    gen_design_power,
    generation_design,
    signal_distance,
)
from app.audit.gen_plan import plan_generation
from app.audit.gen_queries import DEFAULT_SIGNALS
from app.audit.gen_targets import GenerationMechanismTarget
from app.audit.power import ceiling_epsilon, per_threat_model_confidence

Y1, Y0 = DEFAULT_SIGNALS
CANARY = "zq7 the lighthouse keeper owns eleven violet kites"
TEMPLATE = {"instruction": "Summarize.", "input_prefix": "Dialogue:", "output_prefix": "Summary:"}
D = 0.6  # the fixed embedder's signal distance


class SignalEmbedder:
    """Unit vectors: y1 and y0 at distance D, every other text a fixed orthogonal direction."""

    name = "signal-embedder"

    def __init__(self) -> None:
        self.e0 = np.zeros(8)
        self.e0[0] = 1.0
        c = 1.0 - D * D / 2.0  # cos of the angle between e1 and e0
        self.e1 = np.zeros(8)
        self.e1[0], self.e1[1] = c, math.sqrt(1.0 - c * c)

    def embed(self, texts):
        out = []
        for t in texts:
            if t == Y1:
                out.append(self.e1)
            elif t == Y0:
                out.append(self.e0)
            else:
                v = np.zeros(8)
                v[7] = 1.0
                out.append(v)
        return np.vstack(out)


class SignalLM:
    """Follows the signal query as the design model says: a prompt whose exemplars hold the canary
    answers y1, one with exemplars but no canary y0, a zero-shot prompt y1 and y0 in turn."""

    name = "signal-lm"

    def generate(self, prompts, max_new_tokens=8, temperature=0.0, stop=None, seed=None, top_p=None, **kw):
        out = []
        for i, p in enumerate(prompts):
            shots = p.count("Dialogue:") - 1
            text = (Y1 if f"Summary: {CANARY}" in p else Y0) if shots else (Y1 if i % 2 == 0 else Y0)
            out.append(SimpleNamespace(text=text, finish_reason="stop", token_ids=[1, 2, 3]))
        return out


def esa_target(parts: int, eps: float = 2.0, candidates: int = 2) -> GenerationMechanismTarget:
    return GenerationMechanismTarget(SignalLM(), SignalEmbedder(), "esa",
                                     {"epsilon": eps, "delta": 1e-5, "partitions": parts, "candidates": candidates},
                                     TEMPLATE, max_tokens=8)


EX = [(f"dialogue {i} about the weather", f"summary {i}") for i in range(8)]


def _design(mech, params, white_box=False, n=8, tokens=8, distance=D, noise_dims=0):
    return generation_design(mech, params, n, max_tokens=tokens, white_box=white_box, distance=distance,
                             noise_dims=noise_dims)


# -- closed forms --------------------------------------------------------------------------------

def test_deterministic_decoding_detection_is_one_when_the_canary_changes_the_argmax():
    """One unit: the canary's answer is the aggregate, a noise-free release is y1 iff the canary is
    in (TPR 1, FPR 0), so the bound is the perfect attack's: detection 1 iff the ceiling > claim."""
    for mech, p in (("esa", {"partitions": 1, "shots_per_partition": 8}),
                    ("clip_softmax", {"prompts": 1, "shots_per_prompt": 8}), ("poe", {"experts": 1, "group_size": 8}),
                    ("mozo", {"experts": 1, "group_size": 8})):
        d = _design(mech, {"epsilon": 2.0, "delta": 1e-5, **p})
        half = _design(mech, {"epsilon": 2.0, "delta": 1e-5, **{k: (4 if v == 8 else v) for k, v in p.items()}})
        assert half.release(0.0) == (0.5, 0.0)  # 4 of 8 exemplars used: the canary is read half the time
        for trials, claim in ((40, 2.0), (400, 2.0), (4000, 2.0), (400, 0.5)):
            r = gen_design_power(d, trials=trials, claimed_epsilon=claim, confidence=0.95,
                                 threat_models=("black-box",), delta=1e-5)
            a = r.alternatives["no_noise"]
            assert (a.tpr, a.fpr) == (1.0, 0.0)
            expected = 1.0 if ceiling_epsilon(trials // 2, trials // 2, confidence=0.95, delta=1e-5) > claim else 0.0
            assert a.detection_bound == pytest.approx(expected, abs=1e-12), (mech, trials, claim)
            assert r.alternatives["non_private"].detection_bound == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("mech,key", [("esa", "partitions"), ("clip_softmax", "prompts"), ("poe", "experts"),
                                      ("mozo", "experts")])
def test_deterministic_decoding_with_several_units_is_invisible_black_box(mech, key):
    """T >= 3: one unit of T never moves a noise-free argmax; T = 2 ties, and the worse tie-break is taken."""
    for t in (2, 3, 5):
        d = _design(mech, {"epsilon": 2.0, "delta": 1e-5, key: t})
        r = gen_design_power(d, trials=4000, claimed_epsilon=2.0, confidence=0.95, threat_models=("black-box",),
                             delta=1e-5, required=("no_noise",))
        assert r.alternatives["no_noise"].detection == 0.0 and not r.sufficient
        assert "never releases y1" in r.reasons[-1]


def test_release_probabilities_match_the_closed_forms():
    d = _design("esa", {"epsilon": 2.0, "delta": 1e-5, "partitions": 4})
    s = d.scale
    assert d.release(1.0) == pytest.approx((stats.norm.cdf(D * (0.25 - 0.5) / s), stats.norm.cdf(-D / (2 * s))))
    assert d.release(0.25) == pytest.approx((stats.norm.cdf(D * -0.25 / (s / 4)), stats.norm.cdf(-D / (s / 2))))
    c = _design("clip_softmax", {"epsilon": 2.0, "delta": 1e-5, "prompts": 4, "shots_per_prompt": 2, "clip": 3.0})
    tau = c.scale
    # mean clipped logit gap y1 - y0: (c - 3c)/4 - (3c - c)/4 = -c with the canary, -2c without
    assert c.release(1.0) == pytest.approx((1 / (1 + math.exp(3.0 / tau)), 1 / (1 + math.exp(6.0 / tau))))
    p = _design("poe", {"epsilon": 2.0, "delta": 1e-5, "experts": 8, "clip": 5.0})
    lam = 1 / p.scale
    # U(y1) - U(y0) = -(8 - 1) c + c = -6c with the canary, -8c without; lam x 10 at a tenth of the noise
    assert p.release(0.1) == pytest.approx((1 / (1 + math.exp(10 * lam * 30.0)), 1 / (1 + math.exp(10 * lam * 40.0))))


@pytest.mark.parametrize("units", [1, 2, 4, 8])  # units x shots = 8: every exemplar is read (coverage 1)
def test_token_mechanisms_closed_form_is_their_own_step_law(units):
    """The design model's P(y1) for clip_softmax and poe equals the real mechanism's per-token law
    (``step_log_probs``) on the design's logits: two tokens (y1's and y0's decisive token), the
    canary's unit puts its mass on y1's, every other unit on y0's; at the claimed scale and at a
    tenth of it (temperature / 10, lam x 10)."""
    from app.mechanisms import clip_softmax, poe_decode

    far = -1e4  # a token the unit never says: clipped to the floor either way
    with_ = np.array([[0.0, far]] + [[far, 0.0]] * (units - 1))
    without = np.array([[far, 0.0]] * units)
    c = _design("clip_softmax", {"epsilon": 2.0, "delta": 1e-5, "prompts": units, "shots_per_prompt": 8 // units})
    cfg = SimpleNamespace(clip=None)
    for mult in (1.0, 0.1):
        tau = c.scale * mult
        cfg.clip = -c.gap_without / 2  # c
        got = [float(np.exp(clip_softmax.step_log_probs(z, cfg.clip, tau))[0]) for z in (with_, without)]
        assert c.release(mult) == pytest.approx(tuple(got), rel=1e-9, abs=1e-300)  # float64 rounding of logsumexp vs tanh (~1e-11 seen)
    p = _design("poe", {"epsilon": 2.0, "delta": 1e-5, "experts": units, "group_size": 8 // units})
    clip = -p.gap_without / units
    for mult in (1.0, 0.1):
        lam = 1.0 / (p.scale * mult)
        got = [float(np.exp(poe_decode.step_log_probs(z, clip, lam))[0]) for z in (with_, without)]
        assert p.release(mult) == pytest.approx(tuple(got), rel=1e-9, abs=1e-300)  # float64 rounding of logsumexp vs tanh (~1e-11 seen)


@pytest.mark.parametrize("experts", [1, 2, 4, 8])
def test_mozo_design_is_the_closed_form_of_its_mixing(experts):
    """mozo's step law on the two decisive tokens (uniform base, public lam) has the closed form
    log-odds w (2 - E) L with the canary and -w E L without, L = log((1 + lam)/(1 - lam)),
    w = 1/(E_cfg tau): the padded zero-shot experts cancel out of the odds. The design's scale is the
    temperature tau mozo samples at, its gaps tau x those log-odds (the statistic's gap)."""
    from app.mechanisms import mozo
    from app.mechanisms.generation import GenerationRequest

    # Given: left out, experts would be derived from the 8 exemplars (2 x 4) and refused as unusable
    # (gen_defaults); the old default's padded zero-shot experts no longer arise from a default call.
    own = {"experts": experts, "group_size": 8 // experts}
    d = _design("mozo", {"epsilon": 2.0, "delta": 1e-5, **own})
    cfg = mozo.configure(GenerationRequest.build(EX, "q", epsilon=2.0, delta=1e-5, max_tokens=8, params=own))
    built = cfg.experts
    assert built == experts and d.coverage == 1.0
    w = cfg.weight
    lam = mozo.calibrate_lambda(cfg.epsilon_per_token, w, 0.5, 0.5)
    big_l = math.log((1 + lam) / (1 - lam))
    assert d.scale == cfg.temperature
    assert d.gap_with / d.scale == pytest.approx(w * (2 - built) * big_l, rel=1e-9, abs=1e-12)
    assert d.gap_without / d.scale == pytest.approx(-w * built * big_l, rel=1e-9)
    # the bound the calibration keeps: the step's log-ratio range 2 w L <= eps_tok
    assert 2 * w * big_l <= cfg.epsilon_per_token * (1 + 1e-12)


def test_unmodelled_mechanisms_say_why():
    with pytest.raises(NoPowerModel, match="no privacy claim"):
        _design("zero_shot", {})
    with pytest.raises(NoPowerModel, match="signal texts"):  # ksa's law is computed from y1 and y0
        _design("ksa", {"epsilon": 2.0, "delta": 1e-5})


def test_real_esa_release_frequencies_match_the_design_model():
    """The real esa code (partitioning, embedding, calibrated Gaussian noise, nearest candidate)
    with a model that follows the signal query: the observed P(y1) with and without the canary
    lies in the 99.9% Clopper-Pearson interval of 2000 fixed-seed answers around the closed form."""
    from app.audit.gen_queries import GENERATION_STRATEGIES, resolve_generation_query
    from app.audit.insertion import paired_contexts

    attack = resolve_generation_query(GENERATION_STRATEGIES["signal_text"], Canary("false_fact", CANARY, CANARY))
    for parts in (1, 4):
        tgt = esa_target(parts)
        d = _design("esa", tgt.params, distance=float(np.linalg.norm(tgt.embedder.e1 - tgt.embedder.e0)))
        c1, c0 = paired_contexts(EX, (CANARY, CANARY), 3)
        rng = np.random.default_rng(28)
        for ctx, want in ((c1, d.release(1.0)[0]), (c0, d.release(1.0)[1])):
            n = 2000
            k = sum(tgt.observe(ctx, attack, rng).label == Y1 for _ in range(n))
            lo = stats.beta.ppf(0.0005, k, n - k + 1) if k else 0.0
            hi = stats.beta.ppf(0.9995, k + 1, n - k) if k < n else 1.0
            assert lo <= want <= hi, (parts, k / n, want)


# -- one power model: plan == verdict ------------------------------------------------------------

def _grid(n: int, seed: int = 28):
    full = list(itertools.product((1, 2, 3, 4, 8), (0.5, 2.0, 8.0), (24, 60, 200, 1000), ("black-box", "both")))
    rng = np.random.default_rng(seed)
    return [full[i] for i in rng.choice(len(full), size=n, replace=False)]


@pytest.mark.parametrize("parts,claim,trials,tm", _grid(12))
def test_plan_prediction_equals_verdict_power(parts, claim, trials, tm):
    """A real campaign against the in-process esa target; the verdict's ``assess_generation_power``
    equals the planner's ``gen_design_power`` for the same design, to the float."""
    tgt = esa_target(parts, eps=claim)
    tms = ("black-box", "white-box") if tm == "both" else ("black-box",)
    res = run_campaign(tgt, EX, Canary("false_fact", CANARY, CANARY), "signal_text", task_labels=[],
                       template=TEMPLATE, config=CampaignConfig(trials=trials, threat_models=tms),
                       rng=np.random.default_rng(1))
    req = [a for a in GEN_ALTERNATIVES if a != "claimed"]
    verdict = assess_generation_power(res, tgt, len(EX), claim, required=req)
    dist = signal_distance(SignalEmbedder(), Y1, Y0)  # what the planner measures with the server's embedder
    dims = 8 if tm == "both" else 0  # the white-box run tests ESA's noise: trials x 8 draws (SignalEmbedder)
    plan = gen_design_power(_design("esa", tgt.params, white_box=tm == "both", distance=dist, noise_dims=dims),
                            trials=trials,
                            claimed_epsilon=claim,
                            confidence=0.95, threat_models=tms, delta=1e-5, required=req)
    assert verdict.confidence == per_threat_model_confidence(0.95, len(tms))
    assert verdict.ceiling_epsilon == plan.ceiling_epsilon
    for a in GEN_ALTERNATIVES:
        assert verdict.alternatives[a].detection == plan.alternatives[a].detection, a
    assert verdict.sufficient == plan.sufficient and verdict.reasons == plan.reasons


def test_planned_design_passes_and_too_few_trials_name_one_that_can():
    """The planner's recommended esa design (white-box, no_noise and non_private) run as a real
    campaign against the correct mechanism ends ``pass`` in the job's verdict; the same design with
    too few trials ends inconclusive, and the reason names a trial count that can."""
    from app.jobs.kinds.canary_gen import generation_power
    from app.jobs.kinds.canary_mia import CanaryMIAConfig, CanaryMIAKind

    req = ["no_noise", "non_private"]
    tgt = esa_target(4)
    out = plan_generation("esa", tgt.params, exemplars=8, max_tokens=8, distance=D, noise_dims=8,
                          threat_models=("black-box", "white-box"), white_box=True, claimed_epsilon=2.0,
                          confidence=0.95, delta=1e-5, alternatives=req)
    cfg = out["configured"]
    assert cfg["trials"] is not None and cfg["threat_model"] == "white-box"
    config = CanaryMIAConfig.model_validate({"task": "generation", "power": {"alternatives": req}})
    kind = CanaryMIAKind()
    assert cfg["trials"] == 14  # the white-box split's minimum (the noise test sees both alternatives)
    for trials, want in ((cfg["trials"], "pass"), (12, "inconclusive")):
        res = run_campaign(tgt, EX, Canary("false_fact", CANARY, CANARY), "signal_text", task_labels=[],
                           template=TEMPLATE, config=CampaignConfig(trials=trials), rng=np.random.default_rng(5))
        result = {**res.to_dict(), **generation_power(res, tgt, len(EX), 2.0, config)}
        assert kind.verdict(result, 2.0, None) == want, result["verdict_reason"]
        if want == "inconclusive":
            assert f"reaches the power with {cfg['trials']} trials" in result["verdict_reason"] or \
                "trials (trials:" in result["verdict_reason"]


def test_a_design_that_cannot_reach_power_names_one_that_can():
    """Black-box esa with 4 partitions never sees no_noise (one partition of four never moves a
    noise-free mean past the midpoint): no trial count helps, so the inconclusive verdict names the
    planner's design that can -- white-box, with its trials."""
    from app.jobs.kinds.canary_gen import generation_power, plan_generation_audit
    from app.jobs.kinds.canary_mia import CanaryMIAConfig, CanaryMIAKind

    tgt = esa_target(4)
    config = CanaryMIAConfig.model_validate({
        "task": "generation", "threat_model": "black-box", "max_tokens": 8, "dataset": {"size": 8},
        "target": {"type": "mechanism", "mechanism": "esa", "params": tgt.params},
        "power": {"alternatives": ["no_noise", "non_private"]}})
    res = run_campaign(tgt, EX, Canary("false_fact", CANARY, CANARY), "signal_text", task_labels=[],
                       template=TEMPLATE, config=CampaignConfig(trials=200, threat_models=("black-box",)),
                       rng=np.random.default_rng(7))
    result = {**res.to_dict(), **generation_power(res, tgt, len(EX), 2.0, config)}
    assert CanaryMIAKind().verdict(result, 2.0, None) == "inconclusive"
    assert "no trial count up to 20000 reaches the power with this design" in result["verdict_reason"]
    plan = plan_generation_audit(config, 2.0, None, tgt.embedder)
    rec = plan["recommended"]  # the cheapest in model calls: one partition (black-box) or white-box
    assert rec["runnable"] and rec["trials"] and min(rec["detection"].values()) >= 0.9
    assert (rec["partitions"], rec["threat_model"]) != (4, "black-box")
    assert any(d["threat_model"] == "white-box" and d["trials"] for d in plan["designs"])
    assert (f"one that can: {rec['threat_model']}, partitions {rec['partitions']}, max_tokens 8, "
            f"{rec['trials']} trials") in result["verdict_reason"], result["verdict_reason"]


@pytest.mark.parametrize("mech,params,param", [
    ("esa", {"epsilon": "x"}, "config.target.params.epsilon"),
    ("esa", {}, "config.target.params.epsilon"),
    ("poe", {"epsilon": 1.0, "delta": 2}, "config.target.params.delta"),
    ("clip_softmax", {"epsilon": 1.0, "partitions": 2}, "config.target.params.partitions"),
    ("poe", {"epsilon": 1e300}, "config.target.params"),  # the mechanism's own RDP overflows: a 422, not a 500
    ("mozo", {"epsilon": 1e300}, "config.target.params"),
    ("ksa", {"epsilon": 1.0, "partitions": 5}, "config.target.params.partitions"),
    ("zero_shot", {}, "config.target.mechanism"),
])
def test_bad_generation_plan_is_an_error_naming_the_field(mech, params, param):
    from app.jobs.errors import JobConfigError
    from app.jobs.kinds.canary_gen import plan_generation_audit
    from app.jobs.kinds.canary_mia import CanaryMIAConfig

    config = CanaryMIAConfig.model_validate({"task": "generation", "dataset": {"size": 4}, "max_tokens": 4,
                                             "target": {"mechanism": mech, "params": params}})
    with pytest.raises(JobConfigError) as exc:
        plan_generation_audit(config, None, None, SignalEmbedder())
    assert exc.value.param == param, exc.value.message


@pytest.mark.parametrize("trials,coverage,claim", [(40, 1.0, 0.5), (60, 0.5, 0.5), (200, 0.5, 2.0), (400, 0.25, 1.0)])
def test_white_box_split_law_matches_a_direct_sum(trials, coverage, claim):
    """The white-box no-noise detection (vectorised over the hypergeometric split) equals the direct
    sum over every split m of P(m) x P(bound(TP ~ Bin(c1, coverage), FP = 0) > claim), the splits
    that lack a hypothesis counted as misses."""
    from app.audit.gen_power import _split_detection
    from app.audit.power import detection_probability

    half = trials // 2
    k = int(round(trials * 0.5))
    conf = 0.975
    want = 0.0
    for m in range(1, k):
        c1, c0 = half - m, half - (k - m)
        if c1 >= 1 and c0 >= 1:
            want += stats.hypergeom.pmf(m, trials, half, k) * detection_probability(
                coverage, 0.0, c1, c0, claim, confidence=conf, delta=1e-5)
    assert _split_detection(trials, 0.5, claim, conf, 1e-5, coverage) == pytest.approx(want, abs=1e-12)


def test_remembered_release_laws_are_the_designs_own():
    """``alternative_release`` (remembered per design, alternative and tie-break) equals the design's
    ``release`` computed afresh, for every alternative and both tie-breaks, asked twice."""
    from app.audit.gen_power import GEN_ALTERNATIVES, alternative_release

    for mech, params in (("esa", {"epsilon": 1.0, "delta": 1e-5, "partitions": 2}),
                         ("clip_softmax", {"epsilon": 2.0, "delta": 1e-5, "prompts": 2}),
                         ("poe", {"epsilon": 1.0, "delta": 1e-5, "experts": 4})):
        d = _design(mech, params, distance=0.6 if mech == "esa" else None)
        for _ in range(2):
            for name, f in GEN_ALTERNATIVES.items():
                for tie in ("positive", "other"):
                    assert alternative_release(d, name, tie) == d.release(f, tie), (mech, name, tie)
