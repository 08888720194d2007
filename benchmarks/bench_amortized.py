"""Answers that outlast the budget: pay once for DP synthetic demonstrations vs pay per answer.

    python benchmarks/bench_amortized.py --queries 100 --epsilons 1 4 8 --shots 2 --max-tokens 12 --partitions 32

On the bundled ``assistant_intents`` task (5 labels) and the bundled SmolLM2-135M-Instruct, one
process, the same ``--queries`` test queries for every row; a TOTAL (epsilon, delta = 1e-5) for the
whole workload of ``--queries`` answers:

* (a) ``rnm`` per answer (Gaussian, ``--rnm-partitions`` one-shot partitions, replace-one): the
  total budget split evenly over the answers with the exact GDP composition of the N Gaussian
  releases (``calibrate_gaussian(total, delta, sqrt 2, compositions=N)``; tighter than the
  ledger's RDP composition, so this favours (a)). Accuracy is the expected accuracy over rnm's
  own noise (its exact released-label law, ``exact_distribution``).
* (b) ``synthetic_icl``: ``--shots`` synthetic demonstrations per label made once by the
  synthesizer (``app.mechanisms.synthesize``, Tang et al. 2024 Alg. 1) at the total (epsilon,
  delta), then ICL over them for every query at no further cost. Reported with the synthesizer's
  wall time and forward passes (each pass = one batched decode step of partitions rows, or the
  public row).
* (c) zero-shot; (d) non-private ICL with the same number of real demonstrations (class balanced,
  drawn at random from the train split).

Everything is one seed: the table is a single draw, not a mean (standard errors are binomial).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

DELTA = 1e-5


def _se(acc: float, n: int) -> float:
    return math.sqrt(max(acc * (1 - acc), 0.0) / n)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 4.0, 8.0])
    ap.add_argument("--shots", type=int, default=2, help="synthetic demonstrations per label")
    ap.add_argument("--max-tokens", type=int, default=12)
    ap.add_argument("--partitions", type=int, default=32, help="synthesizer partitions per label")
    ap.add_argument("--rnm-partitions", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=str, default=None)
    ap.add_argument("--model", default="", help="bundled model key, e.g. gemma3-270m (default: the bundled SmolLM2)")
    ap.add_argument("--no-rnm", action="store_true", help="skip (a) (the filter comparison does not need it)")
    a = ap.parse_args(argv)

    import torch

    torch.set_num_threads(a.threads)
    from app.icl import load_bundled
    from app.llm import ModelSpec, bundled_specs, load_model
    from app.mechanisms import get_mechanism
    from app.mechanisms import synthesize as syn
    from app.mechanisms.synth_filter import filter_demonstrations
    from app.privacy.calibration import calibrate_gaussian
    from app.privacy.gaussian import gaussian_epsilon
    from tests.conftest import model_cache_dir

    spec = (ModelSpec(a.model, "lm", f"bundled:{a.model}") if a.model
            else next(s for s in bundled_specs() if s.kind == "lm"))
    lm = load_model(spec, cache_dir=model_cache_dir(), device="cpu", dtype="float32")
    ds = load_bundled()
    train, test = ds.exemplars("train"), ds.exemplars("test")
    labels = list(ds.labels)
    rng = np.random.default_rng(a.seed)
    qidx = rng.choice(len(test), size=a.queries, replace=False)
    queries = [test[int(i)] for i in qidx]
    template = ds.template
    k = a.shots * len(labels)
    rows: list[dict] = []

    def run_icl(mech: str, demos, name: str, extra: dict | None = None) -> dict:
        m = get_mechanism(mech)
        t0 = time.perf_counter()
        correct = sum(m.classify(lm, demos, q, labels, template, {}).label == y for q, y in queries)
        acc = correct / len(queries)
        row = {"row": name, "accuracy": acc, "se": _se(acc, len(queries)), "answer_seconds":
               (time.perf_counter() - t0) / len(queries), **(extra or {})}
        print(json.dumps(row), flush=True)
        return row

    rows.append(run_icl("zero_shot", [], "(c) zero-shot", {"epsilon_total": 0.0}))
    by = {y: [e for e in train if e[1] == y] for y in labels}
    real = []
    for y in labels:
        real += [by[y][int(i)] for i in rng.choice(len(by[y]), size=a.shots, replace=False)]
    order = rng.permutation(len(real))
    real = [real[int(i)] for i in order]
    rows.append(run_icl("icl", real, f"(d) non-private ICL, {k} real demos", {"epsilon_total": None}))

    counts = Counter(b for _, b in train)
    for eps in a.epsilons:
        # (a) rnm per answer, the total split over N answers (exact GDP composition).
        sigma = calibrate_gaussian(eps, DELTA, sensitivity=math.sqrt(2), compositions=a.queries).value
        eps_a = gaussian_epsilon(sigma, DELTA, math.sqrt(2), 1)
        rnm = get_mechanism("rnm")
        queries_a: list = [] if a.no_rnm else queries
        for _ in (queries if a.no_rnm else []):  # the same draws as (a) makes: (b)'s seeds do not move
            rng.integers(2**32)
        t0 = time.perf_counter()
        exp_acc = 0.0
        for q, y in queries_a:
            res = rnm.classify(lm, train, q, labels, template,
                               {"epsilon": eps_a, "delta": DELTA, "partitions": a.rnm_partitions,
                                "exact_distribution": True}, np.random.default_rng(rng.integers(2**32)))
            exp_acc += float(res.distribution[y])
        acc = exp_acc / len(queries)
        row = {"row": f"(a) rnm per answer, eps {eps:g} total", "epsilon_total": eps, "epsilon_per_answer": eps_a,
               "sigma": sigma, "accuracy": acc, "se": _se(acc, len(queries)),
               "answer_seconds": (time.perf_counter() - t0) / len(queries)}
        if queries_a:
            print(json.dumps(row), flush=True)
            rows.append(row)
        # (b) synthesize once, then synthetic ICL: every non-empty text, and (b+f) the same set after the
        # degenerate-demonstration filter that the synthesize job applies (post-processing, same charge).
        cfg = syn.plan(epsilon=eps, delta=DELTA, labels=labels, label_counts=counts, shots_per_label=a.shots,
                       max_tokens=a.max_tokens, partitions=a.partitions)
        out = syn.synthesize(lm, train, cfg, input_prefix=template.input_prefix,
                             rng=np.random.default_rng(rng.integers(2**32)), filter_degenerate=False)
        perm = [int(i) for i in rng.permutation(len(out.examples))]
        demos = [out.examples[i] for i in perm]
        filt = filter_demonstrations(demos, labels)
        extra = {"epsilon_total": eps, "epsilon_charged": out.privacy["epsilon"], "sigma": cfg.sigma,
                 "synth_seconds": out.seconds, "synth_forward_passes": out.forward_passes,
                 "synthetic_kept": len(out.examples), "synthetic_examples": out.examples}
        extra_f = {**extra, "synthetic_kept": len(filt.kept), "synthetic_examples": filt.kept,
                   "filter_dropped": filt.dropped}
        name = f"(b) synthetic_icl, {a.shots}/label, eps {eps:g} total"
        for rname, ds_demos, ex in ((name, demos, extra), (name.replace("(b)", "(b+f) filtered"), filt.kept, extra_f)):
            if not ds_demos:  # every demonstration came out empty: nothing to prompt with
                rows.append({"row": rname, "accuracy": float("nan"), "se": 0.0, **ex})
            elif ds_demos is filt.kept and filt.dropped_total == 0:  # the same set: the same accuracy
                rows.append({**rows[-1], "row": rname, **ex})
            else:
                rows.append(run_icl("synthetic_icl", ds_demos, rname, ex))

    meta = {"model": lm.name, "task": ds.name, "queries": a.queries, "no_rnm": a.no_rnm, "shots_per_label": a.shots,
            "max_tokens": a.max_tokens, "partitions": a.partitions, "rnm_partitions": a.rnm_partitions,
            "seed": a.seed, "threads": a.threads, "machine": platform.platform(), "delta": DELTA}
    print("\n| row | accuracy | notes |\n|---|---|---|")
    for r in rows:
        note = []
        if "epsilon_per_answer" in r:
            note.append(f"eps/answer {r['epsilon_per_answer']:.4g}, sigma {r['sigma']:.3g}")
        if "synth_seconds" in r:
            note.append(f"synthesis {r['synth_seconds']:.0f} s, {r['synth_forward_passes']} passes, "
                        f"{r['synthetic_kept']} kept, sigma {r['sigma']:.3g}")
        if "filter_dropped" in r:
            note.append("dropped " + (", ".join(f"{n} {w}" for w, n in r["filter_dropped"].items() if n) or "none"))
        print(f"| {r['row']} | {r['accuracy']:.3f} +- {r['se']:.3f} | {'; '.join(note)} |")
    if a.json:
        Path(a.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
