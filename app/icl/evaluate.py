"""Accuracy of zero-shot vs in-context classification on a labelled task (the bundled one by default).

    python -m app.icl.evaluate --shots 8 --queries 100 --contexts 5 --seed 0

Design: ``queries`` test examples are drawn without replacement and split into
``contexts`` groups; each group gets its own ``shots`` demonstrations drawn
without replacement from the training split (in random order). Zero-shot
scores the same queries with no demonstrations, so the two accuracies are
paired. One model call per group: the group's prompts share the
demonstrations as a common prefix, which the ``hf`` backend computes once.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

from .datasets import LabeledDataset, load_bundled
from .scoring import ICLPrompt, score_labels
from .templates import PromptTemplate


@dataclass(frozen=True)
class Accuracy:
    shots: int
    calibrate: bool
    n: int
    correct: int
    accuracy: float
    std_error: float  # binomial, sqrt(a (1 - a) / n)
    predicted_counts: dict[str, int]
    correct_mask: tuple[bool, ...]  # per query, in draw order (for paired comparisons)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("correct_mask")
        return d


def draw_queries(dataset: LabeledDataset, n_queries: int, rng: np.random.Generator) -> list[int]:
    if n_queries > len(dataset.test):
        raise ValueError(f"asked for {n_queries} queries, the test split has {len(dataset.test)}")
    return [int(i) for i in rng.choice(len(dataset.test), size=n_queries, replace=False)]


def accuracy(
    lm: Any,
    dataset: LabeledDataset,
    query_idx: Sequence[int],
    *,
    shots: int,
    contexts: int,
    rng: np.random.Generator,
    calibrate: bool = False,
    template: "PromptTemplate | None" = None,
) -> Accuracy:
    """Accuracy on ``dataset.test[query_idx]`` with ``shots`` demonstrations (0: zero-shot)."""
    tpl = template or dataset.template
    labels = dataset.labels
    groups = np.array_split(np.asarray(query_idx), max(1, contexts))
    gold, pred = [], []
    for group in groups:
        if len(group) == 0:
            continue
        ex_idx = rng.choice(len(dataset.train), size=shots, replace=False) if shots else []
        exemplars = tuple(dataset.train[int(i)].as_pair() for i in ex_idx)
        prompts = [ICLPrompt(exemplars, dataset.test[int(q)].input) for q in group]
        sc = score_labels(lm, prompts, labels, template=tpl, calibrate=calibrate)
        pred.extend(int(i) for i in sc.probs.argmax(axis=1))
        gold.extend(labels.index(dataset.test[int(q)].output) for q in group)
    mask = tuple(bool(p == g) for p, g in zip(pred, gold))
    n = len(mask)
    acc = sum(mask) / n
    counts = np.bincount(pred, minlength=len(labels))
    return Accuracy(shots, calibrate, n, sum(mask), acc, float(np.sqrt(acc * (1 - acc) / n)),
                    {lab: int(c) for lab, c in zip(labels, counts)}, mask)


def compare(
    lm: Any,
    dataset: LabeledDataset,
    *,
    shots: int = 8,
    queries: int = 100,
    contexts: int = 5,
    seed: int = 0,
    calibrate: bool = False,
    template: "PromptTemplate | None" = None,
) -> tuple[Accuracy, Accuracy]:
    """(zero-shot, ICL) accuracies on the same ``queries`` test examples."""
    rng = np.random.default_rng(seed)
    q = draw_queries(dataset, queries, rng)
    zs = accuracy(lm, dataset, q, shots=0, contexts=contexts, rng=rng, calibrate=calibrate, template=template)
    ic = accuracy(lm, dataset, q, shots=shots, contexts=contexts, rng=rng, calibrate=calibrate, template=template)
    return zs, ic


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m app.icl.evaluate", description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="assistant_intents", help="bundled task name")
    ap.add_argument("--shots", type=int, default=8)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--contexts", type=int, default=5, help="distinct demonstration sets (queries split evenly)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--calibrate", action="store_true", help="contextual calibration (ICLInf Appendix B)")
    ap.add_argument("--mode", choices=["raw", "chat"], default=None, help="override the template's rendering")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (1 is fastest on a busy machine)")
    ap.add_argument("--no-instruction", action="store_true", help="drop the template's instruction line")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    from app.llm import ModelSpec, bundled_specs, load_model  # the model layer, imported only for the CLI

    cache = os.environ.get("DPICL_MODEL_CACHE_DIR", os.path.join("~", ".cache", "dpicl", "models"))
    spec = next(s for s in bundled_specs() if s.kind == "lm")
    if args.threads:
        spec = ModelSpec(spec.name, spec.kind, spec.source, spec.backend, {**spec.options, "num_threads": args.threads})
    lm = load_model(spec, cache_dir=os.path.expanduser(cache), device=args.device, dtype=args.dtype)
    ds = load_bundled(args.task)
    tpl = ds.template.with_(mode=args.mode) if args.mode else ds.template
    if args.no_instruction:
        tpl = tpl.with_(instruction="")
    t0 = time.time()
    zs, ic = compare(lm, ds, shots=args.shots, queries=args.queries, contexts=args.contexts, seed=args.seed,
                     calibrate=args.calibrate, template=tpl)
    out = {"task": ds.name, "model": spec.name, "template": tpl.name, "mode": tpl.mode,
           "instruction": bool(tpl.instruction), "seed": args.seed,
           "contexts": args.contexts, "zero_shot": zs.to_dict(), "icl": ic.to_dict(),
           "seconds": round(time.time() - t0, 1)}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for name, r in (("zero-shot", zs), (f"ICL {args.shots}-shot", ic)):
            print(f"{name:12s} accuracy {r.accuracy:.3f} +- {r.std_error:.3f}  ({r.correct}/{r.n})  "
                  f"predicted {r.predicted_counts}")
        print(f"task {ds.name}, template {tpl.name} ({tpl.mode}, instruction={bool(tpl.instruction)}), "
              f"calibrate={args.calibrate}, "
              f"seed {args.seed}, {args.contexts} contexts, {out['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
