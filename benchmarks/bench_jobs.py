"""Benchmark: submitting audit jobs while another job runs (issue 4).

    python benchmarks/bench_jobs.py                  # SQLite (in-process runner) and PostgreSQL (procrastinate)
    python benchmarks/bench_jobs.py --db sqlite --json
    python benchmarks/bench_jobs.py --baseline-ref 5587391   # also the server of an older commit, same run

Target: POST /v1/audits answers in under 50 ms at the 95th percentile with 20
concurrent clients while another job runs. Each database gets a real `dpicl serve`
process (no models loaded: submission never touches them); on PostgreSQL a real
`dpicl worker` runs the job, on SQLite the server's in-process runner does. The
running job is measured twice: one that sleeps between progress points, and one
that spins the CPU in pure Python (holding the GIL) — the worst case for the server process —
and one that spins in numpy matrix products (BLAS releases the GIL).
Clients either fire back to back (think time 0: saturation, latency = 20 /
throughput by Little's law) or pause between requests (exponential think time,
default mean 200 ms: 20 busy CI clients). Latency is measured in the client and
includes its own overhead (20 Python threads), so it is an upper bound.

``--baseline-ref REF`` checks REF out in a temporary git worktree and measures its
server too, alternating with this tree's per database, so that both code paths
see the same machine load (a background kind REF does not know is skipped there).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.dpicl_server import free_port  # noqa: E402




def _env(url: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(DPICL_DATABASE_URL=url, DPICL_LOAD_MODELS="false", DPICL_JOB_TEST_KINDS="true",
               DPICL_AUTH_MODE="open", DPICL_LOG_LEVEL="warning", DPICL_JOB_CONCURRENCY="1")
    return env


def _start(args: list[str], env: dict[str, str], log, root: Path = ROOT) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "app.cli", *args], cwd=root, env=env, stdout=log,
                            stderr=subprocess.STDOUT)


BACKGROUND = {  # name -> the long job's extra config, and its label
    "sleeping": ({"busy": False}, "sleeping"),
    "python": ({"busy": True}, "cpu-bound (GIL)"),
    "numpy": ({"busy": True, "busy_numpy": True}, "cpu-bound numpy"),
}


def _wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("dpicl serve exited")
        try:
            if httpx.get(f"{url}/v1/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError("dpicl serve did not become healthy")


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def measure(url: str, clients: int, per_client: int, think_ms: float) -> dict:
    body = {"kind": "sleep", "config": {"steps": 1, "step_seconds": 0}, "claimed_epsilon": 1.0}
    lat: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(clients)

    def client(n: int) -> None:
        import random

        rng = random.Random(n)
        with httpx.Client(base_url=url, timeout=30) as c:
            for _ in range(3):  # warm the connection
                c.get("/v1/audits", params={"limit": 1})
            barrier.wait()
            for _ in range(per_client):
                key = f"bench-{uuid.uuid4().hex}"
                t0 = time.perf_counter()
                r = c.post("/v1/audits", json=body, headers={"Idempotency-Key": key})
                dt = time.perf_counter() - t0
                with lock:
                    if r.status_code == 202:
                        lat.append(dt)
                    else:
                        errors.append(f"HTTP {r.status_code}")
                if think_ms:
                    time.sleep(rng.expovariate(1.0 / (think_ms / 1e3)))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    ms = [x * 1e3 for x in lat]
    return {
        "requests": len(lat), "errors": len(errors), "clients": clients, "think_ms": think_ms,
        "p50_ms": round(_pct(ms, 0.50), 2), "p95_ms": round(_pct(ms, 0.95), 2), "p99_ms": round(_pct(ms, 0.99), 2),
        "max_ms": round(max(ms), 2), "mean_ms": round(statistics.fmean(ms), 2),
        "throughput_rps": round(len(lat) / wall, 1),
    }


def bench_db(kind: str, clients: int, per_client: int, think: list[float], tmp: Path, *,
             background: list[str], root: Path = ROOT, code: str = "this tree") -> list[dict]:
    from tests.conftest import PG_ADMIN_URL, PostgresDatabases

    pg = None
    if kind == "sqlite":
        url = f"sqlite:///{tmp / 'bench.db'}"
    else:
        pg = PostgresDatabases(PG_ADMIN_URL)
        url = pg.create()
    env = _env(url)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = open(tmp / f"{kind}.log", "ab")
    procs = [_start(["serve", "--port", str(port)], env, log, root)]
    try:
        _wait_healthy(base, procs[0])
        if kind == "postgres":
            procs.append(_start(["worker", "--name", "bench"], env, log, root))
        out = []
        for bg in background:
            extra, bg_label = BACKGROUND[bg]
            for think_ms in think:
                with httpx.Client(base_url=base, timeout=30) as c:
                    r = c.post("/v1/audits", json={"kind": "sleep", "config": {
                        "steps": 100_000, "step_seconds": 0.05, **extra}})
                    if r.status_code == 422:  # an older server without this background kind
                        break
                    long_job = r.json()
                    deadline = time.time() + 120
                    while c.get(f"/v1/audits/{long_job['id']}").json()["status"] != "running":
                        if time.time() > deadline:
                            raise RuntimeError("the background job never started")
                        time.sleep(0.1)
                    res = measure(base, clients, per_client, think_ms)
                    still = c.get(f"/v1/audits/{long_job['id']}").json()["status"]
                    # Clear the queue for the next round.
                    c.post(f"/v1/audits/{long_job['id']}/cancel")
                    while True:
                        page = c.get("/v1/audits", params={"status": "queued", "limit": 100}).json()["data"]
                        if not page:
                            break
                        for j in page:
                            c.post(f"/v1/audits/{j['id']}/cancel")
                out.append({"code": code, "db": kind, "runner": "inprocess" if kind == "sqlite" else "procrastinate",
                            "background_job": bg_label,
                            "background_still_running": still == "running", **res})
        return out
    finally:
        for p in procs:
            p.terminate()
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        log.close()
        if pg is not None:
            pg.drop_all()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--requests", type=int, default=25, help="per client")
    ap.add_argument("--think-ms", type=float, nargs="+", default=[0.0, 200.0],
                    help="mean pause between a client's requests (0: back to back, the saturation case)")
    ap.add_argument("--background", nargs="+", choices=list(BACKGROUND), default=list(BACKGROUND),
                    help="the job running meanwhile: sleeping, pure-Python spin (holds the GIL), numpy spin")
    ap.add_argument("--baseline-ref", metavar="REF", help="also measure the server of this git commit (same run)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    kinds = ["sqlite", "postgres"] if args.db == "both" else [args.db]
    rows = []
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as d:
        trees = [(ROOT, "this tree")]
        if args.baseline_ref:
            wt = Path(d) / "baseline"
            subprocess.run(["git", "worktree", "add", "--detach", str(wt), args.baseline_ref], cwd=ROOT, check=True,
                           capture_output=True)
            trees.insert(0, (wt, args.baseline_ref))
        try:
            for k in kinds:
                for root, code in trees:
                    rows += bench_db(k, args.clients, args.requests, args.think_ms, Path(d),
                                     background=args.background, root=root, code=code)
        finally:
            if args.baseline_ref:
                subprocess.run(["git", "worktree", "remove", "--force", str(trees[0][0])], cwd=ROOT, check=False)
    meta = {"python": platform.python_version(), "cpus": os.cpu_count(), "load_avg_before": load_before[0],
            "load_avg": os.getloadavg()[0]}
    if args.json:
        print(json.dumps({"meta": meta, "results": rows}, indent=2))
        return
    print(f"POST /v1/audits, {args.clients} concurrent clients x {args.requests} requests, another job running "
          f"(cpus {meta['cpus']}, load average {meta['load_avg_before']:.1f} before, {meta['load_avg']:.1f} after)")
    print(f"{'code':<11}{'db':<9}{'runner':<15}{'background':<17}{'think ms':>9}{'p50 ms':>8}{'p95 ms':>8}{'p99 ms':>8}{'max ms':>8}{'req/s':>8}"
          f"{'errors':>8}")
    for r in rows:
        print(f"{r['code'][:10]:<11}{r['db']:<9}{r['runner']:<15}{r['background_job']:<17}{r['think_ms']:>9g}{r['p50_ms']:>8}{r['p95_ms']:>8}"
              f"{r['p99_ms']:>8}{r['max_ms']:>8}{r['throughput_rps']:>8}{r['errors']:>8}")
    print("target: p95 < 50 ms")


if __name__ == "__main__":
    main()
