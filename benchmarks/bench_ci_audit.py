"""A CI audit end to end: plan, then audit a fast gateway over HTTP, correct and with sigma/4.

    python benchmarks/bench_ci_audit.py                   # claim epsilon 1, detect noise x 1/4 with P >= 0.9
    python benchmarks/bench_ci_audit.py --epsilon 2 --json
    python benchmarks/bench_ci_audit.py --compare --json  # fixed design vs sequential (issue 28)
    python benchmarks/bench_ci_audit.py --compare --inprocess  # the same on in-process rnm, bundled SmolLM2

Target (issue 14): a CI audit that detects sigma/4 at claimed epsilon 1 with probability >= 0.9
finishes in under 5 minutes on the 2-core machine against a fast gateway. The gateway is
``tests/audit/standalone_gateway.py`` (independent of dpicl; ideal copier behind Gaussian RNM);
the auditor is a real ``dpicl serve`` (SQLite, in-process job runner, no models) in a subprocess,
driven through ``dpicl audit plan`` / ``dpicl audit run --wait``'s HTTP API.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.dpicl_server import start_dpicl, stop  # noqa: E402
from tests.audit.standalone_gateway import StandaloneGateway  # noqa: E402

EXEMPLARS = [{"input": f"play some music number {i}", "output": "music"} for i in range(12)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--alternative", default="noise_quarter")
    ap.add_argument("--min-detection", type=float, default=0.9)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--compare", action="store_true", help="fixed design vs sequential: model calls, time, "
                    "verdicts (benchmarks/ci_sequential_compare.py)")
    ap.add_argument("--sim-reps", type=int, default=200)
    ap.add_argument("--gateway-reps", type=int, default=3)
    ap.add_argument("--inprocess", action="store_true", help="with --compare: in-process rnm on the bundled "
                    "SmolLM2 instead of the simulated and gateway targets")
    a = ap.parse_args()
    if a.compare:
        import torch

        torch.set_num_threads(1)
        from benchmarks.ci_sequential_compare import compare, inprocess

        t0 = time.perf_counter()
        if a.inprocess:
            from benchmarks.bench_audit import load_lm

            res = inprocess(load_lm(1))
        else:
            res = compare(sim_reps=a.sim_reps, gw_reps=a.gateway_reps)
        res["seconds"] = time.perf_counter() - t0
        print(json.dumps(res, indent=2))
        return
    proc, url = start_dpicl("bench-ci", {"DPICL_LOAD_MODELS": "false", "DPICL_JOB_POLL_SECONDS": "0.1",
                                         "DPICL_WEBHOOK_ALLOW_PRIVATE": "true", "DPICL_EGRESS_ALLOW_PRIVATE": "true"})
    out: dict = {"machine": platform.platform(), "cpus": os.cpu_count(), "claimed_epsilon": a.epsilon}
    try:
        with httpx.Client(base_url=url, timeout=600) as c:

            def config(gw_url: str, partitions: int, trials) -> dict:
                return {"target": {"type": "remote", "url": gw_url, "mechanism": "rnm",
                                   "params": {"epsilon": a.epsilon, "delta": 1e-5, "partitions": partitions,
                                              "shots_per_partition": 12 // partitions}},
                        "dataset": {"exemplars": EXEMPLARS, "labels": ["weather", "music"], "size": 12},
                        "canary": {"type": "hex", "label": "weather"}, "query": "input_output",
                        "threat_model": "black-box", "trials": trials, "seed": 1,
                        "power": {"alternatives": [a.alternative], "min_detection": a.min_detection}}

            t0 = time.perf_counter()
            plan = c.post("/v1/audits/plan", json={"config": config("http://127.0.0.1:9", 4, 40),
                                                   "claimed_epsilon": a.epsilon}).json()
            out["plan_seconds"] = time.perf_counter() - t0
            bb = [d for d in plan["designs"] if d["threat_model"] == "black-box" and d["trials"]]
            best = min(bb, key=lambda d: d["trials"] * d["partitions"])
            # The same goal from the rigorous bound alone (no release floor), for comparison.
            from app.audit.noise import rnm_noise
            from app.audit.planner import plan_black_box

            bound_only = min((plan_black_box(rnm_noise({"epsilon": a.epsilon, "delta": 1e-5, "partitions": t,
                                                        "shots_per_partition": 12 // t}, 12),
                                             labels=2, partitions=t, claimed_epsilon=a.epsilon, confidence=0.95,
                                             delta=1e-5, alternatives=[a.alternative],
                                             min_detection=a.min_detection, floor=False) for t in (2, 3, 4, 6)),
                             key=lambda d: (d.trials is None, (d.trials or 0) * d.partitions))
            out["designs"] = {}
            for name, parts, trials, det in (
                    ("recommended", best["partitions"], best["trials"], best["detection"]),
                    ("bound_only", bound_only.partitions, bound_only.trials, bound_only.detection)):
                row = {"partitions": parts, "trials": trials, "predicted_detection": det}
                for mode in ("correct", "sigma_quarter"):
                    with StandaloneGateway(mode, seed=2) as gw:
                        t0 = time.perf_counter()
                        r = c.post("/v1/audits", json={"kind": "canary_mia", "claimed_epsilon": a.epsilon,
                                                       "config": config(gw.url, parts, trials)})
                        job = r.json()
                        if r.status_code != 202:
                            raise SystemExit(f"submit failed: {r.text}")
                        while job["status"] not in ("succeeded", "failed", "cancelled"):
                            time.sleep(0.5)
                            job = c.get(f"/v1/audits/{job['id']}").json()
                        res = job["result"] or {}
                        row[mode] = {"seconds": time.perf_counter() - t0, "verdict": job["verdict"],
                                     "epsilon_lower": res.get("epsilon"),
                                     "release_floor_conformant": (res.get("release_floor") or {}).get("conformant"),
                                     "gateway_requests": gw.requests, "reason": job.get("verdict_reason")}
                out["designs"][name] = row
    finally:
        stop(proc)
    if a.json:
        print(json.dumps(out, indent=2))
        return
    print(f"claim epsilon {a.epsilon:g}, detect {a.alternative} with P >= {a.min_detection:g}; "
          f"plan in {out['plan_seconds']:.1f} s")
    for name, d in out["designs"].items():
        print(f"{name}: {d['partitions']} partitions x {d['trials']} trials, predicted P(detect) "
              f"{d['predicted_detection'][a.alternative]:.3f}")
        for mode in ("correct", "sigma_quarter"):
            m = d[mode]
            print(f"  {mode:<14} verdict {m['verdict']:<11} bound {m['epsilon_lower']:.3f}  release floor "
                  f"{'ok' if m['release_floor_conformant'] else 'REJECTED'}  {m['seconds']:.1f} s  "
                  f"({m['gateway_requests']} gateway requests)")


if __name__ == "__main__":
    main()
