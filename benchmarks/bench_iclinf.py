"""Benchmark of ICLInf classification scoring (issue 9), in one process on the bundled SmolLM2-135M-Instruct.

    python benchmarks/bench_iclinf.py                       # m = 20 queries, n_shots = 4, CPU, 1 thread
    python benchmarks/bench_iclinf.py --m 100 --device cuda # the issue's m = 100 on a GPU
    python benchmarks/bench_iclinf.py --json

Numbers (each query = its n_shots + 1 leave-one-out prompts, label-only distribution):
  1. tokens computed by the shared-prefix family (app.audit.iclinf_forward) against the minimum that
     prefix sharing allows (trie nodes not already in the model's prefix cache): they should be equal;
     and the tokens of the unshared prompts;
  2. throughput (tokens computed per second) against the bare batched forward pass of the foundation's
     benchmark (benchmarks/bench_llm.py: 16 x 128 random tokens, decoder + LM head at the last position);
  3. speed-up over the straightforward loop: one forward per prompt (no prefix reuse), one query at a time;
     also the plain batched protocol call (the backend shares only the common prefix of the batch);
  4. queries per second; and the same with several queries' families in one call (--queries-per-call).
The loops check that they give the same ICLInf numbers as the family path.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_CACHE = os.environ.get("DPICL_MODEL_CACHE_DIR", str(Path.home() / ".cache" / "dpicl" / "models"))


def bare_forward(lm, repeat: int, batch: int = 16, length: int = 128) -> float:
    """Tokens/s of the bare batched forward (as bench_llm.bench_forward)."""
    import torch

    ids = torch.randint(100, 40000, (batch, length), device=lm.device)

    def run():
        with torch.inference_mode():
            h = lm.model.model(input_ids=ids).last_hidden_state
            out = lm.model.get_output_embeddings()(h[:, -1])
        if lm.device.type == "cuda":
            torch.cuda.synchronize()
        return out

    run()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return batch * length / statistics.median(times)


def naive_query(lm, tpl, labels, exemplars, query):
    """One forward per prompt, no prefix reuse: the straightforward loop."""
    import numpy as np

    from app.audit.iclinf import leave_one_out_losses
    from app.audit.iclinf_renyi import log_normalize

    first = [lm._encode_plain(c)[0] for c in tpl.continuations(labels)]
    sets = [exemplars] + [exemplars[:i] + exemplars[i + 1:] for i in range(len(exemplars))]
    rows = []
    for s in sets:
        lp = lm.next_token_logprobs([tpl.render(s, query, labels)])[0]
        rows.append(lp[first])
    logd = log_normalize(np.array(rows, dtype=np.float64))
    return leave_one_out_losses(logd[0], logd[1:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--m", type=int, default=20, help="queries of the family path (the issue asks for 100)")
    ap.add_argument("--n-shots", type=int, default=4)
    ap.add_argument("--loop-m", type=int, default=5, help="queries of the two loop references")
    ap.add_argument("--queries-per-call", type=int, default=8, help="queries per model call in the multi run")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a shared 2-core box)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cache-dir", default=DEFAULT_CACHE)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    import numpy as np
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from app.audit.iclinf import iclinf, leave_one_out_losses, query_distributions
    from app.icl import load_bundled
    from app.llm import bundled_specs, load_model

    spec = next(s for s in bundled_specs() if s.kind == "lm")
    lm = load_model(spec, cache_dir=args.cache_dir, device=args.device, dtype="float32")
    ds = load_bundled()
    tpl, labels = ds.template, ds.labels
    train, test = ds.exemplars(), ds.exemplars("test")
    assert all(len(lm._encode_plain(c)) == 1 for c in tpl.continuations(labels)), "loop reference needs 1-token labels"

    # Warm-up (also puts the instruction into the prefix LRU, as in a long-running worker).
    iclinf(lm, train, test, labels, tpl, n_shots=args.n_shots, m=1, seed=123)
    bare = bare_forward(lm, args.repeat)

    lm.stats.reset()
    t0 = time.perf_counter()
    fam = iclinf(lm, train, test, labels, tpl, n_shots=args.n_shots, m=args.m, seed=0)
    t_fam = time.perf_counter() - t0
    c = fam.counts
    fam_tps = c["tokens_computed"] / t_fam

    k = min(args.loop_m, args.m)
    picks = [(q.query_index, [train[i] for i in q.exemplar_indices]) for q in fam.queries[:k]]
    # Plain batched protocol call per query (backend shares the batch's common prefix only).
    t0 = time.perf_counter()
    plain = [query_distributions(lm, ex, test[qi][0], labels, tpl, use_trie=False)[0] for qi, ex in picks]
    t_plain = time.perf_counter() - t0
    plain = [leave_one_out_losses(d[0], d[1:]) for d in plain]
    # Several queries' families per call (bigger batches, same numbers).
    lm.stats.reset()
    t0 = time.perf_counter()
    multi = iclinf(lm, train, test, labels, tpl, n_shots=args.n_shots, m=args.m, seed=0,
                   queries_per_call=args.queries_per_call)
    t_multi = time.perf_counter() - t0
    cm = multi.counts
    # Straightforward loop: one forward per prompt, no prefix reuse, one query at a time.
    lm.prefix_reuse = False
    lm.clear_prefix_cache()
    t0 = time.perf_counter()
    loop = [naive_query(lm, tpl, labels, ex, test[qi][0]) for qi, ex in picks]
    t_loop = time.perf_counter() - t0
    lm.prefix_reuse = True
    diff = max(float(np.max(np.abs(np.array(a) - np.array(q.per_position))))
               for a, q in zip(loop, fam.queries[:k]))
    diff_plain = max(float(np.max(np.abs(np.array(a) - np.array(b.per_position))))
                     for a, b in zip(plain, fam.queries[:k]))
    diff_multi = max(float(np.max(np.abs(np.array(a.per_position) - np.array(b.per_position))))
                     for a, b in zip(multi.queries, fam.queries))

    per_q = t_fam / args.m
    out = {
        "device": str(lm.device),
        "threads": torch.get_num_threads(),
        "machine": f"{platform.machine()} {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}",
        "n_shots": args.n_shots,
        "m": args.m,
        "tokens_computed": c["tokens_computed"],
        "tokens_minimum": c["tokens_minimum"],
        "tokens_unshared": c["tokens_naive"],
        "computed_equals_minimum": c["tokens_computed"] == c["tokens_minimum"],
        "forward_calls_per_query": c["forward_calls"] / args.m,
        "bare_forward_tokens_per_s": round(bare, 1),
        "family_tokens_per_s": round(fam_tps, 1),
        "throughput_vs_bare": round(fam_tps / bare, 3),
        "seconds_per_query_family": round(per_q, 4),
        "seconds_per_query_plain_batched": round(t_plain / k, 4),
        "seconds_per_query_loop": round(t_loop / k, 4),
        "speedup_vs_loop": round((t_loop / k) / per_q, 2),
        "speedup_vs_plain_batched": round((t_plain / k) / per_q, 2),
        "queries_per_second": round(args.m / t_fam, 3),
        "queries_per_call": args.queries_per_call,
        "multi_tokens_computed": cm["tokens_computed"],
        "multi_tokens_minimum": cm["tokens_minimum"],
        "multi_tokens_per_s": round(cm["tokens_computed"] / t_multi, 1),
        "multi_throughput_vs_bare": round(cm["tokens_computed"] / t_multi / bare, 3),
        "multi_queries_per_second": round(args.m / t_multi, 3),
        "multi_speedup_vs_loop": round((t_loop / k) / (t_multi / args.m), 2),
        "max_abs_diff_multi": diff_multi,
        "loop_queries": k,
        "max_abs_diff_vs_loop": diff,
        "max_abs_diff_vs_plain": diff_plain,
        "iclinf_mean": fam.mean,
        "iclinf_std": fam.std,
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for key, v in out.items():
            print(f"{key:34s} {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
