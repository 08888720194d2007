"""A canary membership-inference campaign: the same code for every target.

    target = MechanismTarget(lm, "rnm", {"epsilon": 1, "partitions": 4})
    res = run_campaign(target, exemplars, canary, "inquiry", task_labels=labels,
                       template=template, config=CampaignConfig(trials=40), rng=rng)
    res.epsilon, res.estimates["white-box"].epsilon_gdp

Modes:

* ``direct``: every trial asks the target (ContextLeak Algorithm 1; the
  tight-auditing pipeline of Section 3.2). Black-box decisions need no
  threshold and count every trial; white-box ones choose the threshold on a
  held-out share of the trials.
* ``bootstrap``: tight-auditing Algorithm 1 (``app.audit.bootstrap``): 2 x n_llm
  calls for clean votes of the fixed pair C1/C0, then n_sample simulated
  trials per hypothesis.

The headline ``epsilon`` is the largest rigorous Clopper-Pearson bound over
the threat models evaluated, each computed at confidence 1 - (1 - c)/k
(Bonferroni over the k threat models), so that the maximum holds at c.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from app.audit.bootstrap import DEFAULT_N_SAMPLE, BootstrapResult, bootstrap_audit
from app.audit.canaries import Canary
from app.audit.conformance import ConformanceResult, ReleaseFloorResult, noise_conformance, release_floor
from app.audit.estimates import (
    STATISTICS,
    THREAT_MODELS,
    Estimates,
    estimates_from_guesses,
    margin_statistic,
    reference_vector_statistic,
    split_selection,
    white_box_estimates,
)
from app.audit.gen_queries import GenerationAttack, GenerationStrategy, resolve_generation_query
from app.audit.insertion import Exemplar, exemplar_tuple, paired_contexts, plan_trials
from app.audit.noise import VotingNoise
from app.audit.queries import AttackQuery, QueryStrategy, resolve_query
from app.audit.target_info import gaussian_votes, mechanism_name, noise_kind, target_noise, target_partitions

if TYPE_CHECKING:
    from app.audit.power import PowerReport

Progress = Callable[[float, str], None]
MODES = ("direct", "bootstrap")


@dataclass(frozen=True)
class CampaignConfig:
    trials: int = 40
    insertion: str = "paired"  # contextleak | paired (direct mode; bootstrap always uses the pair)
    threat_models: tuple[str, ...] = THREAT_MODELS
    mode: str = "direct"
    confidence: float = 0.95
    delta: float | None = None  # None: the target's delta
    threshold_fraction: float = 0.5
    objective: str = "epsilon"  # threshold objective: epsilon | mu
    statistic: str = "margin"  # white-box: margin (tight-auditing 3.2) | positive (ContextLeak A.3)
    #   | reference_vector (generation: Choi et al., ContextLeak A.4)
    n_llm: int = 16  # bootstrap: clean vote vectors per hypothesis
    n_sample: int = DEFAULT_N_SAMPLE  # bootstrap: simulated trials per hypothesis
    signals: tuple[str, str] | None = None  # generation: (y1, y0); None = the strategy's or the default pair

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        bad = [t for t in self.threat_models if t not in THREAT_MODELS]
        if bad or not self.threat_models:
            raise ValueError(f"threat_models must be a non-empty subset of {THREAT_MODELS}")
        if not 0.0 < self.confidence < 1.0:
            raise ValueError("confidence must lie in (0, 1)")
        if self.statistic not in STATISTICS:
            raise ValueError(f"statistic must be one of {STATISTICS}")
        if self.trials < 2 or self.n_llm < 1 or self.n_sample < 4:
            raise ValueError("trials >= 2, n_llm >= 1 and n_sample >= 4 are needed")


@dataclass
class CampaignResult:
    target: str
    attack: AttackQuery
    config: CampaignConfig
    estimates: dict[str, Estimates]
    epsilon: float  # headline rigorous lower bound (max over threat models, Bonferroni)
    delta: float
    confidence: float
    epsilon_claimed: float | None
    delta_claimed: float | None
    model_calls: int  # calls to the target (direct) or to its clean-vote path (bootstrap)
    naive_model_calls: int | None  # what running every bootstrap trial would have cost (prompts)
    seconds: float
    trials: list[dict[str, Any]] = field(default_factory=list)
    statistic_with: np.ndarray | None = None
    statistic_without: np.ndarray | None = None
    threshold: float | None = None
    bootstrap: BootstrapResult | None = None
    notes: list[str] = field(default_factory=list)
    # For the power report (app.audit.power): clean votes per hypothesis, observed or None.
    votes_with: np.ndarray | None = None
    votes_without: np.ndarray | None = None
    conformance: ConformanceResult | None = None  # white-box noise conformance (app.audit.conformance)
    release_floor: ReleaseFloorResult | None = None  # black-box: releases too deterministic for the noise

    @property
    def violation(self) -> bool | None:
        if self.epsilon_claimed is None:
            return None
        return self.epsilon > self.epsilon_claimed * (1 + 1e-9) + 1e-12

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target, "attack": self.attack.to_dict(), "config": asdict(self.config),
            "estimates": {k: v.to_dict() for k, v in self.estimates.items()},
            "epsilon": self.epsilon, "delta": self.delta, "confidence": self.confidence,
            "epsilon_claimed": self.epsilon_claimed, "delta_claimed": self.delta_claimed,
            "violation": self.violation, "model_calls": self.model_calls,
            "naive_model_calls": self.naive_model_calls, "seconds": self.seconds, "threshold": self.threshold,
            "bootstrap": None if self.bootstrap is None else self.bootstrap.to_dict(), "notes": self.notes,
            "conformance": None if self.conformance is None else self.conformance.to_dict(),
            "release_floor": None if self.release_floor is None else self.release_floor.to_dict(),
        }


def _noop(_f: float, _m: str) -> None:
    return None


def run_campaign(
    target: Any,
    exemplars: Sequence[tuple[str, str]],
    canary: Canary,
    strategy: str | QueryStrategy | GenerationStrategy | Mapping[str, Any],
    *,
    task_labels: Sequence[str],
    template: Mapping[str, Any] | None = None,
    config: CampaignConfig = CampaignConfig(),
    rng: np.random.Generator,
    progress: Progress | None = None,
) -> CampaignResult:
    t0 = time.perf_counter()
    report = progress or _noop
    ex = [exemplar_tuple(e) for e in exemplars]
    generation = getattr(target, "task", "classification") == "generation"
    attack: AttackQuery
    if generation:
        if isinstance(strategy, QueryStrategy):
            raise ValueError(f"unknown generation query {strategy!r}: a QueryStrategy is for classification targets")
        attack = resolve_generation_query(strategy, canary, config.signals)
    else:
        if config.statistic == "reference_vector":
            raise ValueError("statistic reference_vector is for generation targets (a noisy mean embedding)")
        if isinstance(strategy, GenerationStrategy):
            raise ValueError(f"unknown query strategy {strategy!r}: a GenerationStrategy is for generation targets")
        attack = resolve_query(strategy, canary, task_labels, ex, template)
    eps_claimed, delta_claimed = target.claimed(len(ex))
    delta = float(config.delta if config.delta is not None else (delta_claimed or 0.0))
    tms = tuple(t for t in config.threat_models if t == "black-box" or target.white_box)
    if not tms:
        raise ValueError(f"target {target.name} offers no threat model of {config.threat_models}")
    from app.audit.power import per_threat_model_confidence

    per_conf = per_threat_model_confidence(config.confidence, len(tms))  # Bonferroni over threat models
    notes: list[str] = []
    if len(tms) > 1:
        notes.append(f"each threat model's bound at confidence {per_conf:g} (Bonferroni), so that the "
                     f"headline maximum holds at {config.confidence:g}")
    if attack.strategy in ("gap", "brainwash") and canary.kind != "heldout":
        notes.append(f"{attack.strategy} is meant for a held-out canary; the {canary.kind} canary's assigned "
                     "label plays the true label")
    if "white-box" in tms and config.statistic == "positive" and noise_kind(target, len(ex)) == "gumbel":
        notes.append("white-box statistic 'positive' reads one Gumbel-noised score, which the claim does not "
                     "cover (only the argmax is private); a white-box bound above the claim is not by itself a "
                     "violation here: use 'margin'")
    if config.mode == "bootstrap" and isinstance(attack, GenerationAttack):  # generation targets
        res = _gen_bootstrap(target, ex, attack, config, rng, report, tms, per_conf, delta, eps_claimed)
    elif config.mode == "bootstrap":
        res = _bootstrap(target, ex, attack, config, rng, report, tms, per_conf, delta, eps_claimed)
    else:
        res = _direct(target, ex, attack, config, rng, report, tms, per_conf, delta, eps_claimed)
    estimates, extras = res
    epsilon = max(e.epsilon_lower for e in estimates.values())
    report(1.0, "campaign done")
    return CampaignResult(
        target=target.name, attack=attack, config=config, estimates=estimates, epsilon=float(epsilon), delta=delta,
        confidence=config.confidence, epsilon_claimed=eps_claimed, delta_claimed=delta_claimed,
        seconds=time.perf_counter() - t0, notes=notes + extras.pop("notes", []), **extras,
    )


def _child_rngs(rng: np.random.Generator, n: int) -> list[np.random.Generator]:
    seeds = rng.integers(0, 2**63 - 1, size=n)
    return [np.random.default_rng(int(s)) for s in seeds]


# What the mode functions return: the estimates per threat model, and CampaignResult's other fields.
ModeResult = tuple[dict[str, Estimates], dict[str, Any]]


def _direct(target: Any, ex: list[Exemplar], attack: AttackQuery, config: CampaignConfig, rng: np.random.Generator,
            report: Progress, tms: tuple[str, ...], conf: float, delta: float,
            eps_theory: float | None) -> ModeResult:
    plan = plan_trials(ex, attack.canary.exemplar(), config.trials, config.insertion, rng)
    rngs = _child_rngs(rng, len(plan))
    labels: list[str] = []
    scores: list[np.ndarray | None] = []
    bb_scores: list[float | None] = []
    vectors: list[np.ndarray | None] = []
    cleans: list[np.ndarray | None] = []
    observed = []  # generation white-box: ESA's noise conformance reads the noisy and clean means
    for i, (ctx, g) in enumerate(zip(plan.contexts, rngs)):
        obs = target.observe(ctx, attack, g)
        observed.append(obs)
        labels.append(obs.label)
        scores.append(obs.noisy_scores)
        cleans.append(getattr(obs, "clean_votes", None))
        bb_scores.append(getattr(obs, "score", None))
        vectors.append(getattr(obs, "noisy_vector", None))
        if (i + 1) % max(1, len(plan) // 100) == 0 or i + 1 == len(plan):  # at most ~100 progress points
            report(0.95 * (i + 1) / len(plan), f"trial {i + 1} of {len(plan)}")
    members = plan.members
    guesses = np.array([lab == attack.positive for lab in labels])
    k = len(attack.labels)
    estimates: dict[str, Estimates] = {}
    gauss_bb = gaussian_votes(target, len(ex)) and k == 2
    similarity = getattr(attack, "decision", "") == "similarity"
    bb_stat = None
    if "black-box" in tms and similarity:
        # Repeat attack: a score of the released text, thresholded on held-out trials like white-box.
        bb_stat = np.array(bb_scores, dtype=float)
        estimates["black-box"] = white_box_estimates(
            bb_stat, members, confidence=conf, delta=delta, epsilon_theory=eps_theory, gdp_applicable=False,
            threshold_fraction=config.threshold_fraction, objective=config.objective, threat_model="black-box",
            assumptions=["black-box score: minus the embedding distance of the answer to the canary's second half"])
    elif "black-box" in tms:
        estimates["black-box"] = estimates_from_guesses(
            guesses, members, threat_model="black-box", confidence=conf, delta=delta, epsilon_theory=eps_theory,
            gdp_applicable=gauss_bb, assumptions=["guess: released label == the query's positive label (attack.positive)"])
    stat = None
    tau = None
    if "white-box" in tms:
        if config.statistic == "reference_vector":
            vector_rows = [v for v in vectors if v is not None]
            if len(vector_rows) < len(vectors):
                raise ValueError(f"target {target.name} returned no noisy mean: the reference vector needs internals")
            sel = split_selection(len(members), config.threshold_fraction, members)
            stat = reference_vector_statistic(np.vstack(vector_rows), members, sel)
            gdp = True  # a fixed projection of Gaussian noise (ESA's only noise)
        else:
            score_rows = [s for s in scores if s is not None]
            if len(score_rows) < len(scores):
                raise ValueError(f"target {target.name} returned no noisy scores: white-box needs internals")
            stat = margin_statistic(np.vstack(score_rows), attack.positive_index, attack.negative_index,
                                    config.statistic)
            gdp = gaussian_votes(target, len(ex)) and not isinstance(attack, GenerationAttack)
        e = white_box_estimates(stat, members, confidence=conf, delta=delta, epsilon_theory=eps_theory,
                                gdp_applicable=gdp, threshold_fraction=config.threshold_fraction,
                                objective=config.objective,
                                assumptions=[f"white-box statistic: {config.statistic}"])
        estimates["white-box"] = e
        tau = e.threshold
    trials: list[dict[str, Any]] = []
    for i, (m, lab) in enumerate(zip(members, labels)):
        row: dict[str, Any] = {"trial": i, "member": bool(m), "released": lab}
        if bb_stat is not None:
            row["black_box_score"] = float(bb_stat[i])
        else:
            row["black_box_guess"] = bool(lab == attack.positive)
        if stat is not None:
            row["statistic"] = float(stat[i])
        trials.append(row)
    extras: dict[str, Any] = {}
    noise = None if generation_attack(attack) else target_noise(target, len(ex))
    released = [attack.labels.index(lab) if lab in attack.labels else -1 for lab in labels]
    # An L3 judge may replace a release after the noise: the release is no longer the argmax.
    judged = getattr(target, "defence", "none") == "L3"
    clean_rows = [c for c in cleans if c is not None]
    noisy_rows = [s for s in scores if s is not None]
    if noise is not None and cleans and len(clean_rows) == len(cleans):
        cv = np.vstack(clean_rows)
        extras["votes_with"], extras["votes_without"] = cv[members], cv[~members]
        if len(noisy_rows) == len(scores):
            extras["conformance"] = noise_conformance(cv, np.vstack(noisy_rows), None if judged else released,
                                                      _claimed(noise),
                                                      confidence=CONFORMANCE_CONFIDENCE(config.confidence))
    if generation_attack(attack) and "white-box" in tms:
        from app.audit.gen_targets import generation_conformance

        extras["conformance"] = generation_conformance(target, len(ex), observed, config.confidence)
    parts = target_partitions(target, len(ex))
    if noise is not None and len(attack.labels) >= 2 and parts and mechanism_name(target) == "rnm" and not judged:
        extras["release_floor"] = release_floor(released, attack.labels, _claimed(noise), parts,
                                                confidence=CONFORMANCE_CONFIDENCE(config.confidence))
    return estimates, {
        **extras, "model_calls": len(plan), "naive_model_calls": None, "trials": trials,
        "statistic_with": None if stat is None else stat[members],
        "statistic_without": None if stat is None else stat[~members], "threshold": tau,
    }


def CONFORMANCE_CONFIDENCE(confidence: float) -> float:  # noqa: N802
    """``app.audit.conformance.conformance_confidence`` (the planner calls the same)."""
    from app.audit.conformance import conformance_confidence

    return conformance_confidence(confidence)


def generation_attack(attack: AttackQuery) -> bool:
    return isinstance(attack, GenerationAttack)


def _claimed(noise: VotingNoise) -> VotingNoise:
    from app.audit.power import claimed_noise

    return claimed_noise(noise)


def _bootstrap(target: Any, ex: list[Exemplar], attack: AttackQuery, config: CampaignConfig,
               rng: np.random.Generator, report: Progress, tms: tuple[str, ...], conf: float, delta: float,
               eps_theory: float | None) -> ModeResult:
    vw, vo = _clean_calls(target, ex, attack, config, rng, report)
    noise = target.noise(len(ex))
    b = bootstrap_audit(np.array(vw), np.array(vo), noise, attack.positive_index, attack.negative_index, rng=rng,
                        n_sample=config.n_sample, threat_models=tms, confidence=conf, delta=delta,
                        epsilon_theory=eps_theory, threshold_fraction=config.threshold_fraction,
                        objective=config.objective, statistic=config.statistic)
    partitions = target_partitions(target, len(ex))
    trials = [{"call": i, "member": i % 2 == 0, "clean_votes": (vw if i % 2 == 0 else vo)[i // 2].tolist()}
              for i in range(2 * config.n_llm)]
    # tight-auditing 3.5: trials x 2 hypotheses x partitions prompts if every trial ran the model.
    est, extras = _bootstrap_result(b, config, partitions, trials)
    extras["votes_with"], extras["votes_without"] = np.array(vw), np.array(vo)
    released = getattr(target, "released_log", None)
    if released:  # a remote gateway's own releases during the clean calls: test ITS noise
        rel, clean, noisy = zip(*released)
        if all(x is not None for x in noisy):
            extras["conformance"] = noise_conformance(
                np.vstack(clean), np.vstack(noisy), [attack.labels.index(x) if x in attack.labels else -1 for x in rel],
                _claimed(noise), confidence=CONFORMANCE_CONFIDENCE(config.confidence))
    return est, extras


def _clean_calls(target: Any, ex: list[Exemplar], attack: AttackQuery, config: CampaignConfig,
                 rng: np.random.Generator, report: Progress) -> tuple[list[Any], list[Any]]:
    """Algorithm 1 lines 1-3: the fixed pair C1 (canary in) / C0, then n_llm noise-free calls on
    each, alternating. What a call returns is the target's: vote vectors (np.ndarray), or
    ``app.audit.gen_targets.CleanDraw`` for generation targets."""
    c1, c0 = paired_contexts(ex, attack.canary.exemplar(), int(rng.integers(len(ex))))
    with_: list[Any] = []
    without: list[Any] = []
    rngs = _child_rngs(rng, 2 * config.n_llm)
    for i in range(config.n_llm):
        with_.append(target.clean_votes(c1, attack, rngs[2 * i]))
        without.append(target.clean_votes(c0, attack, rngs[2 * i + 1]))
        report(0.8 * (i + 1) / config.n_llm, f"clean calls {2 * (i + 1)} of {2 * config.n_llm}")
    report(0.85, f"bootstrap: {config.n_sample} simulated trials per hypothesis")
    return with_, without


def _bootstrap_result(b: BootstrapResult, config: CampaignConfig, prompts_per_trial: int | None,
                      trials: list[dict[str, Any]]) -> ModeResult:
    wb = b.estimates.get("white-box")
    return b.estimates, {
        "model_calls": 2 * config.n_llm,
        "naive_model_calls": None if prompts_per_trial is None else config.n_sample * 2 * prompts_per_trial,
        "trials": trials, "statistic_with": b.statistic_with, "statistic_without": b.statistic_without,
        "threshold": None if wb is None else wb.threshold, "bootstrap": b, "notes": list(b.assumptions),
    }


def _gen_bootstrap(target: Any, ex: list[Exemplar], attack: GenerationAttack, config: CampaignConfig,
                   rng: np.random.Generator, report: Progress, tms: tuple[str, ...], conf: float, delta: float,
                   eps_theory: float | None) -> ModeResult:
    """Algorithm 1 for ESA (``app.audit.gen_bootstrap``): 2 x n_llm noise-free calls on the fixed
    pair C1/C0, then n_sample simulated draws per hypothesis."""
    from app.audit.gen_bootstrap import esa_bootstrap

    dw, do = _clean_calls(target, ex, attack, config, rng, report)
    statistic = "reference_vector" if config.statistic == "reference_vector" else "margin"
    b = esa_bootstrap(dw, do, target.decider.points(attack), attack.decision, rng=rng, n_sample=config.n_sample,
                      threat_models=tms, statistic=statistic, confidence=conf, delta=delta,
                      epsilon_theory=eps_theory, threshold_fraction=config.threshold_fraction,
                      objective=config.objective)
    trials: list[dict[str, Any]] = [{"call": i, "member": i % 2 == 0} for i in range(2 * config.n_llm)]
    return _bootstrap_result(b, config, target.prompts_per_call(len(ex)), trials)


def summary(result: CampaignResult) -> dict[str, Any]:
    """Flat scalars for tables and CSV."""
    out: dict[str, Any] = {"target": result.target, "strategy": result.attack.strategy,
                           "canary_kind": result.attack.canary.kind, "epsilon": result.epsilon,
                           "epsilon_claimed": result.epsilon_claimed, "delta": result.delta,
                           "model_calls": result.model_calls}
    for tm, e in result.estimates.items():
        key = tm.replace("-", "_")
        for f in ("tpr", "fpr", "accuracy", "epsilon_lower", "accuracy_epsilon", "gdp_mu_lower", "epsilon_gdp"):
            v = getattr(e, f)
            out[f"{key}_{f}"] = None if v is None or (isinstance(v, float) and math.isnan(v)) else v
    return out


def assess_power(result: CampaignResult, target: Any, n_exemplars: int, claimed_epsilon: float, *,
                 required: Sequence[str] | None = None, min_detection: float | None = None) -> PowerReport | None:
    """The power report (``app.audit.power``) of a finished classification campaign against
    ``claimed_epsilon``, or None where the target has no noise model (generation targets)."""
    from app.audit.conformance import conformance_power
    from app.audit.power import (
        ALTERNATIVES,
        ASSUMED_VOTE_NOTE,
        DEFAULT_MIN_DETECTION,
        DEFAULT_REQUIRED,
        claimed_noise,
        design_votes,
        power_report,
    )

    noise = target_noise(target, n_exemplars)
    if noise is None or generation_attack(result.attack):
        return None
    noise = claimed_noise(noise)
    attack = result.attack
    parts = target_partitions(target, n_exemplars)
    if (result.votes_with is not None and result.votes_without is not None and len(result.votes_with)
            and len(result.votes_without)):
        vw, vo, model = result.votes_with, result.votes_without, "observed"
        model_note = f"the clean votes of {len(vw) + len(vo)} calls, as the target reported them"
    else:
        if mechanism_name(target) != "rnm":
            return None  # the one-vote design model is in vote counts; poe's scores are lam U
        vw, vo = design_votes(len(attack.labels), parts or 1, attack.positive_index, attack.negative_index)
        model, model_note = "assumed", ASSUMED_VOTE_NOTE
    bb = result.estimates.get("black-box")
    remote_bootstrap = result.bootstrap is not None and getattr(target, "released_log", None) is not None
    if result.bootstrap is not None:  # the bound counts n_sample simulated trials per hypothesis
        n1 = n0 = int(result.config.n_sample)
        conf = bb.confidence if bb is not None else 1.0 - (1.0 - result.confidence) / len(result.estimates)
    elif bb is not None:
        n1, n0, conf = bb.tp + bb.fn, bb.fp + bb.tn, bb.confidence
    else:  # white-box only: the black-box power of the same trials is a lower bound of its power
        n1 = n0 = max(1, len(result.trials) // 2)
        conf = result.confidence
    conf_power = None
    c = result.conformance
    if c is not None:
        conf_power = {name: (c.alpha if name == "claimed" else conformance_power(
            c.noise, c.residuals, spec["noise_multiplier"], confidence=1.0 - c.alpha, winner_only=spec["winner_only"]))
            for name, spec in ALTERNATIVES.items()}
    rep = power_report(noise, vw, vo, attack.positive_index, n_members=n1, n_nonmembers=n0,
                       claimed_epsilon=claimed_epsilon, confidence=conf, delta=result.delta, vote_model=model,
                       vote_model_note=model_note, required=tuple(required or DEFAULT_REQUIRED),
                       min_detection=DEFAULT_MIN_DETECTION if min_detection is None else min_detection,
                       conformance=conf_power, partitions=parts,
                       floor_threshold=None if result.release_floor is None or result.bootstrap is not None
                       else result.release_floor.threshold)
    if remote_bootstrap:
        # The bootstrap's bound is on the auditor's re-applied noise: it cannot see the gateway's.
        for name, a in rep.alternatives.items():
            if name != "claimed":
                a.detection_bound = 0.0
                a.note = "bootstrap bound: the auditor's noise, not the gateway's; conformance only"
        rep.reasons = [r for r in rep.reasons if not r.startswith("P(detect")]
        for name in rep.required:
            if rep.alternatives[name].detection < rep.min_detection:
                rep.reasons.append(f"P(detect {name}) = {rep.alternatives[name].detection:.3g} < "
                                   f"{rep.min_detection:g}: the noise conformance test needs more clean calls")
        rep.sufficient = not rep.reasons
    return rep
