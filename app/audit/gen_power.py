"""The power of a generation canary audit: could it have seen a broken generation mechanism?

The classification power model (``app.audit.power``) counts votes; a generation
mechanism releases text, decided by the signal query (tight-auditing 3.4, Prompts
2/3: the released text is nearer y1 "the canary is there" than y0). This module
states a *design model* of that decision and computes, for a planned design, the
exact probability that the audit's rigorous bound exceeds the claim under each
broken alternative. The planner (``plan_generation``) and the verdict
(``assess_generation_power``) call the same ``gen_design_power`` with the same
inputs, so a plan's prediction is the power the verdict reports.

Design model (the auditor's best case, as tight-auditing Lemma 3.1 is for votes):
the canary's unit (ESA partition, clip-softmax prompt, PoE expert) answers y1 and
every other unit y0; without the canary every unit answers y0; the public side
(ESA's zero-shot candidates, the token mechanisms' public candidate set at the
decisive step) offers both signal texts, and one decisive token separates them
(the text then follows its branch). A mechanism that uses only units x shots of the
n exemplars (a random subset) reads the canary with probability q = units x shots / n,
so P(y1 | canary in) = q P_in + (1 - q) P_out. Under it the mechanism's own noise gives the
release probability of y1 in closed form, with the mechanism's calibrated
constants from its own ``configure`` (``GenerationDesign``):

* ``esa`` (Wu et al. 2024; tight-auditing Alg. 3): unit-norm signal embeddings
  e1, e0 at distance D, clip norm R (r = min(1, R)); the clean mean moves by
  r (e1 - e0)/T; the nearer of e1, e0 to m~ = m + N(0, s^2 I) is e1 iff
  m~ . (e1 - e0) > 0, a Gaussian with mean r D^2 (1/T - 1/2) (with the canary) or
  -r D^2/2 (without) and sd s D:  P(y1) = Phi(r D (1/T - 1/2) / s), Phi(-r D / (2s)).
* ``clip_softmax`` (ICLInf App. C, Alg. 1): clipped logits of the decisive token
  c (the unit's answer) or -c; mean over s prompts; P(y1) = logistic(gap / tau)
  with gap 2c(2 - s)/s (with) or -2c (without).
* ``poe`` decoding (PoEtry Eq. 3 + exponential mechanism): U = sum of clipped
  log-probabilities (0 or -c); P(y1) = logistic(lam gap), gap -(E - 2)c (with) or
  -E c (without), lam the mechanism's inverse temperature.
* ``mozo`` (DPS-MOZO / PMixED mixing): the mechanism's own step law on the two tokens with a
  uniform base (mu = 1, or Prompt 3's zero-shot "either") and its public lam for that base:
  log-odds w (2 - E) L (with) or -w E L (without), L = log((1 + lam)/(1 - lam)), w = 1/(E_cfg tau)
  (scale tau, the temperature it samples at: gaps tau x those log-odds).

Alternatives (``GEN_ALTERNATIVES``): the claimed scale (a false alarm), the noise
scale (ESA's sigma; the sampling temperature 1/lam or tau) times 1/2, 1/4, 1/10;
``no_noise`` (deterministic decoding: the argmax of the same aggregate, a clean tie
broken for or against the canary, the worse taken); ``non_private`` (the
full-context release: the model reads the canary and says y1, else y0).

Tests: the black-box decision counts every paired trial (TP ~ Bin(n/2, tpr), FP ~
Bin(n/2, fpr)): ``power.detection_probability``, exact. ESA's white-box margin
d0 - d1 of the noisy mean is modelled only where it is deterministic (no noise):
the threshold chosen on the selection trials separates the two values, so the
bound is the ceiling of the counted split (hypergeometric, exact; a grown split
counts as a miss). The white-box run also observes ESA's noise (noisy - clean mean,
``noise_dims`` draws per trial; ``gen_targets.generation_conformance``) and tests it against
the claimed sigma: against noise x f its chi-square scale test has the exact power
``conformance.conformance_power`` (sum (f Z)^2 = f^2 chi2(trials x dims)), and no noise gives zero
residuals (power 1); this ``detection_conformance`` replaces the black-box lower bound for the
noisy alternatives. Without observed draws the black-box detection is reported: a lower bound.

``ksa`` (keywords released by propose-test-release, then a zero-shot generation) has no per-token
law; its exact release law under the same design model is in ``app.audit.gen_power_ksa``
(``KSADesign``), which ``generation_design`` returns for it.

Not modelled (power unknown, no pass): the repeat attack (a thresholded similarity score), the L3
judge, contextleak insertion.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from app.audit.conformance import conformance_confidence, conformance_power
from app.audit.estimates import SPLIT_FAILURE, bound_curves, min_split_trials
from app.audit.gen_model_check import MODEL_CHECK_DELTA, pairs_needed
from app.audit.power import (
    DEFAULT_MIN_DETECTION,
    AlternativePower,
    PowerReport,
    ceiling_epsilon,
    detection_probability,
    per_threat_model_confidence,
)

# name -> multiplier of the claimed noise scale; None: the non-private (full-context) release.
GEN_ALTERNATIVES: dict[str, float | None] = {
    "claimed": 1.0, "noise_half": 0.5, "noise_quarter": 0.25, "noise_tenth": 0.1, "no_noise": 0.0,
    "non_private": None,
}
DEFAULT_GEN_REQUIRED = ("noise_tenth", "no_noise", "non_private")
MODELLED = ("esa", "clip_softmax", "poe", "mozo", "ksa")
NOT_MODELLED: dict[str, str] = {}  # mechanism -> why it has no design model (every private one has one now)
GEN_MODEL_NOTE = ("design model (not observed): the canary's unit answers y1 and every other unit y0, the public "
                  "candidates offer both signal texts, one decisive token separates them (the auditor's best "
                  "case, as tight-auditing Lemma 3.1 for votes); a model that does not follow the signal query "
                  "lowers the real power")


class NoPowerModel(ValueError):
    """This audit's mechanism or attack has no generation power model (the message says why)."""


@dataclass(frozen=True)
class GenerationDesign:
    """The design model of one generation mechanism configuration: P(y1) = law(gap / (f x scale))."""

    mechanism: str
    units: int  # ESA partitions, clip-softmax prompts, PoE experts
    scale: float  # ESA sigma (x D on the projection); tau; 1 / lam
    gap_with: float
    gap_without: float
    law: str  # "gaussian" | "logistic"
    white_box: bool = False  # the audit's white-box margin runs (ESA internals)
    signal_distance: float | None = None  # ESA: ||e(y1) - e(y0)||
    coverage: float = 1.0  # P(the canary is in a used unit): units x shots / exemplars (a random subset is used)
    noise_dims: int = 0  # ESA white-box: noise draws observed per trial (noisy - clean mean: the embedding dim)

    @property
    def model_note(self) -> str:
        return GEN_MODEL_NOTE

    def release(self, multiplier: float | None, ties: str = "positive") -> tuple[float, float]:
        """(P(y1 | canary in), P(y1 | canary out)) under the alternative (exact in the design model)."""
        if multiplier is None:
            return 1.0, 0.0
        if multiplier == 0.0:
            def det(g: float) -> float:
                if abs(g) <= 1e-12 * max(1.0, abs(self.gap_without)):
                    return 1.0 if ties == "positive" else 0.0
                return 1.0 if g > 0 else 0.0
            p_in, p_out = det(self.gap_with), det(self.gap_without)
        else:
            s = multiplier * self.scale
            f = stats.norm.cdf if self.law == "gaussian" else _logistic
            p_in, p_out = float(f(self.gap_with / s)), float(f(self.gap_without / s))
        return self.coverage * p_in + (1.0 - self.coverage) * p_out, p_out


def alternative_ties(name: str) -> tuple[str, ...]:
    """The tie-breaks a clean argmax can take under alternative ``name``: both for deterministic
    decoding (the auditor must see either), one otherwise."""
    return ("positive", "other") if GEN_ALTERNATIVES[name] == 0.0 else ("positive",)


def alternative_release(design: GenerationDesign, name: str, ties: str = "positive") -> tuple[float, float]:
    """(P(y1 | canary in), P(y1 | canary out)) of one trial under alternative ``name`` of
    ``GEN_ALTERNATIVES``: the per-trial law that the fixed power (``gen_design_power``) and the
    sequential audit (``app.audit.gen_sequential``) both use. Remembered per (design, alternative,
    tie-break): a frozen design's release is a pure function, and a sequential simulation asks for the
    same few laws on every audit (a scipy cdf each, ~16 % of a design-model audit's time)."""
    return _release(design, GEN_ALTERNATIVES[name], ties)


@functools.lru_cache(maxsize=1024)
def _release(design: GenerationDesign, multiplier: float | None, ties: str) -> tuple[float, float]:
    return design.release(multiplier, ties)


def _logistic(x: float) -> float:
    return float(0.5 * (1.0 + math.tanh(0.5 * x)))


def signal_distance(embedder: Any, y1: str, y0: str) -> float:
    """||e(y1) - e(y0)|| of the auditor's (= ESA's) embedder, after unit normalisation."""
    e = np.asarray(embedder.embed([y1, y0]), dtype=float)
    e = e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-300)
    return float(np.linalg.norm(e[0] - e[1]))


def embedding_dims(embedder: Any, text: str) -> int:
    """The embedding dimension: ESA's noise draws per answer (one per coordinate of the mean)."""
    return int(np.asarray(embedder.embed([text]), dtype=float).shape[-1])


def configured(mechanism: str, params: Mapping[str, Any], n_exemplars: int, *, max_tokens: int) -> Any:
    """The mechanism's own ``configure`` for ``n_exemplars`` and ``params`` (epsilon, delta, adjacency and
    its own): the calibration the design model (and a simulated white-box target) is built from."""
    from app.mechanisms.generation import GenerationRequest, get_generation_mechanism

    p = dict(params)
    priv = {k: p.pop(k) for k in ("epsilon", "delta", "adjacency") if k in p}
    req = GenerationRequest.build([("x", "y")] * max(1, n_exemplars), "q", epsilon=priv.get("epsilon"),
                                  delta=priv.get("delta", 1e-5), adjacency=priv.get("adjacency", "replace-one"),
                                  max_tokens=max_tokens, params=p)
    mech = get_generation_mechanism(mechanism)
    assert mech.configure is not None
    return mech.configure(req)


def generation_design(mechanism: str, params: Mapping[str, Any], n_exemplars: int, *, max_tokens: int,
                      white_box: bool, distance: float | None,
                      signals: Sequence[str] | None = None, noise_dims: int = 0) -> GenerationDesign:
    """The mechanism's own calibration (``configure``) for ``n_exemplars`` and ``params`` (epsilon,
    delta, adjacency and its own), turned into the design model (``ksa``: from the signal texts
    (y1, y0), ``app.audit.gen_power_ksa``). Raises ``NoPowerModel`` for the mechanisms the model
    does not cover and the mechanism's ``MechanismParamError`` for bad params. ``noise_dims``: ESA's
    white-box run observes its noise (noisy - clean mean), that many draws per trial."""
    if mechanism in NOT_MODELLED:
        raise NoPowerModel(NOT_MODELLED[mechanism])
    if mechanism not in MODELLED:
        raise NoPowerModel(f"{mechanism} makes no privacy claim to audit a power for")
    cfg = configured(mechanism, params, n_exemplars, max_tokens=max_tokens)
    if mechanism == "esa":
        if distance is None or not distance > 0:
            raise NoPowerModel("esa's design model needs the signal texts' embedding distance")
        t, r = int(cfg.partitions), min(1.0, float(cfg.clip_norm))
        return GenerationDesign("esa", t, float(cfg.noise.sigma), r * distance * (1.0 / t - 0.5),
                                -r * distance / 2.0, "gaussian", white_box, distance,
                                _coverage(t * cfg.shots_per_partition, n_exemplars),
                                int(noise_dims) if white_box else 0)
    if mechanism == "clip_softmax":
        s, c = int(cfg.prompts), float(cfg.clip)
        return GenerationDesign("clip_softmax", s, float(cfg.temperature), 2.0 * c * (2 - s) / s, -2.0 * c,
                                "logistic", coverage=_coverage(s * cfg.shots_per_prompt, n_exemplars))
    if mechanism == "mozo":
        return _mozo_design(cfg, n_exemplars)
    if mechanism == "ksa":
        from app.audit.gen_power_ksa import ksa_design

        return ksa_design(cfg, n_exemplars, signals)
    e, c = int(cfg.experts), float(cfg.clip)
    return GenerationDesign("poe", e, 1.0 / float(cfg.inverse_temperature), -(e - 2) * c, -e * c, "logistic",
                            coverage=_coverage(e * cfg.group_size, n_exemplars))


def _mozo_design(cfg: Any, n: int) -> GenerationDesign:
    """mozo's own step law (``mozo.step_log_probs``) on the two decisive tokens: the base is uniform on
    them (mu = 1, or the zero-shot "either" of Prompt 3), lam the public calibration for that base
    (per-expert lam equals it for the design's point masses, the worst case); the log-odds of y1
    with and without the canary, scaled by 1/f at a temperature x f. The scale is the temperature tau
    mozo samples at (q = softmax(statistic / tau), ``mozo.trace_step``), so the gaps are tau x the
    log-odds: the statistic's gap, which a white-box audit divides by the claimed scale."""
    from app.mechanisms import mozo

    e, w = int(cfg.experts), float(cfg.weight)
    cand, base = np.array([0, 1]), np.array([0.5, 0.5])
    lam = mozo.calibrate_lambda(cfg.epsilon_per_token, w, 0.5, 0.5, cfg.lambda_max)
    far = -1e4  # the token a one-shot expert never says
    pad = 0 if cfg.subsample else cfg.weight_experts - e

    def log_odds(z: np.ndarray) -> float:
        lq = mozo.step_log_probs(z, cand, base, lam, w, pad=pad)
        return float(lq[0] - lq[1])
    tau = float(cfg.temperature)
    gw = tau * log_odds(np.array([[0.0, far]] + [[far, 0.0]] * (e - 1)))
    go = tau * log_odds(np.array([[far, 0.0]] * e))
    return GenerationDesign("mozo", e, tau, gw, go, "logistic", coverage=_coverage(e * int(cfg.group_size), n))


def _coverage(used: int, n: int) -> float:
    """The mechanisms partition a uniformly random subset of ``used`` of the n exemplars, so the
    canary (one of the n) is read with probability used / n."""
    return min(1.0, used / max(1, n))


def _split_detection(trials: int, fraction: float, claim: float, confidence: float, delta: float,
                     coverage: float = 1.0) -> float:
    """P(the white-box bound of the counted split exceeds the claim) when the noise-free statistic
    takes one value without the canary and another when the canary is read (probability
    ``coverage``), the threshold separating them: TP ~ Bin(c1, coverage), FP = 0. Paired insertion
    shuffles n/2 members among n trials; the threshold is chosen on the first k = round(n fraction)
    (``estimates.split_selection``), so the members among them are hypergeometric; a split that
    lacks a hypothesis (it grows, or the counted part fails) counts as a miss."""
    half = trials // 2
    n = 2 * half
    k = max(1, int(round(n * fraction)))
    if half < 1 or k >= n:
        return 0.0
    law = stats.hypergeom(n, half, k)
    lo, hi = int(law.ppf(1e-13)), int(law.isf(1e-13))  # the dropped tails are counted as misses
    m = np.arange(max(1, lo - 1), min(k - 1, hi + 1) + 1)  # m = 0 or k: the split grows (a miss)
    c1, c0 = half - m, half - (k - m)
    ok = (c1 >= 1) & (c0 >= 1)
    m, c1, c0 = m[ok], c1[ok], c0[ok]
    if m.size == 0:
        return 0.0
    pm = law.pmf(m)
    # the smallest TP whose bound (FP = 0) exceeds the claim, for every split at once (bisection;
    # the bound increases with TP); c1 + 1 where even TP = c1 does not
    limit = claim * (1 + 1e-9) + 1e-12
    lo_t, hi_t = np.full(m.shape, -1), c1 + 1
    zero = np.zeros(m.shape)
    while np.any(hi_t - lo_t > 1):
        mid = (lo_t + hi_t) // 2
        act = hi_t - lo_t > 1
        eps, _ = bound_curves(np.where(act, mid, 0).astype(float), c1, zero, c0, confidence, delta)
        good = act & (eps > limit)
        bad = act & ~(eps > limit)
        hi_t = np.where(good, mid, hi_t)
        lo_t = np.where(bad, mid, lo_t)
    p_tp = stats.binom.sf(hi_t - 1, c1, min(1.0, coverage))
    return float(min(1.0, np.dot(pm, p_tp)))


def gen_design_power(design: GenerationDesign, *, trials: int, claimed_epsilon: float, confidence: float,
                     threat_models: Sequence[str], delta: float, threshold_fraction: float = 0.5,
                     required: Sequence[str] = DEFAULT_GEN_REQUIRED,
                     min_detection: float = DEFAULT_MIN_DETECTION, only_required: bool = False) -> PowerReport:
    """The power a direct, paired generation audit of ``design`` with ``trials`` trials reports with
    its verdict: the planner and the verdict both call this. ``only_required``: skip the other
    alternatives (the planner's search; ``sufficient`` and ``reasons`` are the same)."""
    for name in required:
        if name not in GEN_ALTERNATIVES or name == "claimed":
            raise ValueError(f"unknown alternative {name!r}; use one of "
                             f"{', '.join(a for a in GEN_ALTERNATIVES if a != 'claimed')}")
    half = trials // 2
    tms = tuple(threat_models)
    conf = per_threat_model_confidence(confidence, len(tms))
    ceiling = ceiling_epsilon(half, half, confidence=conf, delta=delta)
    black = "black-box" in tms
    wb_det = (_split_detection(trials, threshold_fraction, claimed_epsilon, conf, delta, design.coverage)
              if design.white_box and "white-box" in tms else None)
    # ESA white-box: every trial's noise draws (noisy - clean mean) tested against the claimed sigma
    draws = trials * design.noise_dims if design.white_box and "white-box" in tms else 0
    conf_c = conformance_confidence(confidence)
    alts: dict[str, AlternativePower] = {}
    for name, mult in GEN_ALTERNATIVES.items():
        if only_required and name not in required:
            continue
        cands = [alternative_release(design, name, t) for t in alternative_ties(name)]
        dets = [detection_probability(a, b, half, half, claimed_epsilon, confidence=conf, delta=delta)
                if black else 0.0 for a, b in cands]
        i = int(np.argmin(dets))
        a = AlternativePower(name, cands[i][0], cands[i][1], dets[i])
        if mult == 0.0:
            a.note = "deterministic decoding: the argmax of the same aggregate, the worse of a tie-break either way"
            if wb_det is not None:
                a.detection_white_box = wb_det
                a.note += "; white-box: the noise-free margin takes one value per hypothesis (exact split law)"
                a.note += "; its observed noise is all zeros (the noise test flags it)" if draws else ""
        elif mult is None:
            a.note = "the full-context release: the model reads the canary and answers y1, else y0"
        elif name == "claimed":
            a.note = "the claimed mechanism: detection here is a false alarm, <= 1 - confidence by the bound's validity"
        elif design.white_box and draws:
            a.note = ("white-box: the observed noise (noisy - clean mean, trials x dims draws) tested against the "
                      "claimed sigma: the chi-square scale test's exact power (the KS and zero tests only add)")
        elif design.white_box:
            a.note = "black-box detection only: a lower bound of the audit's power (the white-box margin is noisy)"
        if draws and mult is not None:
            a.detection_conformance = (1.0 - conf_c if name == "claimed" else
                                       conformance_power("gaussian", draws, mult, confidence=conf_c))
        elif draws:  # non_private under a white-box esa audit (as gen_noise's evidence treats it)
            a.detection_conformance = conformance_power("gaussian", draws, 0.0, confidence=conf_c)
            a.note += ("; white-box: a release without noise reports its noisy mean equal to its clean one (a zero "
                       "residual: flagged) or no internals (then no white-box verdict, so no pass)")
        alts[name] = a
    noise_free_blind = min(design.release(0.0, t)[0] - design.release(0.0, t)[1] for t in ("positive", "other")) <= 0
    rep = PowerReport(claimed_epsilon, conf, delta, half, half, ceiling, "assumed", design.model_note,
                      {"mechanism": design.mechanism, "units": design.units, "noise_scale": design.scale,
                       "signal_distance": design.signal_distance, "white_box": design.white_box,
                       "release_changes_without_noise": not noise_free_blind, "trials": 2 * half,
                       "noise_draws_tested": draws},
                      alts, tuple(required), min_detection)
    reasons: list[str] = []
    if claimed_epsilon >= ceiling and not (wb_det and wb_det >= min_detection) and not draws:
        reasons.append(f"{half} + {half} counted trials at confidence {conf:.4g} cannot show a bound above "
                       f"{ceiling:.3g}, so a claim of {claimed_epsilon:g} can never be refuted: add trials")
    for name in required:
        if alts[name].detection >= min_detection:
            continue
        msg = f"P(detect {name}) = {alts[name].detection:.3g} < {min_detection:g} with these trials"
        if name == "no_noise" and noise_free_blind and design.mechanism == "ksa":
            msg += (f" (with {design.units} partitions a noise-free ksa releases the same keywords, or none, with and "
                    "without the canary: the planner's designs show the partition counts that can)")
        elif name == "no_noise" and noise_free_blind and not design.white_box:
            msg += (f" (with {design.units} units the canary moves one of them and a noise-free aggregate never "
                    "releases y1: use one unit, or a white-box esa audit)")
        reasons.append(msg)
    if wb_det is not None and 2 * half < (m := min_split_trials(threshold_fraction)):
        reasons.append(f"the white-box threshold split needs {m} trials (both hypotheses on each side of a "
                       f"{threshold_fraction:g} split with probability >= {1 - SPLIT_FAILURE:g}): this design has "
                       f"{2 * half}")
    # A required alternative that the noise test cannot see alone is seen through the design model's
    # release laws: the verdict then checks the model on the observed releases (gen_model_check), and
    # a design needs the trials for that check (the planner's search adds them; one power model).
    rests = [n for n in required if (alts[n].detection_conformance or 0.0) < min_detection]
    if rests:
        need = pairs_needed(alternative_release(design, "claimed"), 1.0 - confidence)
        rep.design["model_check_pairs_needed"] = need
        if half < need:
            reasons.append(f"a pass against {', '.join(rests)} rests on the design model, and a test of its claimed "
                           f"law needs {need} trials per hypothesis to see a shift of {MODEL_CHECK_DELTA:g} in a "
                           f"share of y1: add trials (this design has {half})")
    rep.reasons = reasons
    rep.sufficient = not reasons
    return rep


def claim_of(mechanism: str, params: Mapping[str, Any], n_exemplars: int, max_tokens: int) -> tuple[float, float]:
    """(epsilon, delta) the mechanism claims for one answer with these params (its own ``cost``)."""
    from app.mechanisms.generation import GenerationRequest, get_generation_mechanism

    p = dict(params)
    priv = {k: p.pop(k) for k in ("epsilon", "delta", "adjacency") if k in p}
    req = GenerationRequest.build([("x", "y")] * max(1, n_exemplars), "q", epsilon=priv.get("epsilon"),
                                  delta=priv.get("delta", 1e-5), adjacency=priv.get("adjacency", "replace-one"),
                                  max_tokens=max_tokens, params=p)
    c = get_generation_mechanism(mechanism).cost(req)
    return float(c.get("epsilon") or 0.0), float(c.get("delta") or 0.0)


def assess_generation_power(result: Any, target: Any, n_exemplars: int, claimed_epsilon: float, *,
                            required: Sequence[str] = DEFAULT_GEN_REQUIRED,
                            min_detection: float = DEFAULT_MIN_DETECTION,
                            design: GenerationDesign | None = None) -> PowerReport:
    """The power report of a finished generation campaign (``app.audit.campaign``) against the
    claim: ``gen_design_power`` with the campaign's own design (mechanism params, answer length,
    trials, threat models, threshold split) and the signal distance measured by the audit's
    embedder (``design``: that design where the caller already built it with ``assess_design``).
    Raises ``NoPowerModel`` (with why) where the design model does not apply."""
    require_modelled(result, target)
    cfg = result.config
    design = design if design is not None else assess_design(result, target, n_exemplars)
    tms = tuple(result.estimates)
    return gen_design_power(design, trials=len(result.trials), claimed_epsilon=claimed_epsilon,
                            confidence=result.confidence, threat_models=tms, delta=result.delta,
                            threshold_fraction=cfg.threshold_fraction, required=required,
                            min_detection=min_detection)


def require_modelled(result: Any, target: Any) -> None:
    """Raise ``NoPowerModel`` (with why) where the design model does not cover this campaign."""
    if getattr(result.attack, "decision", "signal") != "signal":
        raise NoPowerModel("the repeat attack's score is thresholded: the design model covers the signal query")
    if result.config.mode != "direct" or result.config.insertion != "paired":
        raise NoPowerModel("the design model covers direct, paired trials")
    if getattr(target, "defence", "none") == "L3":
        raise NoPowerModel("the L3 judge replaces answers after the noise")


def assess_design(result: Any, target: Any, n_exemplars: int) -> GenerationDesign:
    """The design model of a finished campaign's target (its mechanism, params and answer length;
    the signal distance measured by its embedder; ESA's noise draws where its conformance ran)."""
    mech = target.mechanism if isinstance(target.mechanism, str) else target.mechanism.name
    a = result.attack
    distance = signal_distance(target.decider.embedder, a.labels[0], a.labels[1]) if mech == "esa" else None
    dims = embedding_dims(target.decider.embedder, a.labels[0]) if getattr(result, "conformance", None) else 0
    return generation_design(mech, target.params, n_exemplars, max_tokens=int(target.max_tokens),
                             white_box="white-box" in result.estimates, distance=distance,
                             signals=tuple(a.labels[:2]) if mech == "ksa" else None, noise_dims=dims)
