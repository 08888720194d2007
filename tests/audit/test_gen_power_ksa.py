"""Power of ksa generation audits (issue 28 item 2): ``app.audit.gen_power_ksa``.

The exact release law of the design model against the mechanism's own release step
(``ksa.release_keywords``: its Gumbel and PTR draws) and its whole ``run`` (a scripted model that
follows the signal query and the keyword suggestions, i.e. the design model), plan == verdict power
over a grid of real campaigns, and a planned ksa audit that ends ``pass``.
"""

from __future__ import annotations

import functools
import itertools
import re
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats

from app.audit import Canary, CampaignConfig, run_campaign
from app.audit.gen_plan import plan_generation
from app.audit.gen_power import GEN_ALTERNATIVES, assess_generation_power, gen_design_power, generation_design
from app.audit.gen_power_ksa import KSADesign, answer_y1, scaled_config
from app.audit.gen_queries import DEFAULT_SIGNALS
from app.audit.gen_targets import GenerationMechanismTarget
from app.mechanisms import ksa
from tests.audit.test_gen_power import CANARY, EX, TEMPLATE, SignalEmbedder

Y1, Y0 = DEFAULT_SIGNALS
Y1_ONLY = frozenset(ksa.keywords(Y1) - ksa.keywords(Y0))
Y0_ONLY = frozenset(ksa.keywords(Y0) - ksa.keywords(Y1))
_SUGGESTED = re.compile(r"Use the following word suggestions: \[([^\]]*)\]")


def _cp(k: int, n: int, level: float) -> tuple[float, float]:
    """Two-sided Clopper-Pearson interval at ``level``."""
    a = (1.0 - level) / 2.0
    lo = stats.beta.ppf(a, k, n - k + 1) if k else 0.0
    hi = stats.beta.ppf(1.0 - a, k + 1, n - k) if k < n else 1.0
    return float(lo), float(hi)


class KeywordLM:
    """Follows the design model: a prompt with exemplars answers y1 iff the canary is among them,
    else y0; the zero-shot prompt answers y1 if a keyword only y1 has is suggested, y0 if one only
    y0 has is, else y1 or y0 by a fair coin (the signal query's zero-shot rule), from its own
    seeded generator."""

    name = "keyword-lm"

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def generate(self, prompts, max_new_tokens=8, temperature=0.0, stop=None, seed=None, top_p=None, **kw):
        out = []
        for p in prompts:
            if p.count("Dialogue:") - 1:
                text = Y1 if f"Summary: {CANARY}" in p else Y0
            else:
                m = _SUGGESTED.search(p)
                words = {w.strip() for w in m.group(1).split(",")} if m else set()
                a = answer_y1(sorted(words), Y1_ONLY, Y0_ONLY)
                text = Y1 if (a == 1.0 or (a == 0.5 and self.rng.random() < 0.5)) else Y0
            out.append(SimpleNamespace(text=text, finish_reason="stop", token_ids=[1, 2, 3]))
        return out


@functools.lru_cache(maxsize=None)
def _calibrated(eps: float) -> tuple[float, float]:
    """ksa's own calibration of (epsilon_EM, noise multiplier) for the claim, once: given back as
    params, every ``configure`` of a trial skips the ~50 ms bisection and gets the same config."""
    b = ksa.calibrate_budget(eps, 1e-5, "replace-one", ksa.DEFAULT_EM_FRACTION, ksa.DEFAULT_PTR_DELTA_FRACTION)
    return b.epsilon_em, b.noise_multiplier


def ksa_params(parts: int, eps: float = 2.0, shots: int | None = None) -> dict:
    em, sigma = _calibrated(eps)
    return {"epsilon": eps, "delta": 1e-5, "partitions": parts, "shots_per_partition": shots or 8 // parts,
            "epsilon_em": em, "noise_multiplier": sigma}


def ksa_target(parts: int, eps: float = 2.0, seed: int = 0) -> GenerationMechanismTarget:
    return GenerationMechanismTarget(KeywordLM(seed), SignalEmbedder(), "ksa", ksa_params(parts, eps), TEMPLATE,
                                     max_tokens=8)


def _design(params, n: int = 8) -> KSADesign:
    d = generation_design("ksa", params, n, max_tokens=8, white_box=False, distance=None, signals=DEFAULT_SIGNALS)
    assert isinstance(d, KSADesign)
    return d


# -- the exact law against the mechanism's own code -----------------------------------------------

@pytest.mark.parametrize("eps,parts,mult", [(2.0, 6, 0.1), (2.0, 8, 0.25), (2.0, 4, 0.1), (8.0, 8, 1.0),
                                            (16.0, 6, 1.0), (16.0, 8, 0.5)])
def test_exact_law_matches_the_mechanisms_release_step(eps, parts, mult):
    """3000 fixed-seed draws of ``ksa.release_keywords`` (the mechanism's exponential mechanism and
    PTR test, with its noise scaled by ``scaled_config``) on the design's answers, the final answer
    drawn by the design model's rule: the count of y1 lies in the 99.99% Clopper-Pearson interval
    around the exact P(y1), with and without the canary."""
    d = _design(ksa_params(parts, eps))
    cfg = scaled_config(d.config, mult)
    rng = np.random.default_rng(2811)
    n = 3000
    for answers, want in zip(d.answers(), d.unit_release(mult)):
        k = 0
        for _ in range(n):
            words = ksa.release_keywords(answers, cfg, rng)["keywords"]
            k += int(rng.random() < answer_y1(words, Y1_ONLY, Y0_ONLY))
        lo, hi = _cp(k, n, 0.9999)
        assert lo <= want <= hi, (eps, parts, mult, k / n, want)


@pytest.mark.parametrize("parts,want", [(1, (0.5, 0.5)), (2, (0.5, 0.5)), (3, (0.5, 0.0)), (4, (0.5, 0.0)),
                                        (5, (0.0, 0.0)), (8, (0.0, 0.0))])
def test_no_noise_release_by_hand(parts, want):
    """Noise-free ksa (D = 2, y1 and y0 share no keyword, y0's 6 keywords): without the canary y0's
    keywords have count T and the gap at k = 6 is T, released iff T > 2 (the answer is y0), else
    the zero-shot coin; with it they have T - 1 and y1's T = 1, gaps T - 2 and 1: released (y0) iff
    T - 2 > 2, else the coin. So T = 3, 4 see the canary, T <= 2 and T >= 5 do not."""
    assert not (ksa.keywords(Y1) & ksa.keywords(Y0)) and len(ksa.keywords(Y0)) == 6
    d = _design(ksa_params(parts, 2.0))
    for ties in ("positive", "other"):
        assert d.unit_release(0.0, ties) == want


def test_the_claimed_mechanism_is_a_false_alarm_at_most():
    """At the claimed noise the design's (TPR, FPR) satisfy the claim's (epsilon, delta) constraint
    (post-processing of a DP release), so detection of 'claimed' stays <= 1 - confidence."""
    for parts, eps in itertools.product((1, 3, 4, 6, 8), (0.5, 2.0, 8.0)):
        d = _design(ksa_params(parts, eps))
        tpr, fpr = d.release(1.0)
        assert tpr <= np.exp(eps) * fpr + 1e-5 + 1e-12 and (1 - fpr) <= np.exp(eps) * (1 - tpr) + 1e-5 + 1e-12
        r = gen_design_power(d, trials=2000, claimed_epsilon=eps, confidence=0.95, threat_models=("black-box",),
                             delta=1e-5)
        assert r.alternatives["claimed"].detection <= 0.05


@pytest.mark.parametrize("parts", [6, 8])
def test_real_ksa_run_matches_the_design_model(parts):
    """The whole ``ksa.run`` (partitioning, member answers, keyword release, the zero-shot prompt
    with the suggestions) through the audit's own target and decision, with a model that follows
    the design model: P(y1) with and without the canary (2000 fixed-seed answers each) in the
    99.99% Clopper-Pearson interval around the exact law, at claim epsilon 16 where both are
    strictly between 0 and 1/2 (at T = 6 the mixture over q = 3/4 too)."""
    from app.audit.gen_queries import GENERATION_STRATEGIES, resolve_generation_query
    from app.audit.insertion import paired_contexts

    attack = resolve_generation_query(GENERATION_STRATEGIES["signal_text"], Canary("false_fact", CANARY, CANARY))
    tgt = ksa_target(parts, eps=16.0, seed=parts)
    d = _design(tgt.params)
    assert d.coverage == parts * (8 // parts) / 8  # 6 x 1 of 8 exemplars: the canary is read w.p. 3/4
    c1, c0 = paired_contexts(EX, (CANARY, CANARY), 3)
    rng = np.random.default_rng(28)
    for ctx, want in zip((c1, c0), d.release(1.0)):
        n = 2000
        k = sum(tgt.observe(ctx, attack, rng).label == Y1 for _ in range(n))
        lo, hi = _cp(k, n, 0.9999)
        assert 0.0 < want < 0.5 and lo <= want <= hi, (parts, k / n, want)


# -- one power model: plan == verdict ---------------------------------------------------------------

def _grid(n: int, seed: int = 33):
    full = list(itertools.product((1, 3, 4, 6, 8), (0.5, 2.0, 8.0), (24, 200, 1000)))
    rng = np.random.default_rng(seed)
    return [full[i] for i in rng.choice(len(full), size=n, replace=False)]


@pytest.mark.parametrize("parts,claim,trials", _grid(8))
def test_plan_prediction_equals_verdict_power(parts, claim, trials):
    """A real campaign against the in-process ksa target; the verdict's ``assess_generation_power``
    equals the planner's ``gen_design_power`` for the same design, to the float."""
    tgt = ksa_target(parts, eps=claim)
    res = run_campaign(tgt, EX, Canary("false_fact", CANARY, CANARY), "signal_text", task_labels=[],
                       template=TEMPLATE, config=CampaignConfig(trials=trials, threat_models=("black-box",)),
                       rng=np.random.default_rng(1))
    req = [a for a in GEN_ALTERNATIVES if a != "claimed"]
    verdict = assess_generation_power(res, tgt, len(EX), claim, required=req)
    plan = gen_design_power(_design(tgt.params), trials=trials, claimed_epsilon=claim, confidence=0.95,
                            threat_models=("black-box",), delta=1e-5, required=req)
    assert verdict.vote_model_note == plan.vote_model_note and "keyword" in plan.vote_model_note
    assert verdict.ceiling_epsilon == plan.ceiling_epsilon
    for a in GEN_ALTERNATIVES:
        assert verdict.alternatives[a].detection == plan.alternatives[a].detection, a
    assert verdict.sufficient == plan.sufficient and verdict.reasons == plan.reasons


def test_planned_ksa_design_passes_and_too_few_trials_name_one_that_can():
    """The planner's ksa design for no_noise and non_private (4 partitions: a noise-free release
    changes with the canary) run as a real campaign against the correct mechanism ends ``pass`` in
    the job's verdict; the same design with 24 trials is inconclusive and names the count."""
    from app.jobs.kinds.canary_gen import generation_power
    from app.jobs.kinds.canary_mia import CanaryMIAConfig, CanaryMIAKind

    req = ["no_noise", "non_private"]
    tgt = ksa_target(4)
    out = plan_generation("ksa", tgt.params, exemplars=8, max_tokens=8, distance=None, threat_models=("black-box",),
                          white_box=False, claimed_epsilon=2.0, confidence=0.95, delta=1e-5, alternatives=req,
                          signals=DEFAULT_SIGNALS)
    cfg = out["configured"]
    assert cfg["trials"] is not None and cfg["partitions"] == 4 and min(cfg["detection"].values()) >= 0.9
    config = CanaryMIAConfig.model_validate({"task": "generation", "power": {"alternatives": req}})
    kind = CanaryMIAKind()
    for trials, want in ((cfg["trials"], "pass"), (24, "inconclusive")):
        res = run_campaign(tgt, EX, Canary("false_fact", CANARY, CANARY), "signal_text", task_labels=[],
                           template=TEMPLATE, config=CampaignConfig(trials=trials, threat_models=("black-box",)),
                           rng=np.random.default_rng(5))
        result = {**res.to_dict(), **generation_power(res, tgt, len(EX), 2.0, config)}
        assert kind.verdict(result, 2.0, None) == want, result["verdict_reason"]
        if want == "inconclusive":
            assert f"reaches the power with {cfg['trials']} trials" in result["verdict_reason"]


def test_no_design_for_every_alternative_names_one_per_alternative():
    """At claim 2 with 8 exemplars no partition count sees both noise_tenth (the canary must move the
    gap across PTR's threshold: T = 6) and no_noise (T = 3, 4): no recommendation, and the plan
    names the cheapest design for each alternative alone, each detecting it."""
    out = plan_generation("ksa", {"epsilon": 2.0, "delta": 1e-5}, exemplars=8, max_tokens=8, distance=None,
                          threat_models=("black-box",), white_box=False, claimed_epsilon=2.0, confidence=0.95,
                          delta=1e-5, alternatives=["noise_tenth", "no_noise"], signals=DEFAULT_SIGNALS)
    assert out["recommended"] is None
    alone = out["each_alternative_alone"]
    assert alone["noise_tenth"]["partitions"] == 6 and alone["no_noise"]["partitions"] in (3, 4)
    for a, d in alone.items():
        assert d["detection"][a] >= 0.9 and d["trials"]
    assert "each alone (one audit each): noise_tenth: black-box, partitions 6" in out["notes"][-1]
