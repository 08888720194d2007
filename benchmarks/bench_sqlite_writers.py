"""Ledger charges from several processes on one SQLite file (replicas on one host), this checkout
against a base checkout in alternating (ABBA) blocks.

Each of ``--processes`` worker processes runs ``--threads`` threads; a thread sleeps ``--think-ms``
(an answer's model work, off the CPU as on a GPU host), then charges a real ``rnm`` 8 x 4 cost through
``Ledger.charge`` in ``Database.write_session`` and commits, until ``--seconds`` have passed. Every
charge goes to one dataset (a gateway's common load; on SQLite the write lock is database-wide anyway).
Reported per build: charges per second, the charge's wall time (p50 / p95 / p99, queueing included) and
the workers' CPU time per charge. The database's write lock is the bottleneck by design (think time
sleeps), so what differs between builds is how soon a waiting writer of another process gets the lock.

    git worktree add -f /tmp/dpicl-base <rev>
    PYTHONPATH=. .venv/bin/python benchmarks/bench_sqlite_writers.py --base /tmp/dpicl-base \\
        --processes 4 --threads 4 --blocks 6 --out benchmarks/results/issue27/...json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_SETUP = """
import sys
from app.budget.ledger import Ledger
from app.store import Database, datasets_repo, migrate
url = sys.argv[1]
migrate.upgrade(url)
db = Database(url)
with db.session() as s:
    ds = datasets_repo.create_dataset(s, tenant_id="t1", name="bench", task="classification", labels=["a", "b"],
                                      template={}, exemplars=[("in", "a")])
    Ledger().open_account(s, dataset_id=ds.id, tenant_id="t1", epsilon=1e9, delta=1e-5, adjacency="replace-one")
    s.commit()
    print(ds.id)
db.dispose()
"""

_WORKER = """
import json, sys, threading, time
from app.budget.ledger import Ledger
from app.mechanisms import RNM
from app.privacy.accountant import PrivacyCost
from app.store import Database
url, dataset_id, threads, think, seconds, start_at = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
db = Database(url)
ledger = Ledger()
params = {"partitions": 8, "shots_per_partition": 4, "epsilon": 1.0}
cost = PrivacyCost.from_dict(RNM().cost(params, 32))
body = {"label": "a", "privacy": cost.to_dict()}
walls = []
lock = threading.Lock()
def run():
    mine = []
    while time.time() < start_at:
        time.sleep(0.001)
    end = start_at + seconds
    while True:
        time.sleep(think)
        if time.time() >= end:
            break
        t0 = time.perf_counter()
        with db.write_session() as s:
            ledger.charge(s, dataset_id=dataset_id, tenant_id="t1", cost=cost, mechanism="rnm", params=params,
                          response=body)
            s.commit()
        mine.append(time.perf_counter() - t0)
    with lock:
        walls.extend(mine)
c0 = time.process_time()
ts = [threading.Thread(target=run) for _ in range(threads)]
for t in ts: t.start()
for t in ts: t.join()
print(json.dumps({"walls": walls, "cpu": time.process_time() - c0}))
db.dispose()
"""


def _env(app_root: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(app_root), OMP_NUM_THREADS="1")


def run_block(app_root: Path, url: str, dataset_id: str, a: argparse.Namespace) -> dict:
    start_at = time.time() + 3.0  # every worker imports first, then all start together
    procs = [subprocess.Popen([sys.executable, "-c", _WORKER, url, dataset_id, str(a.threads), str(a.think_ms / 1e3),
                               str(a.seconds), str(start_at)], stdout=subprocess.PIPE, text=True, env=_env(app_root),
                              cwd=app_root) for _ in range(a.processes)]
    outs = [json.loads(p.communicate(timeout=a.seconds + 120)[0]) for p in procs]
    walls = sorted(w for o in outs for w in o["walls"])
    n = len(walls)
    q = lambda f: round(1e3 * walls[min(n - 1, int(f * n))], 2)  # noqa: E731
    return {"charges_per_s": round(n / a.seconds, 1), "charges": n, "wall_ms_p50": q(0.5), "wall_ms_p95": q(0.95),
            "wall_ms_p99": q(0.99), "cpu_ms_per_charge": round(1e3 * sum(o["cpu"] for o in outs) / max(n, 1), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", type=Path, required=True, help="a checkout of the base build (git worktree)")
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--think-ms", type=float, default=5.0)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--blocks", type=int, default=4, help="ABBA blocks (each runs both builds twice)")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    builds = {"base": a.base.resolve(), "this": ROOT}
    runs: dict[str, list[dict]] = {"base": [], "this": []}
    with tempfile.TemporaryDirectory() as tmp:
        for block in range(a.blocks):
            for name in ("base", "this", "this", "base") if block % 2 == 0 else ("this", "base", "base", "this"):
                url = f"sqlite:///{tmp}/{name}{block}_{len(runs[name])}.db"
                ds = subprocess.run([sys.executable, "-c", _SETUP, url], capture_output=True, text=True, check=True,
                                    env=_env(builds[name]), cwd=builds[name]).stdout.split()[-1]
                r = run_block(builds[name], url, ds, a)
                runs[name].append(r)
                print(f"block {block} {name:4s} {r}", flush=True)
    summary = {}
    for name, rs in runs.items():
        summary[name] = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
    ratios = [t["charges_per_s"] / b["charges_per_s"] for t, b in zip(runs["this"], runs["base"])]
    out = {"command": " ".join(sys.argv), "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(a).items()}, "runs": runs, "medians": summary,
           "throughput_ratio_median": round(statistics.median(ratios), 3),
           "throughput_ratio_range": [round(min(ratios), 3), round(max(ratios), 3)],
           "load_average_after": list(os.getloadavg())}
    print(json.dumps({k: out[k] for k in ("medians", "throughput_ratio_median", "throughput_ratio_range")}, indent=1))
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
