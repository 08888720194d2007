"""Two builds of dpicl side by side on one machine: interleaved blocks of answers, paired ratios.

    git worktree add /tmp/dpicl-base <commit>          # the baseline build (any checkout)
    python benchmarks/bench_ab.py --base /tmp/dpicl-base [--blocks 12] [--answers 40] [--clients 1]

A shared 2-core machine drifts by 2x within minutes (another tenant, thermal, the page cache), so two
benchmark runs one after the other compare the machine's moods, not the builds (issue 27: the same
build measured 24 and 44 answers/s ten minutes apart). This starts one ``dpicl serve`` per build (the
tiny random-init model of benchmarks/tiny_model.py, a fresh SQLite file each, open auth, one torch
thread), loads the same dataset into both and then sends blocks of ``--answers`` ``rnm`` answers to A,
B, B, A, A, B, ... (ABBA, so a drift within a pair cancels to first order). Each block's throughput and
the server's CPU per answer (from /proc) are paired with the neighbouring block of the other build;
the result is the median and the min/max of the B/A ratios. B is this checkout, A the ``--base`` one.
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
from collections.abc import Callable

import httpx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.bench_serving import TINY_NAME, _cpu_s, make_dataset  # noqa: E402
from benchmarks.dpicl_server import free_port, wait_healthy  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start(build: str, tmp: str, tiny: str, name: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = dict(os.environ, DPICL_DATABASE_URL=f"sqlite:///{tmp}/{name}.db", DPICL_LOG_LEVEL="warning",
               DPICL_AUTH_MODE="open", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=build,
               DPICL_MODELS=json.dumps([
                   {"name": TINY_NAME, "kind": "lm", "source": tiny, "options": {"num_threads": 1}},
                   {"name": "all-minilm-l6-v2", "kind": "embedder", "source": "bundled:all-minilm-l6-v2"}]))
    log = open(os.path.join(tmp, f"{name}.log"), "wb")
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--port", str(port)], cwd=build, env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    log.close()
    url = f"http://127.0.0.1:{port}"
    if not wait_healthy(proc, url):
        raise RuntimeError(f"the {name} server did not start: {tmp}/{name}.log")
    return proc, url


async def block(url: str, ds: str, queries: list[str], answers: int, clients: int, partitions: int,
                shots: int, start_at: int) -> float:
    todo = list(range(start_at, start_at + answers))

    async def client(c: httpx.AsyncClient) -> None:
        while todo:
            i = todo.pop()
            r = await c.post(f"{url}/v1/private/classify", json={
                "dataset_id": ds, "query": queries[i % len(queries)], "mechanism": "rnm", "epsilon": 1.0,
                "partitions": partitions, "shots_per_partition": shots})
            r.raise_for_status()

    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=clients + 4)) as c:
        t0 = time.perf_counter()
        await asyncio.gather(*[client(c) for _ in range(clients)])
        return time.perf_counter() - t0


def order(blocks: int) -> list[tuple[str, str]]:
    """A B, B A, A B, ...: each build's block sits first and second equally often, so a steady drift of
    the machine within a pair cancels over two pairs."""
    return [("A", "B") if p % 2 == 0 else ("B", "A") for p in range(blocks)]


def run_blocks(blocks: int, run_one: Callable[[str, int], tuple[float, ...]]) -> dict[str, list[tuple[float, ...]]]:
    """``run_one(build, pair index)`` for every block in :func:`order`; each build's results in pair order."""
    rows: dict[str, list[tuple[float, ...]]] = {"A": [], "B": []}
    for p, pair in enumerate(order(blocks)):
        for k in pair:
            rows[k].append(run_one(k, p))
    return rows


def summary(rows: dict[str, list[tuple[float, ...]]], i: int) -> dict:
    """Field ``i`` of each build's blocks: medians, and the B/A ratios of the blocks of one pair."""
    ratios = [b[i] / a[i] for a, b in zip(rows["A"], rows["B"])]
    return {"A_median": round(statistics.median(r[i] for r in rows["A"]), 2),
            "B_median": round(statistics.median(r[i] for r in rows["B"]), 2),
            "ratio_median": round(statistics.median(ratios), 3), "ratio_min": round(min(ratios), 3),
            "ratio_max": round(max(ratios), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the baseline build's checkout (A)")
    ap.add_argument("--blocks", type=int, default=12, help="blocks per build (even: ABBA pairs)")
    ap.add_argument("--answers", type=int, default=40, help="answers per block")
    ap.add_argument("--clients", type=int, default=1)
    ap.add_argument("--design", default="8x4", help="rnm partitions x shots")
    ap.add_argument("--out")
    args = ap.parse_args()
    partitions, shots = (int(x) for x in args.design.split("x"))
    from benchmarks.tiny_model import build_tiny_model, describe

    result: dict = {"command": " ".join(sys.argv), "model": describe(), "base": os.path.abspath(args.base),
                    "design": args.design, "clients": args.clients, "answers_per_block": args.answers}
    with tempfile.TemporaryDirectory() as tmp:
        tiny = os.path.join(tmp, "tiny")
        build_tiny_model(tiny)
        servers = {"A": start(os.path.abspath(args.base), tmp, tiny, "A"), "B": start(ROOT, tmp, tiny, "B")}
        try:
            data = {k: make_dataset(url) for k, (_, url) in servers.items()}
            for k, (proc, url) in servers.items():  # warm-up: first answers load caches and the model's paths
                asyncio.run(block(url, data[k][0], data[k][1], 8, 1, partitions, shots, 0))
            def run_one(k: str, p: int) -> tuple[float, float]:
                proc, url = servers[k]
                cpu0 = _cpu_s([proc.pid])
                wall = asyncio.run(block(url, data[k][0], data[k][1], args.answers, args.clients, partitions,
                                         shots, p * args.answers))
                cpu = (_cpu_s([proc.pid]) or 0.0) - (cpu0 or 0.0)
                return args.answers / wall, 1000.0 * cpu / args.answers

            rows = run_blocks(args.blocks, run_one)
        finally:
            for proc, _ in servers.values():
                proc.terminate()
            for proc, _ in servers.values():
                proc.wait(30)

    result["answers_per_s"] = summary(rows, 0)
    result["server_cpu_ms_per_answer"] = summary(rows, 1)
    result["blocks"] = rows
    print(json.dumps({k: v for k, v in result.items() if k != "blocks"}, indent=2))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
