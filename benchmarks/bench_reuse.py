"""Answer reuse: the budget a workload with repeated queries spends, with reuse vs without (the
baseline, same process, same server, same workload), plus the budget forecast before and after.

A real ``dpicl serve`` (SQLite, bundled SmolLM2-135M) answers ``--queries`` private ``rnm``
requests drawn from the bundled ``assistant_intents`` test split, of which ``--repeat-share``
repeat an earlier query of the workload (fixed seed). The same workload runs on two datasets
with the same exemplars: ``answer_reuse`` on and off. Reported per arm: ledger charges, the
ledger's sum of per-answer epsilons (what basic composition would spend), the composed
``epsilon_spent`` (RDP at the budget's delta, the ledger's figure), the forecast's
``answers_remaining`` afterwards, and wall time.

    python benchmarks/bench_reuse.py --queries 40 --repeat-share 0.3
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
import numpy as np


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def workload(n: int, repeat_share: float, seed: int) -> list[str]:
    """n queries: round(n * repeat_share) of them repeat an earlier query of the workload."""
    from app.icl.datasets import load_bundled

    rng = np.random.default_rng(seed)
    test = [e.input for e in load_bundled("assistant_intents").test]
    n_rep = int(round(n * repeat_share))
    fresh = [test[i] for i in rng.choice(len(test), size=n - n_rep, replace=False)]
    out = list(fresh)
    for _ in range(n_rep):  # each repeat goes after a random earlier position
        pos = int(rng.integers(1, len(out) + 1))
        out.insert(pos, out[int(rng.integers(0, pos))])
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--repeat-share", type=float, default=0.3)
    ap.add_argument("--epsilon", type=float, default=0.25, help="per answer (rnm, Gaussian)")
    ap.add_argument("--budget", type=float, default=8.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from app.icl.datasets import load_bundled

    task = load_bundled("assistant_intents")
    exemplars = [{"input": e.input, "output": e.output} for e in task.train[:32]]
    queries = workload(args.queries, args.repeat_share, args.seed)
    ask = {"mechanism": "rnm", "epsilon": args.epsilon, "delta": 1e-6, "partitions": 8, "shots_per_partition": 2}
    port = _port()
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, DPICL_DATABASE_URL=f"sqlite:///{tmp}/b.db", DPICL_LOG_LEVEL="warning")
        proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--port", str(port)], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            t0 = time.perf_counter()
            while True:
                try:
                    if httpx.get(f"{url}/v1/health", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if proc.poll() is not None or time.perf_counter() - t0 > 300:
                    raise RuntimeError("server did not start")
                time.sleep(0.2)
            arms = {}
            for reuse in (False, True):  # baseline first
                ds = httpx.post(f"{url}/v1/datasets", timeout=60, json={
                    "name": f"reuse-{reuse}", "labels": list(task.labels), "answer_reuse": reuse,
                    "template": {"instruction": task.template.instruction, "input_prefix": task.template.input_prefix,
                                 "output_prefix": task.template.output_prefix},
                    "budget": {"epsilon": args.budget, "delta": 1e-5}, "exemplars": exemplars}).json()["id"]
                fq = {k: v for k, v in ask.items()}
                before = httpx.get(f"{url}/v1/datasets/{ds}/budget/forecast", params=fq, timeout=60).json()
                t = time.perf_counter()
                reused = 0
                for q in queries:
                    r = httpx.post(f"{url}/v1/private/classify", timeout=300, json={"dataset_id": ds, "query": q, **ask})
                    assert r.status_code == 200, r.text
                    reused += bool(r.json()["reused"])
                wall = time.perf_counter() - t
                live = [e for e in httpx.get(f"{url}/v1/datasets/{ds}/ledger", params={"limit": 500}, timeout=60)
                        .json()["data"] if e["status"] == "charged"]
                b = httpx.get(f"{url}/v1/datasets/{ds}/budget", timeout=60).json()
                after = httpx.get(f"{url}/v1/datasets/{ds}/budget/forecast", params=fq, timeout=60).json()
                arms["reuse" if reuse else "baseline"] = {
                    "answers": len(queries), "reused": reused, "charges": len(live),
                    "ledger_epsilon_sum": round(sum(e["epsilon"] for e in live), 6),
                    "epsilon_spent_composed": round(b["epsilon_spent"], 6), "composition": b["composition"],
                    "forecast_before": before["answers_remaining"], "forecast_after": after["answers_remaining"],
                    "wall_seconds": round(wall, 2)}
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    base, re = arms["baseline"], arms["reuse"]
    print(json.dumps({
        "workload": {"queries": len(queries), "distinct": len(set(queries)), "repeat_share": args.repeat_share,
                     "per_answer": ask, "budget": {"epsilon": args.budget, "delta": 1e-5}},
        "arms": arms,
        "ratio_reuse_over_baseline": {
            "charges": round(re["charges"] / base["charges"], 4),
            "ledger_epsilon_sum": round(re["ledger_epsilon_sum"] / base["ledger_epsilon_sum"], 4),
            "epsilon_spent_composed": round(re["epsilon_spent_composed"] / base["epsilon_spent_composed"], 4),
            "wall_seconds": round(re["wall_seconds"] / base["wall_seconds"], 4)},
    }, indent=2))


if __name__ == "__main__":
    main()
