"""Fixed design vs sequential for generation audits on the bundled SmolLM2 + MiniLM (issue 28 item 3).

Run through ``python benchmarks/bench_gen_sequential.py --inprocess`` (see there). Library level,
one process, the real models in it (``GenerationMechanismTarget``: the mechanism's own code on
SmolLM2, the auditor's and esa's embedder MiniLM). Designs as in
``tests/audit/test_gen_sequential_job.py``: 4 exemplars; ``esa`` with 2 partitions x 1 shot, 2
candidates, max_tokens 6; ``mozo`` with one expert of 4 shots, max_tokens 1. Claims epsilon 1 and 2
(delta 1e-5), required alternatives noise_tenth + no_noise + non_private, confidence 0.95.

Targets: ``correct`` (the mechanism at the claimed epsilon), ``broken`` (the same mechanism run at
``BROKEN`` x the claimed epsilon while it claims the params' epsilon: ``RunsAt``; its noise far below
the claimed scale) and ``full_context`` (the non-private release, claiming the same). For each:

* fixed: the trials the planner (``gen_plan.plan_generation``, the job's ``trials: "auto"``) gives the
  configured design -- black-box, and for esa white-box + black-box (384 MiniLM noise draws per
  answer, as the job plans a mechanism target with ``threat_model`` "both") -- and, where that count
  is at most ``fixed_max``, the fixed audit itself (``run_campaign`` with the canary_mia job's
  verdict and the power of the claimed design); otherwise it is not run and the row says why;
* sequential: ``gen_sequential.run_gen_sequential`` on the claimed design, black-box, and for esa
  also white-box (the noise it reports), capped at ``cap`` trials.

Model calls = generate calls = trials (each one answer of the mechanism; esa's answer costs 2
partition + 2 candidate generations). Single audits with fixed seeds: each number is one draw.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from app.audit import CampaignConfig, Canary, run_campaign
from app.audit.gen_plan import plan_generation
from app.audit.gen_power import DEFAULT_GEN_REQUIRED, generation_design, signal_distance
from app.audit.gen_queries import resolve_generation_query
from app.audit.gen_sequential import run_gen_sequential
from app.audit.gen_targets import GenerationMechanismTarget

EX = [(f"dialogue {i} about the weather", f"summary {i}") for i in range(4)]
CANARY = "zq7 the lighthouse keeper owns eleven violet kites"
DESIGNS: dict[str, tuple[dict[str, Any], int]] = {
    "esa": ({"partitions": 2, "shots_per_partition": 1, "candidates": 2}, 6),
    "mozo": ({"experts": 1, "group_size": 4}, 1)}
BROKEN = 100.0  # the broken target runs at this multiple of the claimed epsilon
TARGETS = ("correct", "broken", "full_context")
DIMS = 384  # MiniLM: esa's noise draws per answer
DELTA = 1e-5
CONFIDENCE = 0.95


class RunsAt(GenerationMechanismTarget):
    """BUG: claims its params' epsilon (``claimed``, ``claimed_sigma``: the auditor's calibration) but
    runs the mechanism at ``run_epsilon``."""

    def __init__(self, *args: Any, run_epsilon: float, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.run_epsilon = float(run_epsilon)
        self.name += f"@epsilon={run_epsilon:g}"

    def request(self, context: Any, attack: Any) -> Any:
        claimed = self.privacy_params
        self.privacy_params = {**claimed, "epsilon": self.run_epsilon}
        try:
            return super().request(context, attack)
        finally:
            self.privacy_params = claimed


def load_models() -> tuple[Any, Any]:
    """The bundled SmolLM2 and MiniLM from the model cache (as tests/conftest.py loads them)."""
    import os
    from pathlib import Path

    from app.llm import bundled_specs, load_model

    env = os.environ.get("DPICL_MODEL_CACHE_DIR")
    cache = Path(env).expanduser() if env else Path.home() / ".cache" / "dpicl" / "models"
    lm, emb = (load_model(next(s for s in bundled_specs() if s.kind == k), cache_dir=cache, device="cpu",
                          dtype="float32") for k in ("lm", "embedder"))
    return lm, emb


def make_target(lm: Any, emb: Any, mech: str, kind: str, eps: float) -> GenerationMechanismTarget:
    params, tokens = DESIGNS[mech]
    claimed = {"epsilon": eps, "delta": DELTA, **params}
    if kind == "correct":
        return GenerationMechanismTarget(lm, emb, mech, claimed, max_tokens=tokens)
    if kind == "broken":
        return RunsAt(lm, emb, mech, claimed, max_tokens=tokens, run_epsilon=BROKEN * eps)
    if kind == "full_context":
        return GenerationMechanismTarget(lm, emb, "full_context", {}, max_tokens=tokens)
    raise ValueError(f"unknown target {kind!r}")


def planned(mech: str, eps: float, distance: float | None, threat_models: tuple[str, ...]) -> int | None:
    """The planner's trials for the configured design (None: no count up to 20000 could pass)."""
    params, tokens = DESIGNS[mech]
    out = plan_generation(mech, {"epsilon": eps, "delta": DELTA, **params}, exemplars=len(EX), max_tokens=tokens,
                          distance=distance, threat_models=threat_models, white_box=mech == "esa",
                          claimed_epsilon=eps, confidence=CONFIDENCE, delta=DELTA,
                          alternatives=list(DEFAULT_GEN_REQUIRED),
                          prompts_per_unit_extra=int(params.get("candidates", 0)),
                          noise_dims=DIMS if "white-box" in threat_models else 0)
    n = out["configured"]["trials"]
    return None if n is None else int(n)


def fixed_audit(target: Any, claimed_target: Any, eps: float, trials: int, threat_models: tuple[str, ...],
                seed: int) -> dict[str, Any]:
    """One fixed audit as the canary_mia job runs it (direct, paired), its power that of the claimed
    design (``claimed_target``: the mechanism at the claim), and the job's verdict."""
    from app.jobs.kinds.canary_gen import generation_power
    from app.jobs.kinds.canary_mia import CanaryMIAConfig, CanaryMIAKind

    calls0, t0 = target.calls, time.perf_counter()
    res = run_campaign(target, EX, Canary("false_fact", CANARY, CANARY), "signal_text", task_labels=[],
                       config=CampaignConfig(trials=trials, threat_models=threat_models, confidence=CONFIDENCE,
                                             delta=DELTA), rng=np.random.default_rng(seed))
    out = res.to_dict()
    # the job's own power path (app.jobs.kinds.canary_gen): the claimed design's power and the
    # design-model check on these releases
    config = CanaryMIAConfig.model_validate({"task": "generation", "power": {"alternatives": list(DEFAULT_GEN_REQUIRED)}})
    out.update(generation_power(res, claimed_target, len(EX), eps, config))
    verdict = CanaryMIAKind().verdict(out, eps, None)
    bb = res.estimates["black-box"]
    return {"run": True, "black_box_counts": {"tp": bb.tp, "fn": bb.fn, "fp": bb.fp, "tn": bb.tn}, "verdict": str(verdict), "model_calls": target.calls - calls0,
            "seconds": round(time.perf_counter() - t0, 1), "threat_models": list(res.estimates),
            "epsilon_lower": round(float(res.epsilon), 4), "reason": out.get("verdict_reason", ""),
            "model_check": ((out.get("power") or {}).get("design") or {}).get("model_check")}


def sequential_audit(target: Any, design: Any, eps: float, cap: int, seed: int, white_box: bool) -> dict[str, Any]:
    attack = resolve_generation_query("signal_text", Canary("false_fact", CANARY, CANARY))
    calls0 = target.calls
    r = run_gen_sequential(target, EX, attack, claimed_epsilon=eps, delta=DELTA, design=design,
                           alternatives=DEFAULT_GEN_REQUIRED, alpha=1.0 - CONFIDENCE, cap=cap,
                           rng=np.random.default_rng(seed), white_box=white_box)
    return {"verdict": r.verdict, "model_calls": target.calls - calls0, "trials": r.trials,
            "seconds": round(r.seconds, 1), "decided_by": r.decided_by, "e_violation": round(r.e_violation, 4),
            "e_alternatives": {k: round(v, 4) for k, v in r.e_alternatives.items()},
            "y1_with": round(r.y1_with, 3), "y1_without": round(r.y1_without, 3), "reason": r.reason}


def inprocess(lm: Any, emb: Any, *, mechanisms: Sequence[str] = tuple(DESIGNS), epsilons: Sequence[float] = (1.0, 2.0),
              targets: Sequence[str] = TARGETS, cap: int = 60, fixed_max: int = 60, seed: int = 28,
              log: Any = None, sequential: bool = True) -> dict[str, Any]:
    """Every (mechanism, claim, target) cell: the planner's fixed trials, the fixed audit where its
    count is at most ``fixed_max`` (else why not), and the sequential audits (cap ``cap``)."""
    say = log or (lambda _m: None)
    attack = resolve_generation_query("signal_text", Canary("false_fact", CANARY, CANARY))
    dist = signal_distance(emb, *attack.labels[:2])
    rows = []
    for mech in mechanisms:
        params, tokens = DESIGNS[mech]
        tms = ("black-box", "white-box") if mech == "esa" else ("black-box",)
        for eps in epsilons:
            d = generation_design(mech, {"epsilon": eps, "delta": DELTA, **params}, len(EX), max_tokens=tokens,
                                  white_box=False, distance=dist if mech == "esa" else None)
            fixed_bb = planned(mech, eps, dist if mech == "esa" else None, ("black-box",))
            fixed_n = fixed_bb if tms == ("black-box",) else planned(mech, eps, dist, tms)
            row: dict[str, Any] = {"mechanism": mech, "claim": eps, "design": {**params, "max_tokens": tokens,
                                                                              "exemplars": len(EX)},
                                   "fixed_planned": {"black-box": fixed_bb, **({"white-box": fixed_n}
                                                                               if mech == "esa" else {})},
                                   "fixed_threat_models": list(tms), "targets": {}}
            for kind in targets:
                cell: dict[str, Any] = {}
                target = make_target(lm, emb, mech, kind, eps)
                views = ((False, True) if mech == "esa" else (False,)) if sequential else ()
                for wb in views:
                    say(f"{mech} claim {eps:g} {kind}: sequential {'white' if wb else 'black'}-box, cap {cap}")
                    cell["sequential_" + ("white_box" if wb else "black_box")] = sequential_audit(
                        target, d, eps, cap, seed, wb)
                if fixed_n is None:
                    cell["fixed"] = {"run": False, "why": "the planner has no trial count up to 20000 that could "
                                     "pass this design: the fixed audit could end violation or inconclusive only"}
                elif fixed_n > fixed_max and sequential:
                    per = cell["sequential_black_box"]["seconds"] / max(1, cell["sequential_black_box"]["trials"])
                    cell["fixed"] = {"run": False, "why": f"{fixed_n} trials > fixed_max {fixed_max} "
                                     f"(~{fixed_n * per:.0f} s at this target's {per:.2f} s per trial)"}
                elif fixed_n > fixed_max:
                    cell["fixed"] = {"run": False, "why": f"{fixed_n} trials > fixed_max {fixed_max}"}
                else:
                    say(f"{mech} claim {eps:g} {kind}: fixed, {fixed_n} trials")
                    claimed_target = make_target(lm, emb, mech, "correct", eps)
                    cell["fixed"] = fixed_audit(target, claimed_target, eps, fixed_n, tms, seed)
                row["targets"][kind] = cell
            rows.append(row)
    return {"signal_distance": round(dist, 4), "broken_multiplier": BROKEN, "cap": cap, "fixed_max": fixed_max,
            "seed": seed, "rows": rows}


def _cell(c: dict[str, Any] | None) -> str:
    if c is None:
        return "-"
    if c.get("run") is False:
        return "not run"
    by = f", {c['decided_by']}" if c.get("decided_by") else ""
    return f"{c['model_calls']}, {c['seconds']:.0f} s, {c['verdict']}{by}"


def table(out: dict[str, Any]) -> str:
    """Markdown: one line per (mechanism, claim, target)."""
    lines = ["| mechanism | claim | target | fixed planned (bb / wb) | fixed run | seq black-box | seq white-box "
             "| y1 with / without (bb) |", "|---|---|---|---|---|---|---|---|"]
    for r in out["rows"]:
        fp = " / ".join(str(v) for v in r["fixed_planned"].values())
        for kind, c in r["targets"].items():
            bb = c.get("sequential_black_box")
            seen = (f"{bb['y1_with']:.2f} / {bb['y1_without']:.2f}" if bb else
                    "{y1_with}/{members} / {y1_without}/{nonmembers}".format(**c["fixed"]["model_check"])
                    if (c.get("fixed") or {}).get("model_check") else "-")
            lines.append(f"| {r['mechanism']} | {r['claim']:g} | {kind} | {fp} | {_cell(c.get('fixed'))} | "
                         f"{_cell(bb)} | {_cell(c.get('sequential_white_box'))} | {seen} |")
    return "\n".join(lines)
