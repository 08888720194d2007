"""Serving throughput under concurrency: 1, 4 and 16 concurrent clients against a real `dpicl serve`.

    python benchmarks/bench_serving.py [--answers 16] [--clients 1,4,16] [--large-clients 1,16] [--threads 1]
                                       [--workloads "rnm 2x1,rnm 8x4,clip 4x16"] [--rounds 3] [--baseline] [--no-merge]
    python benchmarks/bench_serving.py --url http://127.0.0.1:8000   # a server already running
    python benchmarks/bench_serving.py --merge-steps [--threads 1]    # in process: merged vs separate decode steps
    python benchmarks/bench_serving.py --tiny --workloads "rnm 2x1,rnm 8x4" --large-clients 1,16 --answers 64

Starts `dpicl serve` (bundled models, a fresh SQLite, open auth) unless ``--url`` is given, loads the
bundled ``assistant_intents`` train split as one private dataset, and for each workload (``rnm``
classify, 2 partitions x 1 shot and 8 x 4) sends ``--answers`` answers from each client count. The
``clip 4x16`` workload is private generation (``clip_softmax``, 4 prompts, 16 tokens, the default public
candidate row) on the bundled ``gen_dialogsum`` train split: every answer is a decode session of 4 rows
stepped 16 times (plus its public row, which always steps alone), so concurrent answers exercise the
merged decode steps; ``--no-merge`` runs the server with ``merge_step_tokens: 0`` (steps queued in the
scheduler but never merged) for comparison. ``--merge-steps`` measures no server: k concurrent decode
sessions of n rows and cache length T, one step each, as k separate forward passes vs one merged pass
(app.llm.step_merge.merged_step), best of 3 after a warm-up; what the cost rule (merge_step_tokens) rests on.
Reports throughput (answers/s), p50/p95 latency, and, from GET /metrics, batches per answer and the
model's forward tokens per answer; ``ratio`` is throughput over the 1-client (sequential) run of the
same workload on the same server process. Per answer it also reports the model's forward passes, rows
and tokens per pass (``forward_rows`` / ``forward_tokens`` / ``padded_tokens`` over ``forward_calls``),
the seconds the model spent in its batches (``dpicl_model_batch_seconds``; beside it, in brackets, the
model thread's CPU seconds in them, ``dpicl_model_batch_cpu_seconds``: the difference is waiting for a
core, the GIL or the device) and the **service path**:
``(wall - model batch seconds) / answers``, everything but the model passes (HTTP, validation, the
read and charge transactions, tokenizing, thread hops, the scheduler), per answer. With ``--tiny``
the server serves a tiny random-init model built at run time (benchmarks/tiny_model.py: 2 layers,
SmolLM2's tokenizer and chat template) whose passes cost next to nothing, so the service path is
what is measured. The runs alternate (``--rounds``, default 3: sequential,
concurrent, sequential, concurrent, ...): each round's ratio is over its own sequential run, and the
summary gives the median and min/max of those paired ratios, so that one burst of load from other
processes on a shared machine moves one pair and not the verdict. ``--baseline`` repeats everything on a second server whose
model runs with the batch scheduler off (``options.scheduler.enabled: false``: the per-model lock
alone, as before issue 19), for the same ratios without batching.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.dpicl_server import free_port, wait_healthy  # noqa: E402

WORKLOADS = {"rnm 2x1": (2, 1), "rnm 8x4": (8, 4), "clip 4x16": (4, 16)}
LM_NAME = "smollm2-135m-instruct"  # the served lm whose metrics are scraped (--tiny: the tiny model)
TINY_NAME = "tiny-smollm2-2l"


def start_server(tmp: str, threads: int, scheduler: dict | None,
                 lm_options: dict | None = None, tiny: str | None = None,
                 database_url: str | None = None) -> tuple[subprocess.Popen, str]:
    """``tiny``: the folder of a tiny model (benchmarks/tiny_model.py) to serve instead of SmolLM2."""
    port = free_port()
    env = dict(os.environ, DPICL_DATABASE_URL=database_url or f"sqlite:///{tmp}/bench.db", DPICL_LOG_LEVEL="warning",
               DPICL_AUTH_MODE="open", OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    if scheduler is not None or lm_options or tiny:
        env["DPICL_MODELS"] = json.dumps([
            {"name": TINY_NAME if tiny else LM_NAME, "kind": "lm", "source": tiny or "bundled:smollm2-135m-instruct",
             "options": {**({"scheduler": scheduler} if scheduler is not None else {}), "num_threads": threads,
                         **(lm_options or {})}},
            {"name": "all-minilm-l6-v2", "kind": "embedder", "source": "bundled:all-minilm-l6-v2"}])
    # the server's log, shown when a run fails (a 5xx answer names its cause there, never to the client)
    log = open(os.path.join(tmp, f"server-{port}.log"), "wb")
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--port", str(port)], env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    log.close()
    url = f"http://127.0.0.1:{port}"
    if not wait_healthy(proc, url):
        raise RuntimeError("server did not start")
    return proc, url


def make_dataset(url: str) -> tuple[str, list[str]]:
    from app.icl import load_bundled

    ds = load_bundled("assistant_intents")
    t = ds.template
    # answer_reuse off: every answer is computed (the bench cycles through the test queries)
    body = {"name": "bench-serving", "labels": list(ds.labels), "budget": {"epsilon": 1e9, "delta": 1e-5},
            "answer_reuse": False,
            "template": {"instruction": t.instruction.replace("{labels}", ", ".join(ds.labels)),
                         "input_prefix": t.input_prefix.strip(), "output_prefix": t.output_prefix},
            "exemplars": [{"input": i, "output": o} for i, o in ds.exemplars("train")]}
    r = httpx.post(f"{url}/v1/datasets", json=body, timeout=60)
    r.raise_for_status()
    return r.json()["id"], [e.input for e in ds.test]


def make_generation_dataset(url: str) -> tuple[str, list[str]]:
    import app.icl

    path = os.path.join(os.path.dirname(app.icl.__file__), "data", "gen_dialogsum.jsonl")
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    body = {"name": "bench-serving-gen", "task": "generation", "budget": {"epsilon": 1e9, "delta": 1e-5},
            "answer_reuse": False,
            "template": {"instruction": "Summarize the dialogue in one sentence.", "input_prefix": "Dialogue:",
                         "output_prefix": "Summary:"},
            "exemplars": [{"input": r["input"], "output": r["output"]} for r in rows if r["split"] == "train"]}
    r = httpx.post(f"{url}/v1/datasets", json=body, timeout=60)
    r.raise_for_status()
    return r.json()["id"], [r["input"] for r in rows if r["split"] == "test"]


def scrape(url: str) -> dict[str, float]:
    """The served lm's counters, summed over the servers of a comma-separated ``url`` (replicas)."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    text = "".join(httpx.get(f"{u}/metrics", timeout=30).text for u in url.split(","))
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.labels.get("model") == LM_NAME and s.name in (
                    "dpicl_model_forward_tokens_total", "dpicl_model_batch_rows_count",
                    "dpicl_model_batch_requests_sum", "dpicl_model_tokens_total", "dpicl_model_forward_calls_total",
                    "dpicl_model_forward_rows_total", "dpicl_model_padded_tokens_total",
                    "dpicl_model_batch_seconds_sum", "dpicl_model_batch_cpu_seconds_total"):
                out[s.name] = out.get(s.name, 0.0) + s.value
            elif s.name in ("dpicl_ledger_charge_transactions_total", "dpicl_ledger_charge_requests_total"):
                out[s.name] = out.get(s.name, 0.0) + s.value  # group commit: charges per ledger transaction
            elif s.name in ("dpicl_answer_stage_seconds_sum", "dpicl_answer_stage_cpu_seconds_total"):
                key = f"{s.name}:{s.labels.get('stage')}"  # an answer's read / work / charge (issue 27)
                out[key] = out.get(key, 0.0) + s.value
    return out


SERVER_PIDS: list[int] = []  # the started servers (their CPU time per answer is reported), none with --url


def _cpu_s(pids: list[int]) -> float | None:
    """User + system CPU seconds of these processes so far (Linux /proc), or None."""
    total = 0.0
    try:
        for pid in pids:
            with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                fields = f.read().rpartition(")")[2].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, TypeError):
        return None
    return total if pids else None


async def run_clients(url: str, ds: str, queries: list[str], partitions: int, shots: int, clients: int,
                      answers: int, generate: bool = False) -> dict:
    """``url``: one server, or several comma-separated (replicas on one database): client k sends to the
    k-th modulo their number."""
    latencies: list[float] = []
    todo = list(range(answers))
    urls = url.split(",")

    async def client(c: httpx.AsyncClient, url: str) -> None:
        while todo:
            i = todo.pop()
            t0 = time.perf_counter()
            if generate:  # clip_softmax: `partitions` prompts, `shots` tokens
                r = await c.post(f"{url}/v1/private/generate", json={
                    "dataset_id": ds, "query": queries[i % len(queries)], "mechanism": "clip_softmax",
                    "epsilon": 8.0, "max_tokens": shots, "params": {"prompts": partitions}})
            else:
                r = await c.post(f"{url}/v1/private/classify", json={
                    "dataset_id": ds, "query": queries[i % len(queries)], "mechanism": "rnm", "epsilon": 1.0,
                    "partitions": partitions, "shots_per_partition": shots})
            r.raise_for_status()
            latencies.append(time.perf_counter() - t0)

    before = scrape(url)
    cpu0 = _cpu_s(SERVER_PIDS)
    client_cpu0 = time.process_time()
    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=clients + 4)) as c:
        t0, started = time.perf_counter(), time.time()
        await asyncio.gather(*[client(c, urls[k % len(urls)]) for k in range(clients)])
        wall = time.perf_counter() - t0
    client_cpu = time.process_time() - client_cpu0
    cpu1 = _cpu_s(SERVER_PIDS)
    after = scrape(url)
    d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    lat = sorted(latencies)
    q = lambda p: lat[min(len(lat) - 1, int(round(p * (len(lat) - 1))))]  # noqa: E731
    batches = d.get("dpicl_model_batch_rows_count", 0.0)
    passes = d.get("dpicl_model_forward_calls_total", 0.0)
    model_s = d.get("dpicl_model_batch_seconds_sum", 0.0)
    per_pass = lambda k: round(d.get(k, 0.0) / passes, 1) if passes else None  # noqa: E731
    return {"clients": clients, "answers": answers, "wall_s": round(wall, 2), "servers": len(urls),
            # epoch seconds: to line this run up with a GPU utilisation log (scripts/gpu_bench.sh)
            "started": round(started, 3), "ended": round(started + wall, 3),
            "model_ms_per_answer": round(model_s / answers * 1000, 2),
            # the model worker thread's CPU time in its batches (model ms minus waits for a core or the GIL);
            # None: a server that does not export it
            "model_cpu_ms_per_answer": round(d["dpicl_model_batch_cpu_seconds_total"] / answers * 1000, 2)
            if "dpicl_model_batch_cpu_seconds_total" in after else None,
            # CPU time of the whole server process per answer (model included): steadier than wall time
            # on a machine shared with other work
            "server_cpu_ms_per_answer": round((cpu1 - cpu0) / answers * 1000, 2) if cpu0 is not None
            and cpu1 is not None else None,
            # this benchmark's own CPU per answer (one asyncio process): near 1000 / answers_per_s the
            # client, not the servers, bounds the throughput
            "client_cpu_ms_per_answer": round(client_cpu / answers * 1000, 2),
            # wall time outside the model's batches; None for replicas (their batches overlap in time)
            "service_ms_per_answer": round((wall - model_s) / answers * 1000, 2) if len(urls) == 1 else None,
            "rows_per_pass": per_pass("dpicl_model_forward_rows_total"),
            "tokens_per_pass": per_pass("dpicl_model_forward_tokens_total"),
            "padded_tokens_per_pass": per_pass("dpicl_model_padded_tokens_total"),
            "answers_per_s": round(answers / wall, 3), "p50_s": round(q(0.5), 3), "p95_s": round(q(0.95), 3),
            "calls_per_batch": round(d.get("dpicl_model_batch_requests_sum", 0.0) / batches, 2) if batches else None,
            "forward_tokens_per_answer": round(d.get("dpicl_model_forward_tokens_total", 0.0) / answers, 1),
            "forward_calls_per_answer": round(d.get("dpicl_model_forward_calls_total", 0.0) / answers, 1),
            # answers' charges per ledger transaction (group commit); None from a server without the counters
            "charges_per_transaction": round(d["dpicl_ledger_charge_requests_total"]
                                             / d["dpicl_ledger_charge_transactions_total"], 2)
            if d.get("dpicl_ledger_charge_transactions_total") else None,
            # per answer, each stage's wall ms and the CPU ms of the thread that ran it (wall well above CPU:
            # waiting for a lock, the GIL, a core or the model thread); {} from a server without them
            "stages_ms_per_answer": {
                st: {"wall": round(d.get(f"dpicl_answer_stage_seconds_sum:{st}", 0.0) / answers * 1000, 2),
                     "cpu": round(d.get(f"dpicl_answer_stage_cpu_seconds_total:{st}", 0.0) / answers * 1000, 2)}
                for st in ("read", "work", "charge") if f"dpicl_answer_stage_seconds_sum:{st}" in after}}


def _print_row(name: str, r: dict) -> None:
    print(f"{name:8s} round {r['round']} clients={r['clients']:2d} {r['answers_per_s']:6.2f} ans/s"
          f"  x{r['ratio_vs_sequential']:.2f}  p50 {r['p50_s']:.2f}s p95 {r['p95_s']:.2f}s"
          f"  calls/batch {r['calls_per_batch']}  fwd tok/ans {r['forward_tokens_per_answer']}"
          f"  fwd calls/ans {r['forward_calls_per_answer']}  rows/pass {r.get('rows_per_pass')}"
          f"  tok/pass {r.get('tokens_per_pass')} (padded {r.get('padded_tokens_per_pass')})"
          f"  model {r.get('model_ms_per_answer')} ms/ans (cpu {r.get('model_cpu_ms_per_answer')})"
          f"  service {r.get('service_ms_per_answer')} ms/ans"
          f"  server cpu {r.get('server_cpu_ms_per_answer')} ms/ans"
          f"  client cpu {r.get('client_cpu_ms_per_answer')} ms/ans"
          f"  charges/txn {r.get('charges_per_transaction')}"
          + "".join(f"  {k} {v['wall']} (cpu {v['cpu']})" for k, v in (r.get("stages_ms_per_answer") or {}).items()),
          flush=True)


def _median(values: list) -> float | None:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 2) if known else None


def summarize(rows: list[dict]) -> list[dict]:
    """Per client count: the median and min/max of the paired ratios (each concurrent run over the
    sequential run of its own round) and the median throughput and latencies over the rounds."""
    out = []
    for n in sorted({r["clients"] for r in rows}):
        mine = [r for r in rows if r["clients"] == n]
        ratios = [r["ratio_vs_sequential"] for r in mine]
        out.append({"clients": n, "rounds": len(mine), "ratios": ratios,
                    "ratio_median": round(statistics.median(ratios), 2), "ratio_min": min(ratios), "ratio_max": max(ratios),
                    "answers_per_s_median": round(statistics.median([r["answers_per_s"] for r in mine]), 3),
                    "answers_per_s_min": min(r["answers_per_s"] for r in mine),
                    "answers_per_s_max": max(r["answers_per_s"] for r in mine),
                    "p50_s_median": round(statistics.median([r["p50_s"] for r in mine]), 3),
                    "p95_s_median": round(statistics.median([r["p95_s"] for r in mine]), 3),
                    **{f"{k}_median": _median([r.get(k) for r in mine]) for k in (
                        "service_ms_per_answer", "model_ms_per_answer", "model_cpu_ms_per_answer",
                        "server_cpu_ms_per_answer", "client_cpu_ms_per_answer",
                        "rows_per_pass", "tokens_per_pass")},
                    "forward_calls_per_answer_median": round(statistics.median([r["forward_calls_per_answer"]
                                                                      for r in mine]), 1)})
    return out


def bench(url: str, clients: list[int], answers: int, large_clients: list[int], workloads: list[str],
          rounds: int = 3) -> dict:
    """Every workload in ``rounds`` alternating rounds on the same server: the sequential run
    (1 client), then each concurrent count, then again. A round's ratio is its concurrent throughput
    over its own sequential run, so a burst of load from other processes moves one pair, not the
    verdict: the summary reports the median and min/max of the paired ratios."""
    first = url.split(",")[0]  # replicas share the database: the datasets are made through one
    ds, queries = make_dataset(first)
    gen_ds, gen_queries = make_generation_dataset(first) if any(w.startswith("clip") for w in workloads) else ("", [])
    # warm-up: the first answers pay for lazy initialisation
    asyncio.run(run_clients(url, ds, queries, 2, 1, 1, 2))
    out = {}
    for name in workloads:
        p, s = WORKLOADS[name]
        gen = name.startswith("clip")
        ns = large_clients if p * s >= 32 else clients
        order = ([1] if 1 in ns else []) + [n for n in ns if n != 1]  # sequential first in every round
        if gen:
            asyncio.run(run_clients(url, gen_ds, gen_queries, p, 2, 1, 1, True))  # warm-up
        rows = []
        for rnd in range(1, rounds + 1):
            mine = []
            for n in order:
                r = asyncio.run(run_clients(url, gen_ds if gen else ds, gen_queries if gen else queries, p, s, n,
                                            answers, gen))
                r["round"] = rnd
                mine.append(r)
            seq = mine[0]
            for r in mine:
                r["ratio_vs_sequential"] = round(r["answers_per_s"] / seq["answers_per_s"], 2)
                r["p95_over_single_p50"] = round(r["p95_s"] / seq["p50_s"], 2)
                _print_row(name, r)
            rows.extend(mine)
        summary = summarize(rows)
        for sm in summary:
            if sm["clients"] != order[0]:
                print(f"{name:8s} clients={sm['clients']:2d} over {sm['rounds']} rounds: ratio median "
                      f"x{sm['ratio_median']:.2f} (min {sm['ratio_min']:.2f}, max {sm['ratio_max']:.2f}; "
                      f"{', '.join(f'{x:.2f}' for x in sm['ratios'])})  {sm['answers_per_s_median']:.2f} ans/s"
                      f"  p50 {sm['p50_s_median']:.2f}s p95 {sm['p95_s_median']:.2f}s"
                      f"  service {sm['service_ms_per_answer_median']} ms/ans", flush=True)
            else:
                print(f"{name:8s} clients={sm['clients']:2d} over {sm['rounds']} rounds: "
                      f"{sm['answers_per_s_median']:.2f} ans/s median (min {sm['answers_per_s_min']:.2f}, max "
                      f"{sm['answers_per_s_max']:.2f})"
                      f"  p50 {sm['p50_s_median']:.2f}s  service {sm['service_ms_per_answer_median']} ms/ans"
                      f"  model {sm['model_ms_per_answer_median']} ms/ans", flush=True)
        out[name] = {"rounds": rows, "summary": summary}
    return out


def merge_steps(threads: int) -> dict:
    import torch

    from app.llm import bundled_specs, load_model, step_merge

    torch.set_num_threads(threads)
    spec = next(s for s in bundled_specs() if s.kind == "lm")
    cache = os.environ.get("DPICL_MODEL_CACHE_DIR") or os.path.expanduser("~/.cache/dpicl/models")
    lm = load_model(spec, cache_dir=cache, device="cpu", dtype="float32")
    words = "the quick brown fox jumps over the lazy dog and then runs far away into the forest".split()
    out = {}
    # (sessions k, rows n, cache lengths): equal lengths, then mixed lengths (left padding to the longest)
    for k, n, lengths in [(4, 1, [64] * 4), (8, 1, [128] * 8), (16, 1, [128] * 16), (4, 4, [128] * 4),
                          (4, 8, [64] * 4), (4, 8, [200] * 4), (8, 4, [200] * 8), (2, 8, [400] * 2),
                          (4, 1, [20, 60, 120, 200]), (4, 4, [20, 60, 120, 200])]:
        row = {}
        for mode in ("separate", "merged"):
            sessions = []
            for j in range(k):
                rows = [lm.tokenize(" ".join(words[(7 * j + i + w) % len(words)] for w in range(lengths[j])))
                        [:lengths[j]] for i in range(n)]
                sessions.append(lm.start_decode(rows, reuse_prefix=False))
            kvs = [sess._kv for sess in sessions]
            times = []
            for _ in range(4):
                t0 = time.perf_counter()
                if mode == "separate":
                    for kv in kvs:
                        lm._step_alone(kv, [11] * n)
                else:
                    with lm._lock:
                        step_merge.merged_step(lm, kvs, [[11] * n for _ in kvs])
                times.append(time.perf_counter() - t0)
            row[mode] = min(times[1:])
            for sess in sessions:
                sess.close()
        cached = sum(n * t for t in lengths)
        padded = k * n * max(lengths)
        name = f"k={k} n={n} T={'/'.join(map(str, sorted(set(lengths))))}"
        out[name] = {"cache_row_tokens": cached, "padded_row_tokens": padded,
                     "separate_ms": round(row["separate"] * 1000, 1), "merged_ms": round(row["merged"] * 1000, 1),
                     "speedup": round(row["separate"] / row["merged"], 2)}
        print(f"{name:24s} cache {cached:5d} (padded {padded:5d}) row-tokens: separate {row['separate'] * 1000:7.1f} ms"
              f"  merged {row['merged'] * 1000:7.1f} ms  x{row['separate'] / row['merged']:.2f}", flush=True)
    return out


def main() -> None:
    global LM_NAME
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", help="a running dpicl serve (otherwise one is started), or several comma-separated "
                                  "replicas on one database (client k sends to the k-th modulo their number)")
    ap.add_argument("--replicas", type=int, default=1,
                    help="started servers on one database (SQLite file or --database-url), clients spread over them")
    ap.add_argument("--answers", type=int, default=16)
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--large-clients", default="1,16",
                    help="client counts for the 8x4 workload (compute-bound on a CPU: fewer runs keep it short)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help=f"of {list(WORKLOADS)}")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the started server")
    ap.add_argument("--rounds", type=int, default=3,
                    help="alternating rounds per workload (sequential, then concurrent, again): the summary is the "
                         "median and min/max of the paired ratios; 1: one pass, as before")
    ap.add_argument("--baseline", action="store_true", help="also run a server with the scheduler off")
    ap.add_argument("--no-merge", action="store_true",
                    help="also run a server whose decode steps are never merged (merge_step_tokens 0)")
    ap.add_argument("--merge-steps", action="store_true", help="in process, no server: merged vs separate decode steps")
    ap.add_argument("--tiny", action="store_true",
                    help="serve a tiny random-init model built at run time (2 layers, SmolLM2's tokenizer): the "
                         "model costs ~nothing, the service path is what is measured")
    ap.add_argument("--lm-options", default="{}",
                    help='JSON options of the started server\'s lm, e.g. \'{"single_token_fast_path": true}\'')
    ap.add_argument("--database-url", help="the started server's database (default: a fresh SQLite file)")
    ap.add_argument("--out", help="also write the JSON result to this file")
    args = ap.parse_args()
    if args.merge_steps:
        print(json.dumps({"threads": args.threads, "merge_steps": merge_steps(args.threads)}, indent=2))
        return
    clients = [int(x) for x in args.clients.split(",")]
    large = [int(x) for x in args.large_clients.split(",")]
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    if args.rounds < 1:
        ap.error("--rounds must be >= 1")
    if not 1 <= args.replicas <= 16:
        ap.error("--replicas must be in 1..16")
    result: dict = {"answers": args.answers, "threads": args.threads, "rounds": args.rounds,
                    "load_average": os.getloadavg(), "command": " ".join(sys.argv)}
    tiny_dir = tempfile.TemporaryDirectory() if args.tiny else None
    if tiny_dir is not None:
        from benchmarks.tiny_model import build_tiny_model, describe

        LM_NAME = TINY_NAME
        build_tiny_model(tiny_dir.name)
        result["model"] = describe()
        print(f"--- {describe()}", flush=True)
    if args.url:
        result["server"] = bench(args.url, clients, args.answers, large, workloads, args.rounds)
    else:
        base_opts = json.loads(args.lm_options) or None
        result["lm_options"] = base_opts
        runs: list[tuple[str, dict | None, dict | None]] = [("batched", None, base_opts)]
        if args.no_merge:
            runs.append(("no_merge", None, {**(base_opts or {}), "merge_step_tokens": 0}))
        if args.baseline:
            runs.append(("lock_only", {"enabled": False}, base_opts))
        for label, sched, lm_opts in runs:
            print(f"--- {label}", flush=True)
            with tempfile.TemporaryDirectory() as tmp:
                procs, urls = [], []
                try:
                    # the first server migrates the database; the others start once it answers
                    for _ in range(args.replicas):
                        proc, url = start_server(tmp, args.threads, sched, lm_opts,
                                                 tiny_dir.name if tiny_dir else None, args.database_url)
                        procs.append(proc)
                        urls.append(url)
                    SERVER_PIDS[:] = [p.pid for p in procs]
                    result[label] = bench(",".join(urls), clients, args.answers, large, workloads, args.rounds)
                except Exception:
                    for f in sorted(Path(tmp).glob("server-*.log")):
                        print(f"--- the last lines of {f.name}:", *f.read_text(errors="replace").splitlines()[-60:],
                              sep="\n", file=sys.stderr)
                    raise
                finally:
                    for proc in procs:
                        proc.terminate()
                    for proc in procs:
                        proc.wait(timeout=30)
    result["load_average_after"] = os.getloadavg()
    if tiny_dir is not None:
        tiny_dir.cleanup()
    print(json.dumps(result, indent=2))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
