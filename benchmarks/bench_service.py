"""Service footprint: start `dpicl serve` on the embedded defaults (both bundled models, a
fresh SQLite), then report time-to-ready and the process's peak resident memory.

    python benchmarks/bench_service.py [--runs 2]

Peak memory is VmHWM of the server process (Linux /proc), read after a private
classification so that the forward-pass buffers are counted.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

import httpx


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _vm(pid: int, key: str) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024 / 1024  # kB -> GiB
    return float("nan")


def run_once() -> dict:
    port = _port()
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, DPICL_DATABASE_URL=f"sqlite:///{tmp}/b.db", DPICL_LOG_LEVEL="warning")
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--port", str(port)], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            while True:
                try:
                    if httpx.get(f"{url}/v1/health", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if proc.poll() is not None or time.perf_counter() - t0 > 300:
                    raise RuntimeError("server did not start")
                time.sleep(0.1)
            ready = time.perf_counter() - t0
            rss_idle = _vm(proc.pid, "VmRSS")
            ds = httpx.post(f"{url}/v1/datasets", json={
                "name": "b", "labels": ["billing", "shipping"],
                "exemplars": [{"input": f"charged twice {i}", "output": "billing"} for i in range(4)]
                + [{"input": f"parcel late {i}", "output": "shipping"} for i in range(4)]}).json()["id"]
            r = httpx.post(f"{url}/v1/private/classify", timeout=120, json={
                "dataset_id": ds, "query": "Where is my parcel?", "mechanism": "rnm", "epsilon": 1.0,
                "partitions": 4, "shots_per_partition": 2})
            assert r.status_code == 200, r.text
            return {"ready_seconds": round(ready, 2), "rss_idle_gib": round(rss_idle, 3),
                    "peak_rss_gib": round(_vm(proc.pid, "VmHWM"), 3)}
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=2)
    args = ap.parse_args()
    runs = [run_once() for _ in range(args.runs)]
    print(json.dumps({"runs": runs, "peak_rss_gib_max": max(r["peak_rss_gib"] for r in runs),
                      "ready_seconds_min": min(r["ready_seconds"] for r in runs)}, indent=2))


if __name__ == "__main__":
    main()
