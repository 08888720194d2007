"""``canary_mia`` generation audits: the plan and the verdict's power (``app.audit.gen_power``).

Both sides build the same design (mechanism, params, dataset.size, max_tokens, threat models,
signal distance from the server's embedder) and call ``gen_design_power``, so the plan's
predicted detection is the power reported with the verdict.
"""

from __future__ import annotations

from typing import Any

from app.jobs.errors import JobConfigError


def _signals(config: Any) -> tuple[str, str]:
    from app.audit.gen_queries import DEFAULT_SIGNALS, get_generation_strategy

    try:
        s = get_generation_strategy(config.query or "signal_text")
    except (ValueError, TypeError) as exc:
        raise JobConfigError(str(exc), param="config.query") from None
    if s.decision != "signal":
        raise JobConfigError("the generation power model covers the signal query (the repeat attack's score is "
                             "thresholded): use query signal_text or signal_text_white_box", param="config.query")
    y1, y0 = tuple(s.signals or config.signals or DEFAULT_SIGNALS)
    return y1, y0


def _distance(y1: str, y0: str, embedder: Any) -> float:
    from app.audit.gen_power import signal_distance

    if embedder is None:
        raise JobConfigError("the generation plan measures the signal texts' distance with the server's embedder, "
                             "and this server serves none", param="config.target.embedder")
    return signal_distance(embedder, y1, y0)


def _dims(y1: str, embedder: Any) -> int:
    """ESA's noise draws per answer a white-box run observes (the server's embedding dimension)."""
    from app.audit.gen_power import embedding_dims

    return embedding_dims(embedder, y1) if embedder is not None else 0


def threat_models(config: Any) -> tuple[str, ...]:
    from app.jobs.kinds.canary_design import _white_box_runs

    wb = _white_box_runs(config) or (config.threat_model == "white-box" and config.target.mechanism == "esa")
    if config.threat_model == "both":
        return ("black-box", "white-box") if wb else ("black-box",)
    return (config.threat_model,)


def plan_generation_audit(config: Any, claimed_epsilon: float | None, seconds_per_trial: float | None,
                          embedder: Any) -> dict[str, Any]:
    from app.audit.gen_plan import plan_generation
    from app.audit.gen_power import NoPowerModel, claim_of
    from app.mechanisms.errors import MechanismParamError

    from app.audit.gen_power import MODELLED, NOT_MODELLED

    t = config.target
    if t.mechanism not in MODELLED:
        why = NOT_MODELLED.get(str(t.mechanism), f"{t.mechanism} makes no privacy claim to plan an audit for")
        raise JobConfigError(f"no generation power model for {t.mechanism}: {why}", param="config.target.mechanism")
    if config.mode != "direct" or config.insertion != "paired":
        raise JobConfigError("the generation planner covers direct audits with paired insertion", param="config.mode")
    if t.defence == "L3":
        raise JobConfigError("the L3 judge replaces answers after the noise: no power model",
                             param="config.target.defence")
    y1, y0 = _signals(config)
    n = config.dataset.size
    params = dict(t.params)
    try:
        eps, dlt = claim_of(str(t.mechanism), params, n, config.max_tokens)
        out = plan_generation(
            str(t.mechanism), params, exemplars=n, max_tokens=config.max_tokens,
            distance=_distance(y1, y0, embedder) if t.mechanism == "esa" else None,
            threat_models=threat_models(config), white_box=t.type == "mechanism" or t.white_box,
            claimed_epsilon=float(claimed_epsilon if claimed_epsilon is not None else eps), confidence=config.confidence,
            delta=float(config.delta if config.delta is not None else dlt),
            alternatives=list(config.power.alternatives), min_detection=config.power.min_detection,
            threshold_fraction=config.threshold_fraction, seconds_per_trial=seconds_per_trial,
            prompts_per_unit_extra=int(params.get("candidates", 20)) if t.mechanism == "esa" else 1,
            signals=(y1, y0), noise_dims=_dims(y1, embedder) if t.mechanism == "esa" else 0)
    except NoPowerModel as exc:
        raise JobConfigError(f"no generation power model for {t.mechanism}: {exc}",
                             param="config.target.mechanism") from None
    except MechanismParamError as exc:
        name = exc.param or ""
        field = name if name.startswith("params.") else f"params.{name}".rstrip(".")  # epsilon, delta live there
        raise JobConfigError(exc.message, param=f"config.target.{field}") from None
    except ArithmeticError as exc:  # e.g. poe/mozo's per-token RDP overflows at epsilon 1e300
        raise JobConfigError(f"the mechanism's calibration fails for these params ({type(exc).__name__})",
                             param="config.target.params") from None
    except ValueError as exc:
        raise JobConfigError(str(exc), param="config.power.alternatives") from None
    out["notes"].append(f"planned for dataset.size {n}, max_tokens {config.max_tokens}, threat models "
                        f"{', '.join(threat_models(config))} (Bonferroni); a design sets target.params "
                        "(partitions / prompts / experts) and max_tokens")
    return out


def generation_power(res: Any, target: Any, n_exemplars: int, claim: float, config: Any) -> dict[str, Any]:
    """``{"power": report}`` (with ``advice``: the smallest trial count of this design that could
    pass, where this one cannot), or ``{"power": None, "power_unknown": why}``."""
    from app.audit.gen_plan import smallest_trials
    from app.audit.gen_power import (
        NoPowerModel,
        assess_design,
        assess_generation_power,
        gen_design_power,
        require_modelled,
    )

    try:
        require_modelled(res, target)
        design = assess_design(res, target, n_exemplars)  # embeds the signal texts: once, for the report and check
        rep = assess_generation_power(res, target, n_exemplars, claim, required=config.power.alternatives,
                                      min_detection=config.power.min_detection, design=design)
    except NoPowerModel as exc:
        return {"power": None, "power_unknown": str(exc)}
    check = _model_check(rep, design, res)
    d = rep.to_dict()
    if check is not None and check.enough and not check.fits:
        d["advice"] = ("no trial count makes this a pass: the target's releases do not follow the design model the "
                       "detection rests on. White-box evidence decides the noise alternatives without that model "
                       "(esa, ksa; in process also clip_softmax, poe, mozo, with \"mode\": \"sequential\"), and "
                       "non_private too for esa; otherwise choose signal texts that the target's model follows")
    elif not rep.sufficient:

        def again(n: int) -> Any:
            return gen_design_power(design, trials=n, claimed_epsilon=claim, confidence=res.confidence,
                                    threat_models=tuple(res.estimates), delta=res.delta,
                                    threshold_fraction=res.config.threshold_fraction,
                                    required=config.power.alternatives, min_detection=config.power.min_detection,
                                    only_required=True)
        n = smallest_trials(again, 20_000)
        d["advice"] = (f"this design reaches the power with {n} trials (trials: {n}; POST /v1/audits/plan compares "
                       "designs)" if n is not None else _other_design(config, claim, target))
    return {"power": d}


def _model_check(rep: Any, design: Any, res: Any) -> Any:
    """Where a pass rests on the design model (``gen_design_power`` says so with
    ``model_check_pairs_needed``): the check of its claimed law on the observed releases
    (``app.audit.gen_model_check``), recorded in the report; a misfit withholds the pass."""
    if "model_check_pairs_needed" not in rep.design:
        return None
    from app.audit.gen_model_check import fixed_model_check
    from app.audit.gen_power import alternative_release

    check = fixed_model_check(alternative_release(design, "claimed"), res.trials, res.attack.labels[0],
                              1.0 - float(res.confidence))
    rep.design["model_check"] = check.to_dict()
    if check.enough and not check.fits:
        rep.reasons.append(check.reason())
        rep.sufficient = False
    return check


def _other_design(config: Any, claim: float, target: Any) -> str:
    """Where no trial count of this design reaches the power: the planner's cheapest design that does."""
    head = "no trial count up to 20000 reaches the power with this design"
    try:
        plan = plan_generation_audit(config, claim, None, target.decider.embedder)
    except JobConfigError as exc:
        return f"{head}, and the planner has no design ({exc.message})"
    rec = plan.get("recommended")
    if rec is None:
        why = [n for n in plan["notes"] if n.startswith("no design detects")]
        return f"{head}, nor does any design of the planner: " + (why[0] if why else plan["notes"][-1])
    unit = {"esa": "partitions", "ksa": "partitions", "clip_softmax": "prompts", "poe": "experts",
            "mozo": "experts"}.get(plan["mechanism"], "units")
    return (f"{head}; one that can: {rec['threat_model']}, {unit} {rec['partitions']}, max_tokens "
            f"{rec['max_tokens']}, {rec['trials']} trials (detection "
            + ", ".join(f"{k} {v:.3g}" for k, v in rec["detection"].items()) + ")"
            + (f", requires {rec['requires']}" if rec.get("requires") else ""))


def planned_trials(config: Any, claimed_epsilon: float | None, embedder: Any) -> tuple[int, dict[str, Any]]:
    """``trials: "auto"``: the configured design's planned count (measured with the worker's
    embedder, as the verdict will be), or a 422-style error naming a design that can."""
    plan = plan_generation_audit(config, claimed_epsilon, None, embedder)
    n = plan["configured"]["trials"]
    if n is None:
        rec = plan.get("recommended")
        can = ("" if rec is None else f"; one that can: {rec['threat_model']}, {rec['partitions']} units, max_tokens "
               f"{rec['max_tokens']}, {rec['trials']} trials")
        raise JobConfigError("trials 'auto': no trial count up to 20000 detects " + ", ".join(plan["alternatives"])
                             + " with this design" + can, param="config.trials")
    return int(n), plan
