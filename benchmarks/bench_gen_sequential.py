"""Fixed design vs sequential for generation audits (issue 28 item 3), at the design model's level.

    PYTHONPATH=. python benchmarks/bench_gen_sequential.py --reps 200
    PYTHONPATH=. python benchmarks/bench_gen_sequential.py --reps 50 --json
    PYTHONPATH=. python benchmarks/bench_gen_sequential.py --reps 200 --json \
        --out benchmarks/results/issue28/gen_sequential_whitebox.json
    PYTHONPATH=. python benchmarks/bench_gen_sequential.py --inprocess --cap 100 --fixed-max 80 \
        --out benchmarks/results/issue28/gen_sequential_inprocess.json
    PYTHONPATH=. python benchmarks/bench_gen_sequential.py --reps 100 --only mozo mozo/8 \
        --out benchmarks/results/issue28/gen_sequential_mozo_whitebox.json

``--inprocess``: the same comparison on the bundled SmolLM2 + MiniLM (real esa and mozo in this process,
correct, broken and full-context targets; one audit each): ``benchmarks/gen_sequential_inprocess.py``.

For each mechanism gen_power models (esa: 4 partitions x 2 shots, max_tokens 8; clip_softmax, poe,
mozo: one unit of 8 shots, max_tokens 1) and claimed epsilon 1 and 2 (8 exemplars, D = 0.5562,
alternatives noise_tenth + no_noise + non_private, confidence 0.95):

* fixed: the trials the planner's power model (``gen_power.gen_design_power``, black-box, and for esa
  also white-box + black-box: with the noise conformance test on 384 MiniLM coordinates per trial, as
  the job's planner plans it, and with the white-box margin alone) needs for P(detect) >= 0.9 of
  every alternative (None: no count up to 20000), i.e. the model calls of a fixed audit whatever
  the target;
* sequential: ``gen_sequential.run_gen_sequential`` against targets that follow the design model
  exactly (``DesignModelTarget``: the correct release, noise x 1/4, x 1/10, no noise, non-private),
  ``--reps`` audits each (cap ``--cap``): mean trials to the verdict and the verdicts' counts;
* probe (designs of several units: esa): the black-box sequential audit with the one-unit probe
  first (``app.audit.probe.gen_probe_target``), the probe's target the same alternative on one unit;
* white-box (``gen_noise.COVERED``): the same targets seen white-box, the audit with ``white_box=True``:
  esa through ``gen_noise.ESAWhiteBoxTarget`` (esa's own noise and nearest-candidate code on the
  design model's geometry, 384 noise draws per answer); clip_softmax, poe and mozo through
  ``gen_noise_tokens.TokenWhiteBoxTarget`` (the mechanisms' own statistic, Gumbel-argmax and step
  collector on the design model's decisive token, mozo's own chooser; the non-private release reports
  no steps). The token mechanisms also at max_tokens 8 ("clip_softmax/8", "poe/8", "mozo/8": the claim
  composed over 8 tokens, so a hotter temperature, for mozo a smaller lam at the same tau; 7 more
  private steps per answer over 20 public candidates (mozo: the top 10 of the shared logits) with synthetic
  unit logits, shared N(0, 2^2) + per-unit N(0, 1) per candidate: an assumption standing in for a
  model's continuation, read step by step by the white-box evidence; their black-box cells use
  ``DesignModelTarget``, whose law is the same).

Trials = model calls to the target (one answer each). The laws are the design model's (the auditor's
best case): real models that do not follow the signal query need more.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.audit import Canary  # noqa: E402
from app.audit.gen_plan import smallest_trials  # noqa: E402
from app.audit.gen_power import DEFAULT_GEN_REQUIRED, configured, gen_design_power, generation_design  # noqa: E402
from app.audit.gen_queries import DEFAULT_SIGNALS, resolve_generation_query  # noqa: E402
from app.audit.gen_noise import COVERED, ESAWhiteBoxTarget  # noqa: E402
from app.audit.gen_noise_tokens import TokenWhiteBoxTarget  # noqa: E402
from app.audit.gen_sequential import DesignModelTarget, run_gen_sequential  # noqa: E402
from app.audit.probe import GEN_UNITS  # noqa: E402

EX = [(f"dialogue {i} about the weather", f"summary {i}") for i in range(8)]
CANARY = "zq7 the lighthouse keeper owns eleven violet kites"
D = 0.5562  # tight-auditing Table 3's distance of the default signal pair
# label -> (mechanism, params, max_tokens)
DESIGNS = {"esa": ("esa", {"partitions": 4, "shots_per_partition": 2}, 8),
           "clip_softmax": ("clip_softmax", {"prompts": 1, "shots_per_prompt": 8}, 1),
           "poe": ("poe", {"experts": 1, "group_size": 8}, 1),
           "mozo": ("mozo", {"experts": 1, "group_size": 8}, 1),
           "clip_softmax/8": ("clip_softmax", {"prompts": 1, "shots_per_prompt": 8}, 8),
           "poe/8": ("poe", {"experts": 1, "group_size": 8}, 8),
           "mozo/8": ("mozo", {"experts": 1, "group_size": 8}, 8)}
DIMS = 384  # MiniLM: esa's noise draws per answer
TARGETS = ("claimed", "noise_quarter", "noise_tenth", "no_noise", "non_private")


def fixed_trials(design_of, eps: float, tms: tuple[str, ...], dims: int = 0) -> int | None:
    d = design_of("white-box" in tms, dims)

    def rep(n: int):
        return gen_design_power(d, trials=n, claimed_epsilon=eps, confidence=0.95, threat_models=tms, delta=1e-5,
                                required=DEFAULT_GEN_REQUIRED, only_required=True)
    return smallest_trials(rep, 20_000)


def _cell(make_target, d, eps: float, reps: int, cap: int, attack, white_box: bool, make_probe=None) -> dict:
    res = [run_gen_sequential(make_target(), EX, attack, claimed_epsilon=eps, delta=1e-5, design=d,
                              alternatives=DEFAULT_GEN_REQUIRED, alpha=0.05, cap=cap, rng=np.random.default_rng(seed),
                              white_box=white_box, probe=make_probe() if make_probe else None)
           for seed in range(reps)]
    v = [r.verdict for r in res]
    by = [r.decided_by for r in res if r.decided_by]
    return {"mean_trials": float(np.mean([r.trials for r in res])),
            **{k: v.count(k) for k in ("pass", "violation", "inconclusive") if v.count(k)},
            **({"decided_by": {k: by.count(k) for k in sorted(set(by))}} if white_box else {})}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--cap", type=int, help="sequential cap (trials): default 2000, --inprocess 50")
    ap.add_argument("--inprocess", action="store_true", help="real esa and mozo on the bundled SmolLM2 + MiniLM")
    ap.add_argument("--fixed-max", type=int, default=30, help="--inprocess: run the fixed audit where the planner's "
                    "count is at most this")
    ap.add_argument("--seed", type=int, default=28, help="--inprocess: every audit's seed")
    ap.add_argument("--mechanisms", default="esa,mozo", help="--inprocess: comma-separated")
    ap.add_argument("--targets", default="correct,broken,full_context", help="--inprocess: comma-separated")
    ap.add_argument("--fixed-only", action="store_true", help="--inprocess: the fixed audits only (no sequential)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out", help="also write the JSON (with the command) to this path")
    ap.add_argument("--only", nargs="*", help="these design labels only (default: all)")
    a = ap.parse_args()
    if a.inprocess:
        return _inprocess(a)
    a.cap = 2000 if a.cap is None else a.cap
    attack = resolve_generation_query("signal_text", Canary("false_fact", CANARY, CANARY), DEFAULT_SIGNALS)
    rows = []
    t0 = time.perf_counter()
    for label, (mech, params, tokens) in DESIGNS.items():
        if a.only and label not in a.only:
            continue
        for eps in (1.0, 2.0):
            def design_of(white_box: bool, dims: int = 0, mech=mech, params=params, tokens=tokens, eps=eps):
                return generation_design(mech, {"epsilon": eps, "delta": 1e-5, **params}, len(EX), max_tokens=tokens,
                                         white_box=white_box and mech == "esa", distance=D, noise_dims=dims)
            d = design_of(False)
            row = {"mechanism": label, "max_tokens": tokens, "claim": eps,
                   "fixed_black_box": fixed_trials(design_of, eps, ("black-box",))}
            if mech == "esa":
                both = ("black-box", "white-box")
                row["fixed_white_box"] = fixed_trials(design_of, eps, both, DIMS)
                row["fixed_white_box_margin_only"] = fixed_trials(design_of, eps, both)
            for t in TARGETS:
                row[t] = _cell(lambda t=t: DesignModelTarget(d, t), d, eps, a.reps, a.cap, attack, False)
            if d.units > 1:  # black-box with the one-unit probe first (app.audit.probe.gen_probe_target)
                count, shots = GEN_UNITS[mech]
                one = generation_design(mech, {"epsilon": eps, "delta": 1e-5, **params, count: 1, shots: len(EX)},
                                        len(EX), max_tokens=tokens, white_box=False, distance=D)
                row["probe"] = {t: _cell(lambda t=t: DesignModelTarget(d, t), d, eps, a.reps, a.cap, attack, False,
                                         make_probe=lambda t=t: DesignModelTarget(one, t)) for t in TARGETS}
            if mech in COVERED:
                cfg = configured(mech, {"epsilon": eps, "delta": 1e-5, **params}, len(EX), max_tokens=tokens)

                def wb_target(t: str, d=d, mech=mech, tokens=tokens, cfg=cfg):
                    if mech == "esa":
                        return ESAWhiteBoxTarget(d, t)
                    return TokenWhiteBoxTarget(d, t, extra_steps=tokens - 1, config=cfg if mech == "mozo" else None)
                row["white_box"] = {t: _cell(lambda t=t: wb_target(t), d, eps, a.reps, a.cap, attack, True)
                                    for t in TARGETS}
            rows.append(row)
    out = {"command": "PYTHONPATH=. python " + " ".join(sys.argv), "reps": a.reps, "cap": a.cap,
           "seconds": round(time.perf_counter() - t0, 1), "rows": rows}
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    if a.json:
        print(json.dumps(out, indent=1))
        return
    def table(title: str, fixed_head: str, cells_of, fixed_of) -> None:
        print(f"{title}| mechanism | claim | {fixed_head} | {' | '.join(TARGETS)} |")
        print("|---|---|---|" + "---|" * len(TARGETS))
        for r in rows:
            cells = cells_of(r)
            if cells is not None:
                print(f"| {r['mechanism']} | {r['claim']:g} | {fixed_of(r)} | " + " | ".join(
                    f"{c['mean_trials']:.0f}, " + " / ".join(f"{k} {n}" for k, n in c.items()
                                                            if k not in ("mean_trials", "decided_by"))
                    + (" (" + ", ".join(f"{k} {n}" for k, n in c["decided_by"].items()) + ")"
                       if "decided_by" in c else "") for c in cells) + " |")

    table("", "fixed (black-box)", lambda r: [r[t] for t in TARGETS],
          lambda r: str(r["fixed_black_box"]) + (f" (white-box {r['fixed_white_box']}; margin only "
                                                 f"{r['fixed_white_box_margin_only']})" if "fixed_white_box" in r else ""))
    table("\nblack-box with the one-unit probe first (designs of several units)\n", "fixed (black-box)",
          lambda r: [r["probe"][t] for t in TARGETS] if "probe" in r else None, lambda r: r["fixed_black_box"])
    table("\nwhite-box (esa, clip_softmax, poe, mozo seen white-box)\n",
          "fixed (white-box; token mechanisms: black-box)",
          lambda r: [r["white_box"][t] for t in TARGETS] if "white_box" in r else None,
          lambda r: r.get("fixed_white_box", r["fixed_black_box"]))
    print(f"\n{a.reps} audits per cell, cap {a.cap}; {out['seconds']} s")


def _inprocess(a: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(1)
    from benchmarks.gen_sequential_inprocess import inprocess, load_models, table

    t0 = time.perf_counter()
    lm, emb = load_models()
    res = inprocess(lm, emb, mechanisms=a.mechanisms.split(","), targets=a.targets.split(","),
                    cap=50 if a.cap is None else a.cap, fixed_max=a.fixed_max, seed=a.seed, sequential=not a.fixed_only,
                    log=lambda m: print(f"[{time.perf_counter() - t0:6.0f} s] {m}", file=sys.stderr, flush=True))
    out = {"command": "PYTHONPATH=. python " + " ".join(sys.argv), "seconds": round(time.perf_counter() - t0, 1),
           "single_draws": "one audit per cell with a fixed seed: each count is one draw", **res}
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1) if a.json else table(out) + f"\n\n{out['seconds']} s")


if __name__ == "__main__":
    main()
