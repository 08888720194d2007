"""Audit planning: the design and number of trials that detect stated alternatives.

For a classification target with a noise model (``rnm``), a claim and
broken-implementation alternatives (``app.audit.power``), find the smallest
number of direct-mode trials whose black-box tests (the rigorous bound, or the
release floor of ``app.audit.conformance``) flag each alternative with
probability >= ``min_detection`` (the vote model of
tight-auditing Lemma 3.1: the best case for the auditor), over candidate
partition counts; and, where the target reports its internals, the calls the
noise conformance test (``app.audit.conformance``) needs.

One power model: every black-box prediction here is
``app.audit.power.design_power``, the same ``power_report`` with the same inputs
(labels of the real query, counted trials, Bonferroni confidence, release floor
threshold, worst-case tie-breaking) that the verdict reports, and a design is
proposed only if that report is ``sufficient`` -- the verdict could say pass --
and the audit's own dataset can run it (partitions x shots <= exemplars).

Validity: the plan fixes the number of trials BEFORE the audit runs, and the
audit never stops early, so the Clopper-Pearson confidence holds as stated (no
sequential testing, no peeking; ``app.audit.sequential`` is the anytime-valid
alternative). The predicted detection probabilities are exact for the vote
model; a model that does not copy the canary lowers them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from app.audit.conformance import conformance_power
from app.audit.eprocess import black_box_floor
from app.audit.noise import VotingNoise
from app.audit.power import ALTERNATIVES, PowerReport, alternative_noise, claimed_noise, design_power

MAX_TRIALS = 200_000


@dataclass
class DesignPlan:
    partitions: int
    threat_model: str  # black-box (the bound) | white-box (noise conformance + bound)
    trials: int | None  # None: infeasible within max_trials
    detection: dict[str, float]
    ceiling_epsilon: float | None
    model_calls: int | None  # prompts to the target's model (trials x partitions)
    seconds: float | None  # trials x seconds_per_trial, when a speed was given
    reasons: list[str] = field(default_factory=list)
    shots_per_partition: int | None = None
    labels: int | None = None
    runnable: bool = True  # this audit (dataset, target, insertion) can run it as configured
    requires: str | None = None  # what the config must change for it to run

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan_black_box(noise: VotingNoise, *, labels: int, partitions: int, claimed_epsilon: float, confidence: float,
                   delta: float, alternatives: Sequence[str], min_detection: float = 0.9, threat_models: int = 1,
                   floor: bool = True, max_trials: int = MAX_TRIALS, seconds_per_trial: float | None = None,
                   shots_per_partition: int | None = None, moved: int = 1) -> DesignPlan:
    """The smallest even trial count (paired insertion: half members) at which the verdict's own
    power report (``design_power``) is sufficient; doubling then bisection (the report's detection
    grows with trials up to the bound's discreteness; the result is re-checked). ``floor``: the
    release floor test runs (rnm queries); ``threat_models``: how many the campaign
    evaluates (its Bonferroni split of the confidence)."""
    def rep(n: int) -> PowerReport:
        return design_power(noise, labels=labels, partitions=partitions, trials=n, claimed_epsilon=claimed_epsilon,
                            confidence=confidence, threat_models=threat_models, delta=delta, floor=floor,
                            required=alternatives, min_detection=min_detection, moved=moved)

    def plan(n: int | None, r: PowerReport, reasons: list[str]) -> DesignPlan:
        return DesignPlan(partitions, "black-box", n, {a: r.alternatives[a].detection for a in alternatives},
                          r.ceiling_epsilon, None if n is None else n * partitions,
                          None if n is None or seconds_per_trial is None else n * seconds_per_trial, reasons,
                          shots_per_partition, labels)

    top = rep(max_trials)
    if not top.sufficient:
        return plan(None, top, [f"not within {max_trials} trials: " + "; ".join(top.reasons)])
    lo, hi = 0, 64
    while hi < max_trials and not rep(hi).sufficient:
        lo, hi = hi, min(max_trials, hi * 2)
    while hi - lo > max(2, hi // 100):  # 1% resolution is plenty for a plan
        mid = (lo + hi) // 2 // 2 * 2
        if mid <= lo:
            break
        if rep(mid).sufficient:
            hi = mid
        else:
            lo = mid
    r = rep(hi)
    if not r.sufficient:  # detection is not monotone at the bound's steps: the top count is
        hi, r = max_trials, top
    return plan(hi, r, [])


def plan_many_votes(noise: VotingNoise, **kw: Any) -> DesignPlan:
    """The plan of a canary that moves every partition's vote (one canary per partition, or a query
    every partition answers with the canary's label): with the canary all T vote the canary label,
    without none do, so even a noise-free argmax changes. Not an insertion this service runs: the
    numbers for the advice where no one-vote black-box design can decide."""
    d = plan_black_box(noise, moved=int(kw["partitions"]), **kw)
    d.runnable = False
    d.requires = "a canary in every partition (this service inserts one canary, which moves one vote)"
    return d


def plan_white_box(noise: VotingNoise, *, labels: int, partitions: int, alternatives: Sequence[str],
                   confidence: float, min_detection: float = 0.9,
                   seconds_per_trial: float | None = None) -> DesignPlan:
    """Calls for the noise conformance test: each call reports ``labels`` residuals."""
    nz = claimed_noise(noise)
    calls = 10  # >= 5 per hypothesis for the white-box threshold split
    det: dict[str, float] = {}
    while calls <= 100_000:
        det = {a: conformance_power(nz.kind, calls * labels, ALTERNATIVES[a]["noise_multiplier"],
                                    confidence=confidence, winner_only=ALTERNATIVES[a]["winner_only"])
               for a in alternatives}
        if all(v >= min_detection for v in det.values()):
            break
        calls = int(math.ceil(calls * 1.25))
    else:
        return DesignPlan(partitions, "white-box", None, det, None, None, None, ["not within 100000 calls"])
    return DesignPlan(partitions, "white-box", calls, det, None, calls * partitions,
                      None if seconds_per_trial is None else calls * seconds_per_trial)


def plan_audit(noise_for: Callable[[int, int], VotingNoise], *, labels: int, exemplars: int, partitions: int,
               shots_per_partition: int, claimed_epsilon: float, confidence: float, delta: float,
               alternatives: Sequence[str], min_detection: float = 0.9, threat_models: int = 1, floor: bool = True,
               white_box: bool = False, candidates: Sequence[int] = tuple(range(1, 9)),
               max_trials: int = MAX_TRIALS, seconds_per_trial: float | None = None) -> dict[str, Any]:
    """The configured design's plan, and the cheapest design this audit can run whose verdict could
    say pass. ``noise_for(T, shots)``: the mechanism's noise with T partitions of ``shots`` exemplars
    (its calibration may depend on both); ``exemplars``: the audited context's size (dataset.size),
    so a candidate keeps T x shots <= exemplars (the configured shots where they fit, else
    exemplars // T); ``labels``: the real query's label count; ``white_box``: the target offers
    internals (the noise conformance test)."""
    for a in alternatives:
        if a not in ALTERNATIVES or a == "claimed":
            raise ValueError(f"unknown alternative {a!r}")
    common: dict[str, Any] = {"labels": labels, "claimed_epsilon": claimed_epsilon, "confidence": confidence,
                              "delta": delta, "alternatives": list(alternatives), "min_detection": min_detection,
                              "max_trials": max_trials}

    def black_box(t: int, shots: int) -> DesignPlan:
        return plan_black_box(noise_for(t, shots), partitions=t, threat_models=threat_models, floor=floor,
                              seconds_per_trial=seconds_per_trial, shots_per_partition=shots, **common)

    if partitions * shots_per_partition > exemplars:
        configured = DesignPlan(partitions, "black-box", None, {}, None, None, None,
                                [f"cannot run: partitions x shots_per_partition = {partitions} x "
                                 f"{shots_per_partition} = {partitions * shots_per_partition} > {exemplars} "
                                 "exemplars (dataset.size)"], shots_per_partition, labels, runnable=False,
                                requires="partitions x shots_per_partition <= dataset.size")
    else:
        alternative_noise(noise_for(partitions, shots_per_partition), alternatives[0])  # validates the noise
        configured = black_box(partitions, shots_per_partition)
    designs = [configured]
    for t in candidates:
        if t > exemplars:
            continue
        shots = shots_per_partition if t * shots_per_partition <= exemplars else exemplars // t
        if (t, shots) != (partitions, shots_per_partition):
            designs.append(black_box(t, shots))
    if configured.runnable:
        wb = plan_white_box(noise_for(partitions, shots_per_partition), labels=labels, partitions=partitions,
                            alternatives=alternatives, confidence=confidence, min_detection=min_detection,
                            seconds_per_trial=seconds_per_trial)
        wb.shots_per_partition, wb.labels = shots_per_partition, labels
        if not white_box:
            wb.runnable, wb.requires = False, "target.white_box: true (the gateway returns its internals)"
        designs.append(wb)
    feasible = [d for d in designs if d.runnable and d.trials is not None]
    best = min(feasible, key=lambda d: (d.model_calls or 0, d.trials or 0)) if feasible else None
    notes = ["fixed sample size: the trials are planned before the audit and it never stops early, so the "
             "Clopper-Pearson confidence holds as stated",
             "black-box detection assumes the canary's partition votes the canary label (tight-auditing Lemma 3.1); "
             "a model that does not copy it lowers the real power",
             "a design is proposed only where the verdict's own power report (app.audit.power.design_power) "
             "could say pass: every required alternative detected and the claim below the ceiling"]
    bb_floor, why = black_box_floor(claimed_epsilon, delta, confidence)
    notes.append(why)
    if "winner_only" in alternatives and not white_box and floor:
        if labels == 2:
            # a decoy label (no exemplar carries it) is never released by winner-only noise: the release floor
            # finds it (docs/audit.md#decoy-labels); the same designs with one more label, for the advice
            decoy = [replace(d, runnable=False, requires="dataset.decoy_labels: 1") for d in (
                plan_black_box(noise_for(t, s), partitions=t, threat_models=threat_models, floor=floor,
                               seconds_per_trial=seconds_per_trial, shots_per_partition=s, **{**common, "labels": 3})
                for t, s in dict.fromkeys((d.partitions, d.shots_per_partition or 1) for d in designs
                                          if d.threat_model == "black-box" and
                                          d.partitions * (d.shots_per_partition or 1) <= exemplars))]
            found = [d for d in decoy if d.trials is not None]
            designs += found
            cheapest = min(found, key=lambda d: d.model_calls or 0, default=None)
            notes.append("winner-only noise black-box: a label that no exemplar carries is never released by it, so "
                         "the release floor test finds it" + ("" if cheapest is None else
                         f"; with dataset.decoy_labels: 1 the design {cheapest.partitions} partitions x "
                         f"{cheapest.trials} trials ({cheapest.model_calls} model calls) decides") +
                         " (docs/audit.md#decoy-labels)")
        else:
            notes.append("winner-only noise black-box: the query's labels beyond two let the release floor test find "
                         "it (its detection here is a lower bound: the best single label's)")
    if not any(d.runnable and d.trials is not None for d in designs if d.threat_model == "black-box"):
        many = min((plan_many_votes(noise_for(d.partitions, d.shots_per_partition or 1), partitions=d.partitions,
                                    threat_models=threat_models, floor=floor, seconds_per_trial=seconds_per_trial,
                                    shots_per_partition=d.shots_per_partition, **common)
                    for d in designs if d.threat_model == "black-box" and d.partitions > 1 and
                    (d.shots_per_partition or 1) * d.partitions <= exemplars),
                   key=lambda d: (d.trials is None, d.model_calls or 0), default=None)
        advice = ["no black-box design with one canary detects " + ", ".join(alternatives) + " within "
                  f"{max_trials} trials"]
        wbs = [d for d in designs if d.threat_model == "white-box" and d.trials is not None]
        if wbs:
            advice.append(f"white-box noise conformance does with {wbs[0].trials} calls "
                          f"({wbs[0].model_calls} model calls)"
                          + ("" if wbs[0].runnable else " once target.white_box is set (the gateway's internals)"))
        if many is not None and many.trials is not None:
            designs.append(many)
            advice.append(f"a canary that moves every partition's vote (one per partition) does with "
                          f"{many.partitions} partitions and {many.trials} trials ({many.model_calls} model calls), "
                          "an insertion this service does not run")
        notes.append("; ".join(advice))
    return {"claimed_epsilon": claimed_epsilon, "confidence": confidence, "delta": delta, "labels": labels,
            "exemplars": exemplars, "alternatives": list(alternatives), "min_detection": min_detection,
            "black_box_floor": bb_floor,
            "configured": configured.to_dict(), "recommended": None if best is None else best.to_dict(),
            "designs": [d.to_dict() for d in designs], "notes": notes}
