"""Planning generation audits: the cheapest design whose verdict could say pass.

``plan_generation`` searches unit counts (and, for the token mechanisms, shorter answers; ESA's
white-box margin where the target offers it) and predicts each design's detection with
``app.audit.gen_power.gen_design_power`` -- the function the verdict's power report calls, so a
plan's prediction is the power the verdict reports. Where no design detects every required
alternative, it names, for each alternative alone, the cheapest design that does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app.audit.eprocess import black_box_floor
from app.audit.gen_power import GenerationDesign, gen_design_power, generation_design
from app.audit.power import DEFAULT_MIN_DETECTION, PowerReport

def smallest_trials(report: Any, max_trials: int) -> int | None:
    """The smallest even trial count whose report is sufficient (doubling, then bisection to 1%,
    re-checked), or None within ``max_trials``. ``report(n)`` -> PowerReport."""
    if not report(max_trials).sufficient:
        return None
    lo, hi = 0, 64
    while hi < max_trials and not report(hi).sufficient:
        lo, hi = hi, min(max_trials, hi * 2)
    while hi - lo > max(2, hi // 100):
        mid = (lo + hi) // 2 // 2 * 2
        if mid <= lo:
            break
        if report(mid).sufficient:
            hi = mid
        else:
            lo = mid
    return hi if report(hi).sufficient else max_trials


TOKEN_MECHANISMS = ("clip_softmax", "poe", "mozo")  # the claim composes max_tokens per-token steps
UNIT_PARAM = {"esa": ("partitions", "shots_per_partition"), "clip_softmax": ("prompts", "shots_per_prompt"),
              "poe": ("experts", "group_size"), "mozo": ("experts", "group_size"),
              "ksa": ("partitions", "shots_per_partition")}


def _report_fn(design: GenerationDesign, common: Mapping[str, Any], required: Sequence[str],
               tms: Sequence[str]) -> Any:
    def rep(n: int, full: bool = False) -> PowerReport:
        return gen_design_power(design, trials=n, threat_models=tms, required=required, only_required=not full,
                                **common)
    return rep


def plan_generation(mechanism: str, params: Mapping[str, Any], *, exemplars: int, max_tokens: int,
                    distance: float | None, threat_models: Sequence[str], white_box: bool, claimed_epsilon: float,
                    confidence: float, delta: float, alternatives: Sequence[str],
                    min_detection: float = DEFAULT_MIN_DETECTION, threshold_fraction: float = 0.5,
                    candidates: Sequence[int] = tuple(range(1, 9)), max_trials: int = 20_000,
                    seconds_per_trial: float | None = None, prompts_per_unit_extra: int = 0,
                    signals: Sequence[str] | None = None, noise_dims: int = 0) -> dict[str, Any]:
    """The configured design's plan, and the cheapest design this audit can run whose verdict could
    say pass: unit counts 1-8 (T x shots <= exemplars), for the token mechanisms also shorter
    answers (the claim composes ``max_tokens`` steps; one decides), and ESA's white-box margin where
    the target offers it. Every prediction is ``gen_design_power`` (the verdict's own)."""
    from app.audit.planner import DesignPlan
    from app.mechanisms.errors import MechanismParamError

    unit, shot = UNIT_PARAM.get(mechanism, ("partitions", "shots_per_partition"))
    base = dict(params)
    common = {"claimed_epsilon": claimed_epsilon, "confidence": confidence, "delta": delta,
              "threshold_fraction": threshold_fraction, "min_detection": min_detection}

    keys: list[tuple[int | None, int, Sequence[str], bool, str | None]] = []

    def one(t: int | None, tokens: int, tms: Sequence[str], runnable: bool, requires: str | None,
            alts: Sequence[str] = tuple(alternatives)) -> dict[str, Any]:
        if alts is alternatives or tuple(alts) == tuple(alternatives):
            keys.append((t, tokens, tms, runnable, requires))
        p = dict(base)
        if t is not None:
            p[unit] = t
            if int(p.get(shot) or 1) * t > exemplars:
                p.pop(shot, None)
        d = generation_design(mechanism, p, exemplars, max_tokens=tokens, white_box="white-box" in tms and white_box,
                              distance=distance, signals=signals, noise_dims=noise_dims)
        rep = _report_fn(d, common, alts, tms)
        n = smallest_trials(rep, max_trials)
        r = rep(n, True) if n is not None else rep(max_trials)
        per_call = d.units + prompts_per_unit_extra
        tm = "white-box" if "white-box" in tms and d.white_box else "black-box"
        plan = DesignPlan(d.units, tm, n, {a: r.alternatives[a].detection for a in alts}, r.ceiling_epsilon,
                          None if n is None else n * per_call,
                          None if n is None or seconds_per_trial is None else n * seconds_per_trial,
                          [] if n is not None else [f"not within {max_trials} trials: " + "; ".join(r.reasons)],
                          runnable=runnable, requires=requires)
        return {**plan.to_dict(), "mechanism": mechanism, "max_tokens": tokens, "noise_scale": d.scale,
                "model_note": d.model_note}

    tms0 = tuple(threat_models)
    configured = one(None, max_tokens, tms0, True, None)
    designs = [configured]
    t0 = configured["partitions"]
    for t in candidates:
        if t > exemplars:
            continue
        for tokens in dict.fromkeys([max_tokens] + ([4, 2, 1] if mechanism in TOKEN_MECHANISMS else [])):
            if tokens > max_tokens or (t, tokens) == (t0, max_tokens):
                continue
            req = None if tokens == max_tokens else (f"max_tokens {tokens}: signal texts whose first "
                                                    f"{tokens} token(s) decide")
            try:
                designs.append(one(t, tokens, tms0, True, req))
            except MechanismParamError:
                continue
    if mechanism == "esa" and "white-box" not in tms0:
        try:
            designs.append(one(t0, max_tokens, ("black-box", "white-box"), white_box,
                               None if white_box else "target.white_box: true (the gateway's internals)"))
        except MechanismParamError:
            pass
    feasible = [d for d in designs if d["runnable"] and d["trials"] is not None]
    best = min(feasible, key=lambda d: (d["model_calls"] or 0, d["trials"] or 0)) if feasible else None
    notes = ["fixed sample size: the trials are planned before the audit and it never stops early",
             designs[0].pop("model_note"),
             "a design is proposed only where the verdict's own power report (app.audit.gen_power.gen_design_power) "
             "could say pass"]
    bb_floor, why = black_box_floor(claimed_epsilon, delta, confidence)
    notes.append(why)
    for d in designs[1:]:
        d.pop("model_note")
    if mechanism in TOKEN_MECHANISMS:
        notes.append("the claim composes max_tokens steps and one token decides the signal: shorter answers "
                     "raise the per-token epsilon the audit can see")
    alone: dict[str, dict[str, Any] | None] = {}
    if best is None and len(alternatives) > 1:
        alone = _each_alone(one, keys, alternatives)
    if best is None:
        each = "; ".join(f"{a}: " + ("none" if d is None else f"{d['threat_model']}, {unit} {d['partitions']}, "
                                                              f"max_tokens {d['max_tokens']}, {d['trials']} trials")
                         for a, d in alone.items())
        notes.append("no design detects " + ", ".join(alternatives) + f" within {max_trials} trials: require fewer "
                     "or coarser alternatives (noise_tenth, no_noise, non_private) or audit a smaller claim"
                     + (f"; each alone (one audit each): {each}" if each else ""))
    return {"claimed_epsilon": claimed_epsilon, "confidence": confidence, "delta": delta, "exemplars": exemplars,
            "black_box_floor": bb_floor,
            "mechanism": mechanism, "alternatives": list(alternatives), "min_detection": min_detection,
            "signal_distance": distance, "configured": configured, "recommended": best, "designs": designs,
            "notes": notes, **({"each_alternative_alone": alone} if alone else {})}


def _each_alone(one: Any, keys: Sequence[tuple[Any, ...]], alternatives: Sequence[str]) -> dict[str, Any]:
    """For each alternative alone, the cheapest of the planner's designs that detects it (None: none)."""
    out: dict[str, Any] = {}
    for a in alternatives:
        found = []
        for t, tokens, tms, runnable, requires in keys:
            d = one(t, tokens, tms, runnable, requires, alts=(a,))
            d.pop("model_note", None)
            if d["runnable"] and d["trials"] is not None:
                found.append(d)
        out[a] = min(found, key=lambda d: (d["model_calls"] or 0, d["trials"] or 0)) if found else None
    return out
