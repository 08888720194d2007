"""Where the model thread's time goes for ``rnm`` answers on the tiny model, in process (issue 27).

    PYTHONPATH=. OMP_NUM_THREADS=1 python benchmarks/profile_model_thread.py [--answers 300] [--merge 1,4]
        [--partitions 8] [--shots 4] [--paths cont,label] [--out FILE.json]

Builds the tiny random-init model (app/llm/tiny.py: 2 layers, hidden 64, SmolLM2's tokenizer) and, for
``--answers`` queries of the bundled ``assistant_intents`` task, the token rows an ``rnm`` answer of
``partitions x shots`` sends to the model (tokenized beforehand: that is the request thread's work).
Then it runs what the scheduler's worker thread runs per batch, ``lm._run_batch`` (``--merge`` answers per
batch: 1 is a sequential server, ~4 what 16 clients merge into one batch), and splits this thread's CPU
time (``time.thread_time``: no waits) per answer into

* ``decoder``: the transformer stack (``lm._base``: embeddings, layers, final norm);
* ``lm_head``: the LM head over the positions read (``lm._logits``; on the label path
  ``passes.label_logits``, the labels' rows only);
* ``log_softmax``: the full-vocabulary normalisation (``torch.log_softmax``);
* ``host``: everything else on the model thread (prefix lookup, chunk planning, input assembly,
  KV-cache set-up, gathers, the copy back to numpy).

``--paths``: the scheduler keys to run, alternating within each round: ``cont``
(``continuation_logprobs``: full-vocabulary log-probabilities, what ``score_labels`` called before
issue 27's label rows) and ``label`` (``relative_continuation_logprobs``, what it calls since; a checkout
without it runs ``cont`` only). The timers wrap those calls (a few microseconds per pass). CPU only; the numbers of a random-init
model mean nothing, its timings are the real code paths'. It imports only ``app``, so the same file
measures another checkout: ``PYTHONPATH=/path/to/other python /this/file``.
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

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # benchmarks.tiny_model; an earlier PYTHONPATH entry's app wins


def build(answers: int, partitions: int, shots: int) -> tuple[Any, list[tuple[Any, list[list[int]]]]]:
    import numpy as np
    import torch

    from app.icl import load_bundled
    from app.icl.partition import partition_exemplars
    from app.icl.templates import as_exemplar
    from app.llm.tiny import random_lm
    from benchmarks.tiny_model import bundled_lm_folder

    torch.set_num_threads(1)
    lm = random_lm(bundled_lm_folder(), tiny=True, options={"scheduler": {"enabled": False}})
    ds = load_bundled("assistant_intents")
    ex = [as_exemplar(e) for e in ds.exemplars("train")]
    queries = [e.input for e in ds.test]
    labels = list(ds.labels)
    tpl = ds.template
    conts = tpl.continuations(labels)
    rng = np.random.default_rng(0)
    jobs = []
    for i in range(answers):
        parts = partition_exemplars(len(ex), partitions, shots, rng)
        rendered = [tpl.render(tuple(ex[int(j)] for j in p), queries[i % len(queries)], labels, lm=lm) for p in parts]
        both = lm._encode_many([*conts, *rendered])
        cs = both[:len(conts)]
        prows = lm._encode_prompts(rendered, extra=max(len(c) for c in cs), encoded=both[len(conts):])
        jobs.append((tuple(tuple(c) for c in cs), prows))
    return lm, jobs


def measure(lm: Any, jobs: list[tuple[Any, list[list[int]]]], merge: int, path: str = "cont") -> dict[str, Any]:
    import torch

    from app.llm import passes

    batches = []
    for i in range(0, len(jobs) - merge + 1, merge):
        batches.append(((path, jobs[i][0]), [r for _, rows in jobs[i:i + merge] for r in rows]))
    acc = {"decoder": 0.0, "lm_head": 0.0, "log_softmax": 0.0}
    base_forward, logits, log_softmax = lm._base.forward, lm._logits, torch.log_softmax
    label_logits = getattr(passes, "label_logits", None)

    def timed(name: str, fn: Any) -> Any:
        def call(*a: Any, **k: Any) -> Any:
            c = time.thread_time()
            try:
                return fn(*a, **k)
            finally:
                acc[name] += time.thread_time() - c
        return call

    for key, rows in batches[:5]:  # warm: the shared header goes into the prefix LRU
        lm._run_batch(key, rows)
    lm._base.forward, lm._logits = timed("decoder", base_forward), timed("lm_head", logits)
    torch.log_softmax = timed("log_softmax", log_softmax)
    if label_logits is not None:
        passes.label_logits = timed("lm_head", label_logits)
    try:
        lm.stats.reset()
        c0, t0 = time.thread_time(), time.perf_counter()
        for key, rows in batches:
            lm._run_batch(key, rows)
        cpu, wall = time.thread_time() - c0, time.perf_counter() - t0
    finally:
        lm._base.forward, lm._logits, torch.log_softmax = base_forward, logits, log_softmax
        if label_logits is not None:
            passes.label_logits = label_logits
    n = len(batches) * merge
    ms = {k: round(v / n * 1e3, 3) for k, v in acc.items()}
    return {"path": path, "answers_per_batch": merge, "answers": n, "cpu_ms_per_answer": round(cpu / n * 1e3, 3),
            "wall_ms_per_answer": round(wall / n * 1e3, 3), **ms,
            "host": round((cpu - sum(acc.values())) / n * 1e3, 3),
            "passes_per_answer": round(lm.stats.forward_calls / n, 2),
            "padded_tokens_per_answer": round(lm.stats.padded_tokens / n, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--answers", type=int, default=300)
    ap.add_argument("--merge", default="1,4", help="answers per batch, comma separated")
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--shots", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds over the --merge values")
    ap.add_argument("--paths", default="cont,label", help="scheduler keys, comma separated: cont, label")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    lm, jobs = build(args.answers, args.partitions, args.shots)
    merges = [int(x) for x in args.merge.split(",")]
    paths = [x for x in args.paths.split(",") if x == "cont" or hasattr(lm, "relative_continuation_logprobs")]
    runs = []
    for rnd in range(1, args.rounds + 1):
        for m in merges:
            for path in paths:
                r = {"round": rnd, **measure(lm, jobs, m, path)}
                runs.append(r)
                print(json.dumps(r), flush=True)
    summary = {f"{path} {m}": {k: round(statistics.median([r[k] for r in runs if r["answers_per_batch"] == m
                                                          and r["path"] == path]), 3)
                               for k in ("cpu_ms_per_answer", "decoder", "lm_head", "log_softmax", "host")}
               for m in merges for path in paths}
    for name, s in summary.items():
        path, m = name.split()
        print(f"{path}: {m} answer(s) per batch, median over {args.rounds} rounds, model-thread CPU ms per answer: "
              f"{s['cpu_ms_per_answer']} = decoder {s['decoder']} + LM head {s['lm_head']} + log-softmax "
              f"{s['log_softmax']} + host {s['host']}", flush=True)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump({"workload": f"rnm {args.partitions}x{args.shots}", "platform": platform.platform(),
                       "load_average": os.getloadavg(), "runs": runs,
                       "summary": summary}, f, indent=2)


if __name__ == "__main__":
    main()
