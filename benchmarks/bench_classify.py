"""Utility and latency of the classification mechanisms on the bundled task.

    python benchmarks/bench_classify.py utility   --seeds 4 --queries 30      # accuracy table
    python benchmarks/bench_classify.py sweep-clip --seeds 4 --queries 30     # PoE clip sweep (validation)
    python benchmarks/bench_classify.py latency   --queries 6                 # rnm(T=4) / icl, same process

Protocol (after PoEtry Appendix E): each seed draws 8 exemplars from the train
split at random (not class-balanced) and ``--queries`` test queries; T = 4
uses the first 4 of the 8. Every mechanism sees the same draws.

* zero_shot, icl (all T exemplars in one prompt): the label distribution's argmax.
* rnm (Gaussian, analytic sigma, delta 1e-5), rnm-gumbel (pure eps), poe: one
  exemplar per partition / expert, so the T partitions are the T one-shot
  prompts in any order, and ``classify`` reduces to ``release`` of those
  prompts' label distributions. We score each exemplar's one-shot prompt for
  all queries in one call (the exemplar is then a shared prefix that the
  backend computes once) and call each mechanism's ``release``. Accuracy is the
  expected accuracy over the mechanism's own noise: the exact probability
  that the released label is the true one (``exact_distribution`` / the PoE
  softmax), averaged over queries; this removes the noise-sampling variance
  but not the exemplar/query variance.
* "votes, no noise" and "PoE, no noise": the same aggregates with eps = inf
  (PoEtry's "hard/soft conditional independence" rows).

Numbers are per-seed means; the table shows mean +- standard error over seeds.
The clip sweep uses validation queries drawn from the train split (disjoint from
the exemplars), never the test split.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

EPSILONS = (1.0, 2.0, 4.0, 8.0)
TS = (4, 8)
CLIPS = (0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0)
DELTA = 1e-5


def load_lm(threads: int, device: str = "cpu", source: str | None = None):
    import torch

    from app.llm import ModelSpec, bundled_specs, load_model

    torch.set_num_threads(threads)
    spec = next(s for s in bundled_specs() if s.kind == "lm")
    spec = ModelSpec(spec.name, spec.kind, source or spec.source, spec.backend,
                     {**spec.options, "num_threads": threads})
    cache = Path(os.environ.get("DPICL_MODEL_CACHE_DIR", Path.home() / ".cache" / "dpicl" / "models")).expanduser()
    return load_model(spec, cache_dir=cache, device=device, dtype="float32")


CALIBRATE = False  # set from --calibrate


def score(lm, ds, contexts: list[list[tuple[str, str]]], queries: list[str]) -> dict[str, np.ndarray]:
    """{"raw": (len(contexts), len(queries), K)} label distributions, plus "cal" (contextual
    calibration) with --calibrate; one model call per context (the context is the prompts'
    shared prefix; its three content-free twins are shared by all queries, so calibration
    adds 3 prompts per call, and the same call gives both variants)."""
    from app.icl import ICLPrompt, score_labels

    raw, cal = [], []
    for ctx in contexts:
        prompts = [ICLPrompt.of(ctx, q) for q in queries]
        sc = score_labels(lm, prompts, ds.labels, template=ds.template, calibrate=CALIBRATE)
        raw.append(sc.uncalibrated)
        cal.append(sc.probs)
    return {"raw": np.stack(raw), **({"cal": np.stack(cal)} if CALIBRATE else {})}


def draw(ds, rng: np.random.Generator, n_queries: int, validation: bool):
    """8 exemplars from train; queries from test (or, for validation, other train rows)."""
    train = ds.exemplars("train")
    idx = rng.permutation(len(train))
    exemplars = [train[i] for i in idx[:8]]
    if validation:
        q = [train[i] for i in idx[8:8 + n_queries]]
    else:
        test = ds.exemplars("test")
        q = [test[i] for i in rng.choice(len(test), size=n_queries, replace=False)]
    return exemplars, [x[0] for x in q], np.array([ds.labels.index(x[1]) for x in q])


def expected_accuracy(mech, unit_probs: np.ndarray, truth: np.ndarray, labels, params, t: int) -> float:
    """Mean over queries of P(release = truth) from the mechanism's exact law. unit_probs: (T, Q, K)."""
    acc = []
    for qi in range(unit_probs.shape[1]):
        res = mech.release(unit_probs[:t, qi], labels, params, t, np.random.default_rng(0))
        acc.append(res.distribution[labels[truth[qi]]])
    return float(np.mean(acc))


def no_noise_accuracy(kind: str, unit_probs: np.ndarray, truth: np.ndarray, t: int, clip: float) -> float:
    from app.mechanisms import aggregate as agg

    acc = []
    for qi in range(unit_probs.shape[1]):
        p = unit_probs[:t, qi]
        s = agg.votes_from_distributions(p) if kind == "votes" else agg.clipped_log_probs(p, clip).sum(axis=0)
        top = np.flatnonzero(s == s.max())
        acc.append(float(truth[qi] in top) / len(top))  # ties split evenly
    return float(np.mean(acc))


def mean_se(xs: list[float]) -> tuple[float, float]:
    m = statistics.fmean(xs)
    se = statistics.stdev(xs) / len(xs) ** 0.5 if len(xs) > 1 else float("nan")
    return m, se


def fmt(xs: list[float]) -> str:
    m, se = mean_se(xs)
    return f"{100 * m:.1f} ± {100 * se:.1f}"


# ---------------------------------------------------------------------------


def run_utility(args) -> dict[str, Any]:
    from app.icl import load_bundled
    from app.mechanisms import DEFAULT_CLIP, DEFAULT_CLIP_CALIBRATED, get_mechanism

    ds = load_bundled(args.task)
    lm = load_lm(args.threads)
    rnm, poe = get_mechanism("rnm"), get_mechanism("poe")
    clips = {"raw": args.clip or DEFAULT_CLIP, "cal": args.clip or DEFAULT_CLIP_CALIBRATED}
    rows: dict[str, list[float]] = {}

    def add(key, value):
        rows.setdefault(key, []).append(value)

    t0 = time.perf_counter()
    for seed in range(args.seeds):
        rng = np.random.default_rng(1000 + seed)
        ex, queries, truth = draw(ds, rng, args.queries, validation=False)
        one_all = score(lm, ds, [[e] for e in ex], queries)  # (8, Q, K) per variant
        zs_all = score(lm, ds, [[]], queries)
        icl_all = {t: score(lm, ds, [ex[:t]], queries) for t in TS}
        for variant, one_shot in one_all.items():
            v, clip = ("" if variant == "raw" else "cal:"), clips[variant]
            add(f"{v}zero_shot", float(np.mean(zs_all[variant][0].argmax(1) == truth)))
            for t in TS:
                add(f"{v}icl|T={t}", float(np.mean(icl_all[t][variant][0].argmax(1) == truth)))
                add(f"{v}votes, no noise|T={t}", no_noise_accuracy("votes", one_shot, truth, t, clip))
                add(f"{v}PoE, no noise|T={t}", no_noise_accuracy("poe", one_shot, truth, t, clip))
                for eps in EPSILONS:
                    add(f"{v}rnm|T={t}|eps={eps:g}", expected_accuracy(
                        rnm, one_shot, truth, ds.labels, {"epsilon": eps, "delta": DELTA, "exact_distribution": True}, t))
                    add(f"{v}rnm-gumbel|T={t}|eps={eps:g}", expected_accuracy(
                        rnm, one_shot, truth, ds.labels, {"epsilon": eps, "noise": "gumbel"}, t))
                    add(f"{v}poe|T={t}|eps={eps:g}", expected_accuracy(
                        poe, one_shot, truth, ds.labels, {"epsilon": eps, "clip": clip}, t))
        print(f"seed {seed} done in {time.perf_counter() - t0:.0f}s", file=sys.stderr, flush=True)
    return {"rows": rows, "clip": clips, "task": ds.name, "seconds": time.perf_counter() - t0}


def table_utility(res: dict[str, Any], v: str = "") -> str:
    rows = {k[len(v):]: x for k, x in res["rows"].items() if k.startswith(v) and (v or not k.startswith("cal:"))}
    lines = ["| mechanism | T | " + " | ".join(f"eps={e:g}" for e in EPSILONS) + " | no DP |", "|---|---|" + "---|" * (len(EPSILONS) + 1)]
    lines.append("| zero_shot | 0 | " + " | ".join("" for _ in EPSILONS) + f" | {fmt(rows['zero_shot'])} |")
    for t in TS:
        lines.append(f"| icl (one prompt) | {t} | " + " | ".join("" for _ in EPSILONS) + f" | {fmt(rows[f'icl|T={t}'])} |")
        for name, nn in (("rnm", "votes, no noise"), ("rnm-gumbel", None), ("poe", "PoE, no noise")):
            cells = [fmt(rows[f"{name}|T={t}|eps={e:g}"]) for e in EPSILONS]
            extra = fmt(rows[f"{nn}|T={t}"]) if nn else ""
            lines.append(f"| {name} | {t} | " + " | ".join(cells) + f" | {extra} |")
    return "\n".join(lines)


def run_sweep(args) -> dict[str, Any]:
    from app.icl import load_bundled
    from app.mechanisms import get_mechanism

    ds = load_bundled(args.task)
    lm = load_lm(args.threads)
    poe = get_mechanism("poe")
    rows: dict[str, list[float]] = {}
    t0 = time.perf_counter()
    for seed in range(args.seeds):
        rng = np.random.default_rng(2000 + seed)
        ex, queries, truth = draw(ds, rng, args.queries, validation=True)
        for variant, one_shot in score(lm, ds, [[e] for e in ex], queries).items():
            v = "" if variant == "raw" else "cal:"
            for c in CLIPS:
                for t in TS:
                    for eps in EPSILONS:
                        rows.setdefault(f"{v}{c:g}|{t}|{eps:g}", []).append(
                            expected_accuracy(poe, one_shot, truth, ds.labels, {"epsilon": eps, "clip": c}, t))
        print(f"seed {seed} done in {time.perf_counter() - t0:.0f}s", file=sys.stderr, flush=True)
    out: dict[str, Any] = {"rows": rows, "task": ds.name, "seconds": time.perf_counter() - t0}
    for v in (["", "cal:"] if CALIBRATE else [""]):
        means = {c: statistics.fmean(statistics.fmean(rows[f"{v}{c:g}|{t}|{e:g}"]) for t in TS for e in EPSILONS)
                 for c in CLIPS}
        out[f"{v}mean_over_settings"] = {f"{c:g}": m for c, m in means.items()}
        out[f"{v}best_clip"] = max(CLIPS, key=lambda c: means[c])
    return out


def table_sweep(res: dict[str, Any], v: str = "") -> str:
    rows = {k[len(v):]: x for k, x in res["rows"].items() if k.startswith(v) and (v or not k.startswith("cal:"))}
    head = "| c | " + " | ".join(f"T={t} eps={e:g}" for t in TS for e in EPSILONS) + " | mean |"
    lines = [head, "|---|" + "---|" * (len(TS) * len(EPSILONS) + 1)]
    for c in CLIPS:
        cells = [fmt(rows[f"{c:g}|{t}|{e:g}"]) for t in TS for e in EPSILONS]
        lines.append(f"| {c:g} | " + " | ".join(cells) + f" | {100 * res[v + 'mean_over_settings'][f'{c:g}']:.1f} |")
    return "\n".join(lines)


def run_latency(args) -> dict[str, Any]:
    from app.icl import load_bundled
    from app.mechanisms import get_mechanism

    ds = load_bundled(args.task)
    lm = load_lm(args.threads, args.device, args.source)
    ex = ds.exemplars("train")[:4]
    queries = [e.input for e in ds.test[: args.queries]]
    mechs = {"rnm": (get_mechanism("rnm"), {"epsilon": 1.0}), "poe": (get_mechanism("poe"), {"epsilon": 1.0}),
             "icl": (get_mechanism("icl"), {})}
    # --label-paths: the HF backend's scoring of single-token labels (``single_token_fast_path``),
    # each measured interleaved with the others in this process: "two-stage" (the general path),
    # "one-pass" (one next-token pass per prompt); "/no-reuse": with ``prefix_reuse`` off (no
    # separate forward pass for a batch's shared prefix); "/always": ``shared_prefix_pass="always"``
    # (the shared prefix computed in a pass of its own even on CUDA, the pre-"auto" behaviour).
    paths = {"two-stage": (False, True, "auto"), "one-pass": (True, True, "auto"),
             "two-stage/no-reuse": (False, False, "auto"), "one-pass/no-reuse": (True, False, "auto"),
             "two-stage/always": (False, True, "always"), "one-pass/always": (True, True, "always")}
    chosen = args.label_paths.split(",") if args.label_paths else [None]
    out: dict[str, Any] = {"labels_single_token": all(len(lm.tokenize(c)) == 1 for c in
                                                      ds.template.continuations(ds.labels))}
    for mode in ("cold", "warm"):
        times: dict[tuple, list[float]] = {(path, k): [] for path in chosen for k in mechs}
        for path in chosen:
            if path is not None:
                lm.single_token_fast_path, lm.prefix_reuse, lm.shared_prefix_pass = paths[path]
            for name, (m, p) in mechs.items():  # warm-up
                m.classify(lm, ex, queries[0], ds.labels, ds.template, p, np.random.default_rng(0))
        for q in queries:
            for path in chosen:
                if path is not None:
                    lm.single_token_fast_path, lm.prefix_reuse, lm.shared_prefix_pass = paths[path]
                for name, (m, p) in mechs.items():  # interleaved: the machine's load hits all alike
                    if mode == "cold":
                        lm.clear_prefix_cache()
                    t = time.perf_counter()
                    m.classify(lm, ex, q, ds.labels, ds.template, p, np.random.default_rng(0))
                    times[path, name].append(time.perf_counter() - t)
        for path in chosen:
            med = {k: statistics.median(times[path, k]) for k in mechs}
            res = {"median_s": med, "rnm_over_icl": med["rnm"] / med["icl"], "poe_over_icl": med["poe"] / med["icl"]}
            if path is None:
                out[mode] = res
            else:
                out.setdefault(mode, {})[path] = res
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["utility", "sweep-clip", "latency"])
    ap.add_argument("--task", default="assistant_intents", help="bundled task (app.icl.load_bundled)")
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--clip", type=float, default=None,
                    help="PoE clip for 'utility' (default: DEFAULT_CLIP, DEFAULT_CLIP_CALIBRATED when calibrated)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a shared machine)")
    ap.add_argument("--json", type=Path, default=None, help="also write the raw results here")
    ap.add_argument("--calibrate", action="store_true", help="contextual calibration (Zhao et al. 2021) everywhere")
    ap.add_argument("--label-paths", default=None,
                    help="latency: compare label scoring paths: two-stage, one-pass, two-stage/no-reuse, "
                         "one-pass/no-reuse (comma-separated)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="latency: where the model runs")
    ap.add_argument("--source", default=None, help="model source instead of the bundled one (e.g. a .gguf path)")
    args = ap.parse_args(argv)
    global CALIBRATE
    CALIBRATE = args.calibrate
    variants = ["", "cal:"] if args.calibrate else [""]
    if args.what == "utility":
        res = run_utility(args)
        for v in variants:
            c = res["clip"]["cal" if v else "raw"]
            print(f"\n{res['task']}, {'calibrated' if v else 'uncalibrated'} (PoE clip {c:g})\n" + table_utility(res, v))
    elif args.what == "sweep-clip":
        res = run_sweep(args)
        for v in variants:
            print(f"\n{'calibrated' if v else 'uncalibrated'}\n" + table_sweep(res, v))
            print(f"best clip (mean over T and eps): {res[v + 'best_clip']:g}")
    else:
        res = run_latency(args)
        print(json.dumps(res, indent=2))
    res["machine"] = {"python": platform.python_version(), "cpu_count": os.cpu_count(), "threads": args.threads,
                      "calibrate": args.calibrate,
                      "load_avg": os.getloadavg(), "seeds": args.seeds, "queries": args.queries}
    print(f"\n{res['machine']}", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(res, indent=1, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
