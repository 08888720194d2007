"""The ``canary_mia`` job's sequential mode for generation targets: wiring only (the test is
``app.audit.gen_sequential``; the release laws are ``app.audit.gen_power``'s design model).

``"task": "generation", "mode": "sequential"`` with ``"trials": "auto"`` (cap ``DEFAULT_CAP``) or a
number (the cap): pairs of trials in batches until a violation (at 1/alpha), a pass (every
``power.alternatives`` rejected at 1/(1 - ``power.min_detection``), the fixed plan's miss rate) or
the cap. Mechanisms without a design model (a mechanism that claims nothing: zero_shot,
full_context) and the L3 judge can only end violation or inconclusive, so
they need an explicit cap (``"auto"`` would spend 10000 trials on a verdict that can never be a
pass). ``ksa``'s design model needs the signal texts (its keywords): they are passed.

White-box (``threat_model`` "white-box" or "both", the default, on a mechanism target, or a remote
target with ``white_box``): the audit also reads the noise the target reports (``app.audit.gen_noise``:
esa's clean and noisy mean; ksa's gaps, k* and PTR outcome; in-process clip_softmax, poe and mozo: each
step's clean statistic through ``app.mechanisms.step_trace``, never serialised); a remote target's token
mechanism, and a target that reports no internals, stay black-box with a note saying why.

Black-box, a design of several units (esa's partitions, clip_softmax's prompts, poe's and mozo's experts)
draws a one-unit probe first (``config.probe``, default on; ``app.audit.probe.gen_probe_target``): the
canary then decides the release, so noise left out is a violation within a few pairs.
"""

from __future__ import annotations

from typing import Any

from app.jobs.context import JobContext
from app.jobs.errors import JobConfigError


def _no_model(config: Any) -> tuple[str, str] | None:
    """(why, param) where gen_power has no design model of this target; None where it has one."""
    from app.audit.gen_power import MODELLED, NOT_MODELLED

    t = config.target
    if t.mechanism not in MODELLED:
        why = NOT_MODELLED.get(str(t.mechanism), f"{t.mechanism} makes no privacy claim to model")
        return f"no generation power model for {t.mechanism}: {why}", "config.target.mechanism"
    if t.defence == "L3":
        return "the L3 judge replaces answers after the noise: no release law to model", "config.target.defence"
    return None


def check(config: Any) -> None:
    """Submit-time: a signal query, a cap of at least one pair, and a design model (or an explicit cap)."""
    from app.jobs.kinds.canary_gen import _signals

    signals = _signals(config)  # the signal query's texts (y1, y0), as the fixed generation audit's plan reads them
    if config.trials != "auto" and int(config.trials) < 2:
        raise JobConfigError("the sequential cap needs at least 2 trials (one pair)", param="config.trials")
    no = _no_model(config)
    if no is not None and config.trials == "auto":
        raise JobConfigError(f"{no[0]}; a sequential audit of it could never pass (only violation or "
                             "inconclusive): give trials a number (the cap) to look for a violation",
                             param=no[1])
    if no is None and config.target.type == "mechanism":
        _design(config, config.target.params, config.dataset.size, 1.0, signals)  # the params' own errors, as 422s


def white_box(config: Any) -> bool:
    """Read the target's reported noise: not for threat_model black-box, nor a remote target that is
    not asked for its internals."""
    t = config.target
    return config.threat_model != "black-box" and (t.type != "remote" or bool(t.white_box))


def reads_noise(config: Any, claim: float, eps_claimed: float | None) -> tuple[bool, str | None]:
    """(read the target's noise, why not where it was asked for). The design (the noise's sigma, the
    alternatives' laws) is the target's params': a claim tighter than the epsilon they give is left to
    the black-box test (the noise would be checked against the params' sigma, not the claim's)."""
    if not white_box(config):
        return False, None
    if eps_claimed is not None and float(claim) < float(eps_claimed) * (1.0 - 1e-9):
        return False, (f"white-box: not used: the claim epsilon {claim:g} is tighter than the target's own "
                       f"{eps_claimed:g}, and the noise would be tested against its params' sigma")
    return True, None


def _design(config: Any, params: dict[str, Any], n: int, distance: float | None,
            signals: tuple[str, ...] | None = None) -> Any:
    from app.audit.gen_power import NoPowerModel, generation_design
    from app.mechanisms.errors import MechanismParamError

    t = config.target
    try:
        return generation_design(str(t.mechanism), dict(params), n, max_tokens=config.max_tokens, white_box=False,
                                 distance=distance, signals=signals if t.mechanism == "ksa" else None)
    except NoPowerModel as exc:
        raise JobConfigError(f"no generation power model for {t.mechanism}: {exc}",
                             param="config.target.mechanism") from None
    except MechanismParamError as exc:
        name = exc.param or ""
        field = name if name.startswith("params.") else f"params.{name}".rstrip(".")
        raise JobConfigError(exc.message, param=f"config.target.{field}") from None
    except ArithmeticError as exc:  # e.g. poe/mozo's per-token RDP overflows at epsilon 1e300
        raise JobConfigError(f"the mechanism's calibration fails for these params ({type(exc).__name__})",
                             param="config.target.params") from None


def run(ctx: JobContext, config: Any, target: Any, exemplars: list[tuple[str, str]], canary: Any,
        rng: Any) -> dict[str, Any]:
    from app.audit.gen_power import signal_distance
    from app.audit.gen_queries import resolve_generation_query
    from app.audit.gen_sequential import run_gen_sequential
    from app.audit.probe import gen_probe_target
    from app.jobs.kinds.canary_seq import cap, claim_of, target_failures

    try:
        attack = resolve_generation_query(config.query or "signal_text", canary,
                                          None if config.signals is None else tuple(config.signals))
    except ValueError as exc:
        raise JobConfigError(str(exc), param="config.query") from None
    claim, delta, eps_claimed = claim_of(ctx, config, target, len(exemplars))
    wb, wb_note = reads_noise(config, claim, eps_claimed)
    no = _no_model(config)
    design = None
    if no is None:
        dist = signal_distance(target.decider.embedder, *attack.labels[:2]) if config.target.mechanism == "esa" \
            else None
        design = _design(config, target.params, len(exemplars), dist, tuple(attack.labels[:2]))
    # the one-unit probe (black-box: run_gen_sequential leaves it out where the noise is read)
    probe = gen_probe_target(target, len(exemplars), design.units if design is not None else None) \
        if config.probe else None
    with target_failures(target):
        res = run_gen_sequential(target, exemplars, attack, claimed_epsilon=float(claim), delta=delta, design=design,
                                 alternatives=list(config.power.alternatives), alpha=1.0 - config.confidence,
                                 cap=cap(config.trials), rng=rng, no_model=None if no is None else no[0],
                                 progress=lambda f, m: ctx.progress(0.02 + 0.9 * f, m),
                                 white_box=wb, min_detection=config.power.min_detection, probe=probe)
    if wb_note:
        res.notes.append(wb_note)
    seq = {**res.to_dict(), "claimed_epsilon": float(claim)}
    out: dict[str, Any] = {
        "mode": "sequential", "task": "generation", "target": target.name, "_attack": attack,
        "epsilon": None, "epsilon_claimed": eps_claimed, "delta": delta, "confidence": config.confidence,
        "model_calls": res.trials, "target_calls": target.calls + (probe.calls if probe is not None else 0),
        "trials_total": res.trials, "sequential": seq,
        "power": None, "exemplar_count": len(exemplars)}
    if no is not None:
        out["power_unknown"] = no[0]
    if getattr(target, "defence", "none") != "none":
        out["defence"] = {"level": target.defence, "judge_calls": target.judge_calls, "refusals": target.refusals}
    return out
