"""Audit planning: the design and number of trials that detect stated alternatives.

For a classification target with a noise model (``rnm``), a claim and
broken-implementation alternatives (``app.audit.power``), find the smallest
number of direct-mode trials whose black-box tests (the rigorous bound, or the
release floor of ``app.audit.conformance``) flag each alternative with
probability >= ``min_detection`` (the vote model of
tight-auditing Lemma 3.1: the best case for the auditor), over candidate
partition counts; and, where the target reports its internals, the calls the
noise conformance test (``app.audit.conformance``) needs.

Validity: the plan fixes the number of trials BEFORE the audit runs, and the
audit never stops early, so the Clopper-Pearson confidence holds as stated (no
sequential testing, no peeking). The predicted detection probabilities are
exact for the vote model; a model that does not copy the canary lowers them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from scipy import stats

from app.audit.conformance import conformance_power, min_release_probability
from app.audit.noise import VotingNoise
from app.audit.power import ALTERNATIVES, alternative_noise, claimed_noise, design_votes, power_report

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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _detections(noise: VotingNoise, labels: int, partitions: int, positive: int, negative: int | None, trials: int,
                claimed_epsilon: float, confidence: float, delta: float, alternatives: Sequence[str],
                min_detection: float, floor: bool = True) -> tuple[dict[str, float], float, list[str]]:
    vw, vo = design_votes(labels, partitions, positive, negative)
    threshold = None
    if labels == 2 and floor:  # the release floor test (app.audit.conformance), at the campaign's alpha split
        p_floor = min_release_probability(claimed_noise(noise), partitions)
        threshold = int(stats.binom.ppf((1.0 - confidence) / 4.0, trials, p_floor))
    rep = power_report(noise, vw, vo, positive, n_members=trials // 2, n_nonmembers=trials - trials // 2,
                       claimed_epsilon=claimed_epsilon, confidence=confidence, delta=delta, vote_model="assumed",
                       vote_model_note="", required=alternatives, min_detection=min_detection, partitions=partitions,
                       floor_threshold=threshold)
    return {a: rep.alternatives[a].detection for a in alternatives}, rep.ceiling_epsilon, rep.reasons


def plan_black_box(noise: VotingNoise, *, labels: int, partitions: int, claimed_epsilon: float, confidence: float,
                   delta: float, alternatives: Sequence[str], min_detection: float = 0.9, positive: int = 0,
                   negative: int | None = None, max_trials: int = MAX_TRIALS,
                   seconds_per_trial: float | None = None, floor: bool = True) -> DesignPlan:
    """The smallest even trial count (paired insertion: half members) for this design; doubling
    then bisection (detection grows with trials up to the bound's discreteness; the result is
    re-checked). ``floor=False``: the rigorous bound alone (what a black-box audit needs when the
    release floor does not apply, e.g. more than two labels)."""
    def ok(n: int) -> bool:
        det, _, _ = _detections(noise, labels, partitions, positive, negative, n, claimed_epsilon, confidence, delta,
                                alternatives, min_detection, floor)
        return all(v >= min_detection for v in det.values())

    det, ceiling, reasons = _detections(noise, labels, partitions, positive, negative, max_trials, claimed_epsilon,
                                        confidence, delta, alternatives, min_detection, floor)
    if not all(v >= min_detection for v in det.values()):
        return DesignPlan(partitions, "black-box", None, det, ceiling, None, None,
                          [f"not within {max_trials} trials: " + "; ".join(reasons)])
    lo, hi = 0, 64
    while hi < max_trials and not ok(hi):
        lo, hi = hi, min(max_trials, hi * 2)
    while hi - lo > max(2, hi // 100):  # 1% resolution is plenty for a plan
        mid = (lo + hi) // 2 // 2 * 2
        if mid <= lo:
            break
        if ok(mid):
            hi = mid
        else:
            lo = mid
    det, ceiling, _ = _detections(noise, labels, partitions, positive, negative, hi, claimed_epsilon, confidence,
                                  delta, alternatives, min_detection, floor)
    return DesignPlan(partitions, "black-box", hi, det, ceiling, hi * partitions,
                      None if seconds_per_trial is None else hi * seconds_per_trial)


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


def plan_audit(noise_for: Callable[[int], VotingNoise], *, labels: int, partitions: int, claimed_epsilon: float,
               confidence: float, delta: float, alternatives: Sequence[str], min_detection: float = 0.9,
               white_box: bool = False, candidates: Sequence[int] = (1, 2, 3, 4, 6, 8),
               max_trials: int = MAX_TRIALS, seconds_per_trial: float | None = None) -> dict[str, Any]:
    """The configured design's plan, and the best of the candidate partition counts.
    ``noise_for(T)``: the mechanism's noise with T partitions (its calibration may depend on T)."""
    for a in alternatives:
        if a not in ALTERNATIVES or a == "claimed":
            raise ValueError(f"unknown alternative {a!r}")
    alternative_noise(noise_for(partitions), alternatives[0])  # validates the noise
    def black_box(t: int) -> DesignPlan:
        return plan_black_box(noise_for(t), labels=labels, partitions=t, claimed_epsilon=claimed_epsilon,
                              confidence=confidence, delta=delta, alternatives=list(alternatives),
                              min_detection=min_detection, max_trials=max_trials,
                              seconds_per_trial=seconds_per_trial)

    configured = black_box(partitions)
    designs = [configured] + [black_box(t) for t in candidates if t != partitions]
    if white_box:
        designs.append(plan_white_box(noise_for(partitions), labels=labels, partitions=partitions,
                                      alternatives=alternatives, confidence=confidence, min_detection=min_detection,
                                      seconds_per_trial=seconds_per_trial))
    feasible = [((d.trials * d.partitions, d.trials), d) for d in designs if d.trials is not None]
    best = min(feasible, key=lambda kd: kd[0])[1] if feasible else None
    notes = ["fixed sample size: the trials are planned before the audit and it never stops early, so the "
             "Clopper-Pearson confidence holds as stated",
             "black-box detection assumes the canary's partition votes the canary label (tight-auditing Lemma 3.1); "
             "a model that does not copy it lowers the real power"]
    if best is None:
        notes.append("no single design detects every alternative: audit them separately, or white-box "
                     "(needs the internals scope)")
    return {"claimed_epsilon": claimed_epsilon, "confidence": confidence, "delta": delta,
            "alternatives": list(alternatives), "min_detection": min_detection,
            "configured": configured.to_dict(), "recommended": None if best is None else best.to_dict(),
            "designs": [d.to_dict() for d in designs], "notes": notes}
