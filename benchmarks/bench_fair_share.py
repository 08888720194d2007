"""A live call's latency while one audit job floods the model's batch queue: round robin vs FIFO.

One job (submitter ``job:flood``) keeps ``--flood`` threads calling ``continuation_logprobs`` on a long
prompt (over the CPU cost rule's 512 tokens, so each call runs in a batch of its own); a live caller
(its own thread, no scope) makes ``--live`` short calls. With FIFO the live call waits behind every
queued flood call; with the scheduler's round robin (app/llm/scheduler.py, "Fair sharing") behind at
most one. The real bundled SmolLM2 on CPU, one torch thread.

    python benchmarks/bench_fair_share.py --flood 6 --live 3
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--flood", type=int, default=6, help="threads of the flooding job")
    ap.add_argument("--live", type=int, default=3, help="live calls per mode")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(1)
    from app.llm import bundled_specs, load_model
    from app.llm.tenancy import submitter_scope
    from tests.conftest import model_cache_dir

    spec = next(s for s in bundled_specs() if s.kind == "lm")
    lm = load_model(spec, cache_dir=model_cache_dir(), device="cpu", dtype="float32")
    labels = [" World", " Sports", " Business", " Technology"]
    long_prompt = "Classify the news. " + " ".join(f"Item {i}: markets moved on rate news." for i in range(70))
    short_prompt = "Classify the news. Stocks rallied after the central bank held rates. Topic:"
    sched = lm.scheduler
    print(f"long prompt {len(lm.tokenize(long_prompt))} tokens, short {len(lm.tokenize(short_prompt))}; "
          f"merge_job_tokens {sched.opts.merge_job_tokens}")
    lm.continuation_logprobs([short_prompt], labels)  # warm up (the first long call also pays one-off set-up)
    lm.continuation_logprobs([long_prompt], labels)
    t0 = time.perf_counter()
    lm.continuation_logprobs([long_prompt], labels)
    print(f"one long call alone: {time.perf_counter() - t0:.2f} s")

    fair = sched._fair_order
    for mode in ("fifo", "round-robin"):
        sched._fair_order = (lambda: list(sched._queue)) if mode == "fifo" else fair
        stop = threading.Event()
        flood_calls = [0]

        def flood() -> None:
            with submitter_scope("job:flood"):
                while not stop.is_set():
                    lm.continuation_logprobs([long_prompt], labels)
                    flood_calls[0] += 1

        threads = [threading.Thread(target=flood, daemon=True) for _ in range(args.flood)]
        for t in threads:
            t.start()
        time.sleep(2.0)  # the flood's calls are queued
        waits = []
        started = time.perf_counter()
        for _ in range(args.live):
            depth = sched.depth
            t0 = time.perf_counter()
            lm.continuation_logprobs([short_prompt], labels)
            waits.append(time.perf_counter() - t0)
            print(f"  {mode}: live call {waits[-1]:.2f} s (queue depth {depth} when submitted)")
        elapsed = time.perf_counter() - started
        stop.set()
        n0 = flood_calls[0]
        for t in threads:
            t.join(120)
        print(f"{mode}: live call median {statistics.median(waits):.2f} s (min {min(waits):.2f}, max {max(waits):.2f}); "
              f"flood {n0} calls in {elapsed:.1f} s")
    sched._fair_order = fair


if __name__ == "__main__":
    main()
