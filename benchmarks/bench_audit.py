"""Benchmarks for app.audit: bootstrap speed, model calls, and a canary/query sweep with the model.

    python benchmarks/bench_audit.py bootstrap                  # (a) 400k draws/hypothesis vs a Python loop
    python benchmarks/bench_audit.py llm --n-llm 8              # (b) model calls of the bootstrap (real model)
    python benchmarks/bench_audit.py sweep --trials 40          # (c) acceptance 4: non-private ICL, canary x query
    python benchmarks/bench_audit.py defences --trials 40       # ContextLeak 4.1: icl behind L0..L3
    python benchmarks/bench_audit.py all --json                 # everything, machine-readable

Targets (issue 5): 400,000 bootstrap trials per hypothesis with every estimate and the convergence
table < 2 s on two cores; the model called at most 2 x n_llm times (tight-auditing 3.5, Algorithm 1;
the paper's naive count is trials x 2 x partitions prompts).

(a) times ``bootstrap_audit`` (one vectorised draw, tight-auditing Algorithm 1 lines 5-10) against the
same procedure as a per-trial Python loop run on ``--loop-draws`` draws per hypothesis and extrapolated
linearly to ``--draws``; both in this process. (b)-(d) load the bundled SmolLM2-135M with one torch
thread (``--threads``). The non-private ``icl`` target is deterministic given its context, so model
answers are memoised per distinct prompt batch (``MemoLM``): each trial is still a fresh coin flip and
position (ContextLeak insertion), and the table reports the distinct model calls actually made.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from app.audit import (
    CampaignConfig,
    bootstrap_audit,
    gaussian_voting_noise,
    margin_statistic,
    poe_noise,
    select_threshold,
    summary,
)
from app.audit.estimates import estimates_from_counts

QUERIES = ("inquiry", "input_output", "if_then_explicit", "if_then_not_explicit", "gap", "brainwash")
CANARIES = ("hex", "unigram", "false_fact", "heldout")


# ---------------------------------------------------------------------------
# (a) bootstrap speed
# ---------------------------------------------------------------------------


def _worlds(seed: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray, Any, int, int]]:
    """Clean vectors per hypothesis, the noise, positive/negative index (labels: task x2, Yes, No)."""
    rng = np.random.default_rng(seed)
    rnm = (np.array([[0, 0, 1, 3]] * 8, float), np.array([[0, 0, 0, 4]] * 8, float),
           gaussian_voting_noise(1.0, 1e-5), 2, 3)
    # PoE: 4 experts with Dirichlet label distributions; the canary's expert favours Yes (scores lam U, from
    # the mechanism's own release).
    from app.mechanisms import get_mechanism

    poe = get_mechanism("poe")
    params = {"epsilon": 1.0}
    labels = ("a", "b", "Yes", "No")
    vw, vo = [], []
    for _ in range(16):
        base = rng.dirichlet(np.ones(4), size=4)
        with_c = base.copy()
        with_c[0] = [0.02, 0.02, 0.9, 0.06]
        vw.append(poe.release(with_c, labels, params, 4, rng).internals["clean_scores"])
        vo.append(poe.release(base, labels, params, 4, rng).internals["clean_scores"])
    return {"rnm-gaussian": rnm, "poe": (np.array(vw), np.array(vo), poe_noise(params, 4), 2, 3)}


def naive_bootstrap(vw, vo, noise, pos, neg, draws: int, rng, confidence=0.95, delta=1e-5) -> dict[str, Any]:
    """Algorithm 1 one trial at a time: resample a clean vector, add noise, release, statistic; then the
    same counts, threshold selection and estimates as ``bootstrap_audit`` (no convergence table)."""
    rel = {0: [], 1: []}
    stat = {0: [], 1: []}
    for h, votes in ((1, vw), (0, vo)):
        for _ in range(draws):
            v = votes[int(rng.integers(votes.shape[0]))]
            noisy = noise.sample(v, rng)
            rel[h].append(int(np.argmax(noisy)))
            stat[h].append(float(margin_statistic(noisy, pos, neg)[0]))
    tp = sum(r == pos for r in rel[1])
    fp = sum(r == pos for r in rel[0])
    bb = estimates_from_counts(tp, draws - tp, fp, draws - fp, threat_model="black-box", confidence=confidence,
                               delta=delta, epsilon_theory=noise.epsilon, gdp_applicable=False)
    k = draws // 2
    s1, s0 = np.array(stat[1]), np.array(stat[0])
    tau = select_threshold(s1[:k], s0[:k], confidence=confidence, delta=delta)
    tpw, fpw = int(np.sum(s1[k:] > tau)), int(np.sum(s0[k:] > tau))
    wb = estimates_from_counts(tpw, s1.size - k - tpw, fpw, s0.size - k - fpw, threat_model="white-box",
                               confidence=confidence, delta=delta, epsilon_theory=noise.epsilon, gdp_applicable=False)
    return {"black-box": bb.epsilon_lower, "white-box": wb.epsilon_lower}


def bench_bootstrap(args) -> list[dict[str, Any]]:
    rows = []
    for name, (vw, vo, noise, pos, neg) in _worlds().items():
        walls, cpus = [], []
        r = None
        for i in range(args.repeat):
            w0, c0 = time.perf_counter(), time.process_time()
            r = bootstrap_audit(vw, vo, noise, pos, neg, rng=np.random.default_rng(i), n_sample=args.draws,
                                delta=1e-5)
            walls.append(time.perf_counter() - w0)
            cpus.append(time.process_time() - c0)
        w0 = time.perf_counter()
        naive = naive_bootstrap(vw, vo, noise, pos, neg, args.loop_draws, np.random.default_rng(0))
        loop = time.perf_counter() - w0
        extrapolated = loop * args.draws / args.loop_draws
        bb, wb = r.estimates["black-box"], r.estimates["white-box"]
        rows.append({
            "case": f"bootstrap {name}, {args.draws:,} draws/hypothesis, all estimates + convergence",
            "wall_s_median": statistics.median(walls), "wall_s_max": max(walls),
            "cpu_s_median": statistics.median(cpus), "repeat": args.repeat,
            "convergence_rows": len(r.convergence),
            "naive_loop_s": loop, "naive_loop_draws": args.loop_draws, "naive_extrapolated_s": extrapolated,
            "speedup": extrapolated / statistics.median(walls),
            "black_box_epsilon_lower": bb.epsilon_lower, "white_box_epsilon_lower": wb.epsilon_lower,
            "white_box_epsilon_gdp": wb.epsilon_gdp, "epsilon_claimed": noise.epsilon,
            "naive_loop_estimates": naive,
        })
    return rows


# ---------------------------------------------------------------------------
# Model helpers
# ---------------------------------------------------------------------------


class CountingLM:
    """The model, counting ``continuation_logprobs`` calls and prompts (the label-scoring path)."""

    def __init__(self, lm):
        self._lm = lm
        self.calls = 0
        self.prompts = 0

    def continuation_logprobs(self, prompts, continuations):
        self.calls += 1
        self.prompts += len(prompts)
        return self._lm.continuation_logprobs(prompts, continuations)

    def __getattr__(self, name):
        return getattr(self._lm, name)


class MemoLM(CountingLM):
    """CountingLM that answers a repeated (prompts, continuations) batch from memory (deterministic
    targets only); ``calls`` counts the distinct batches sent to the model, ``asked`` all of them."""

    def __init__(self, lm):
        super().__init__(lm)
        self.asked = 0
        self._memo: dict[tuple, np.ndarray] = {}

    def continuation_logprobs(self, prompts, continuations):
        self.asked += 1
        key = (tuple(prompts), tuple(continuations))
        if key not in self._memo:
            self._memo[key] = np.asarray(super().continuation_logprobs(prompts, continuations))
        return self._memo[key].copy()


def load_lm(threads: int):
    import torch

    torch.set_num_threads(threads)
    from app.llm import bundled_specs, load_model

    cache = Path.home() / ".cache" / "dpicl" / "models"
    spec = next(s for s in bundled_specs() if s.kind == "lm")
    return load_model(spec, cache_dir=cache, device="cpu", dtype="float32")


def task(n: int, seed: int = 0):
    from app.icl import load_bundled

    ds = load_bundled()
    tmpl = {"instruction": ds.template.instruction, "input_prefix": ds.template.input_prefix,
            "output_prefix": ds.template.output_prefix}
    label = ds.labels[-1]
    pool = [e for e in ds.exemplars("train") if e[1] != label and len(e[0]) < 70]
    rng = np.random.default_rng(seed)
    ex = [pool[int(i)] for i in rng.choice(len(pool), size=n, replace=False)]
    return ds, ex, list(ds.labels), tmpl, label


def make_canary_of(kind: str, ds, lm, label: str, seed: int):
    from app.audit import make_canary

    rng = np.random.default_rng(seed)
    if kind == "heldout":
        held = [e for e in ds.exemplars("test") if len(e[0]) < 70]
        return make_canary("heldout", rng, heldout=held)
    return make_canary(kind, rng, label=label, dataset_texts=[a for a, _ in ds.exemplars("train")], tokenizer=lm)


# ---------------------------------------------------------------------------
# (b) model calls of the bootstrap
# ---------------------------------------------------------------------------


def bench_llm(args, lm) -> list[dict[str, Any]]:
    from app.audit import MechanismTarget, run_campaign

    ds, ex, labels, tmpl, label = task(4, seed=1)
    rows = []
    for mech, params, parts in (("rnm", {"epsilon": 1.0, "delta": 1e-5, "partitions": 4}, 4),
                                ("poe", {"epsilon": 1.0}, 4)):
        counted = CountingLM(lm)
        target = MechanismTarget(counted, mech, params, tmpl)
        canary = make_canary_of("hex", ds, lm, label, 0)
        cfg = CampaignConfig(mode="bootstrap", n_llm=args.n_llm, n_sample=args.draws)
        t0 = time.perf_counter()
        r = run_campaign(target, ex, canary, "input_output", task_labels=labels, template=tmpl, config=cfg,
                         rng=np.random.default_rng(2))
        rows.append({
            "case": f"bootstrap {mech}, n_llm = {args.n_llm}, {args.draws:,} draws/hypothesis",
            "lm_calls": counted.calls, "prompts": counted.prompts, "limit_2_n_llm": 2 * args.n_llm,
            "naive_prompts": args.draws * 2 * parts, "paper_example_prompts": 400_000 * 2 * 10,
            "seconds": time.perf_counter() - t0, "epsilon": r.epsilon, "epsilon_claimed": r.epsilon_claimed,
            "black_box_epsilon_lower": r.estimates["black-box"].epsilon_lower,
            "white_box_epsilon_lower": r.estimates["white-box"].epsilon_lower,
        })
    return rows


# ---------------------------------------------------------------------------
# (c) acceptance 4 sweep and (d) defences
# ---------------------------------------------------------------------------


def _direct(lm, kind, query, *, trials, n, seed, defence=None, judge_calibrate=True):
    from app.audit import MechanismTarget, run_campaign

    ds, ex, labels, tmpl, label = task(n, seed=seed)
    memo = MemoLM(lm)
    target = MechanismTarget(memo, "icl", {}, tmpl, defence=defence, judge_calibrate=judge_calibrate)
    canary = make_canary_of(kind, ds, lm, label, seed)
    cfg = CampaignConfig(trials=trials, insertion="contextleak")
    t0 = time.perf_counter()
    r = run_campaign(target, ex, canary, query, task_labels=labels, template=tmpl, config=cfg,
                     rng=np.random.default_rng(seed))
    s = summary(r)
    keep = ("black_box_tpr", "black_box_fpr", "black_box_accuracy", "black_box_epsilon_lower",
            "black_box_accuracy_epsilon", "white_box_accuracy", "white_box_epsilon_lower", "white_box_epsilon_gdp")
    row = {"canary": kind, "query": query, "trials": trials, **{k: s.get(k) for k in keep},
           "epsilon": r.epsilon, "distinct_model_calls": memo.calls, "asked": memo.asked,
           "seconds": time.perf_counter() - t0}
    if defence is not None:
        row.update(defence=target.defence, judge_calls=target.judge_calls, refusals=target.refusals)
    return row


def bench_sweep(args, lm) -> list[dict[str, Any]]:
    rows = []
    for kind in CANARIES:
        for q in QUERIES:
            rows.append(_direct(lm, kind, q, trials=args.trials, n=args.exemplars, seed=args.seed))
            if args.verbose:
                print(rows[-1], file=sys.stderr, flush=True)
    return rows


def bench_defences(args, lm) -> list[dict[str, Any]]:
    rows = []
    for q in ("inquiry", "input_output"):
        for level in ("L0", "L1", "L2", "L3"):
            rows.append(_direct(lm, "hex", q, trials=args.trials, n=args.exemplars, seed=args.seed, defence=level))
            if args.verbose:
                print(rows[-1], file=sys.stderr, flush=True)
        rows.append(_direct(lm, "hex", q, trials=args.trials, n=args.exemplars, seed=args.seed, defence="L3",
                            judge_calibrate=False))
        rows[-1]["defence"] = "L3 (uncalibrated judge)"
    return rows


# ---------------------------------------------------------------------------


def _f(x, nd=3):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.{nd}f}" if isinstance(x, float) else str(x)


def print_tables(out: dict[str, Any]) -> None:
    m = out["meta"]
    print(f"python {m['python']}, numpy {m['numpy']}, {m['machine']}, torch threads {m['threads']}")
    if "bootstrap" in out:
        print("\n(a) bootstrap: wall median / max, CPU median; naive per-trial loop extrapolated")
        for r in out["bootstrap"]:
            print(f"  {r['case']}: {r['wall_s_median']:.3f} / {r['wall_s_max']:.3f} s wall, {r['cpu_s_median']:.3f} s CPU; "
                  f"loop {r['naive_loop_s']:.2f} s for {r['naive_loop_draws']:,} -> {r['naive_extrapolated_s']:.1f} s "
                  f"(x{r['speedup']:.0f}); eps_lower bb {r['black_box_epsilon_lower']:.3f} wb "
                  f"{r['white_box_epsilon_lower']:.3f} (claimed {r['epsilon_claimed']:g}); "
                  f"{r['convergence_rows']} convergence rows")
    if "llm" in out:
        print("\n(b) model calls of the bootstrap")
        for r in out["llm"]:
            print(f"  {r['case']}: {r['lm_calls']} calls ({r['prompts']} prompts) <= 2 x n_llm = {r['limit_2_n_llm']}; "
                  f"naive {r['naive_prompts']:,} prompts (paper example {r['paper_example_prompts']:,}); "
                  f"{r['seconds']:.1f} s; eps {r['epsilon']:.3f} (claimed {r['epsilon_claimed']:g})")
    for key, title in (("sweep", "(c) non-private icl, ContextLeak insertion"), ("defences", "(d) icl behind defences, hex")):
        if key not in out:
            continue
        print(f"\n{title}: accuracy, TPR/FPR (black-box), CP eps lower bb / wb, wb GDP estimate")
        for r in out[key]:
            head = f"{r['canary']:<10} {r['query']:<20}" + (f" {r['defence']:<24}" if "defence" in r else "")
            tail = f" judge {r['judge_calls']} refusals {r['refusals']}" if "judge_calls" in r else ""
            print(f"  {head} acc {_f(r['black_box_accuracy'])} TPR {_f(r['black_box_tpr'])} FPR {_f(r['black_box_fpr'])}"
                  f" eps_bb {_f(r['black_box_epsilon_lower'])} eps_wb {_f(r['white_box_epsilon_lower'])}"
                  f" gdp_wb {_f(r['white_box_epsilon_gdp'])} calls {r['distinct_model_calls']}/{r['asked']}"
                  f" {r['seconds']:.0f}s{tail}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("bootstrap", "llm", "sweep", "defences", "all"))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--draws", type=int, default=400_000, help="bootstrap draws per hypothesis")
    ap.add_argument("--loop-draws", type=int, default=20_000, help="naive loop draws per hypothesis")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--n-llm", type=int, default=8)
    ap.add_argument("--trials", type=int, default=40, help="direct trials per sweep / defence cell")
    ap.add_argument("--exemplars", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    out: dict[str, Any] = {"meta": {"python": platform.python_version(), "numpy": np.__version__,
                                    "machine": platform.machine(), "threads": args.threads,
                                    "argv": sys.argv[1:]}}
    t0 = time.perf_counter()
    if args.what in ("bootstrap", "all"):
        out["bootstrap"] = bench_bootstrap(args)
    if args.what != "bootstrap":
        lm = load_lm(args.threads)
        if args.what in ("llm", "all"):
            out["llm"] = bench_llm(args, lm)
        if args.what in ("sweep", "all"):
            out["sweep"] = bench_sweep(args, lm)
        if args.what in ("defences", "all"):
            out["defences"] = bench_defences(args, lm)
    out["meta"]["seconds"] = time.perf_counter() - t0
    if args.json:
        print(json.dumps(out, indent=2, default=str))
    else:
        print_tables(out)


if __name__ == "__main__":
    main()
