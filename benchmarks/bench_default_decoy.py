"""The README's CI audit config as pasted, with ``decoy_labels`` at its default ("auto": one counted decoy
for a black-box audit of rnm) and at 0 (the old default), against the independent gateway
(tests/audit/standalone_gateway.py) in each mode, fixed design ("trials": "auto") and sequential::

    PYTHONPATH=. python benchmarks/bench_default_decoy.py --reps 3 --out benchmarks/results/issue28/default_decoy.json

A real ``dpicl serve`` (SQLite, in-process job runner, no models) in a subprocess runs every audit as a
job through the HTTP API. Per cell: verdicts over ``--reps`` seeds, mean trials and gateway prompts
(partitions x classify calls, counted by the gateway) and wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.dpicl_server import start_dpicl, stop  # noqa: E402
from tests.audit.standalone_gateway import StandaloneGateway  # noqa: E402

MODES = ("correct", "sigma_quarter", "winner_only", "no_noise")


BUGS = {"correct": None, "sigma_quarter": "noise_quarter", "winner_only": "winner_only", "no_noise": "noise_tenth"}


def readme_config(gw_url: str | None, epsilon: float, mode: str, seed: int, decoys: int | None,
                  pick: str | None = None, bug: str | None = None) -> dict:
    """README.md's CI example (a remote rnm gateway, 3 partitions x 4 shots, 12 exemplars, black-box,
    trials auto, noise_quarter required), its URL and claim replaced; a bundled task's labels."""
    cfg: dict = {"target": {"type": "remote", "url": gw_url, "mechanism": "rnm",
                            "params": {"epsilon": epsilon, "delta": 1e-5, "partitions": 3,
                                       "shots_per_partition": 4}},
                 "dataset": {"size": 12}, "canary": {"type": "hex"}, "query": "input_output",
                 "threat_model": "black-box", "trials": "auto", "power": {"alternatives": ["noise_quarter"]},
                 "seed": seed}
    if gw_url is None:  # in-process rnm on the served SmolLM2, seen black-box; the gateway's mode as a bug
        cfg["target"] = {"type": "mechanism", "mechanism": "rnm", "params": cfg["target"]["params"], "bug": bug}
    if mode == "sequential":
        cfg["mode"] = "sequential"
    if decoys is not None:
        cfg["dataset"]["decoy_labels"] = decoys
    if pick is not None:
        cfg["dataset"]["pick"] = pick
    return cfg


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--epsilons", default="1,2")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--pick", default=None, help="dataset.pick (default: the config's default, auto)")
    ap.add_argument("--designs", default="fixed,sequential")
    ap.add_argument("--decoys", default="auto,0", help="decoy_labels values to compare (auto: the default)")
    ap.add_argument("--inprocess", action="store_true", help="in-process rnm on the bundled SmolLM2 instead of "
                    "the gateway (its modes as target.bug; no_noise: noise_tenth)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    proc, url = start_dpicl("bench-decoy", {"DPICL_LOAD_MODELS": "true" if a.inprocess else "false",
                                            "DPICL_JOB_POLL_SECONDS": "0.1", "DPICL_EGRESS_ALLOW_PRIVATE": "true"})
    rows = []
    t_all = time.perf_counter()
    try:
        with httpx.Client(base_url=url, timeout=600) as c:
            for eps in (float(x) for x in a.epsilons.split(",")):
                for design in a.designs.split(","):
                    for decoys in (None if d == "auto" else int(d) for d in a.decoys.split(",")):
                        for mode in a.modes.split(","):
                            verdicts: Counter = Counter()
                            trials, prompts, secs, labels = [], [], [], None
                            picks: Counter = Counter()
                            firsts: list[dict] = []  # sequential: the trial at which each null was first rejected
                            for rep in range(a.reps):
                                with StandaloneGateway(mode, seed=100 + rep) as gw:
                                    t0 = time.perf_counter()
                                    r = c.post("/v1/audits", json={
                                        "kind": "canary_mia", "claimed_epsilon": eps,
                                        "config": readme_config(None if a.inprocess else gw.url, eps, design, rep + 1,
                                                                decoys, a.pick, BUGS[mode])})
                                    if r.status_code != 202:
                                        raise SystemExit(f"submit failed: {r.text}")
                                    job = r.json()
                                    while job["status"] not in ("succeeded", "failed", "cancelled"):
                                        time.sleep(0.2)
                                        job = c.get(f"/v1/audits/{job['id']}").json()
                                    secs.append(time.perf_counter() - t0)
                                    res = job.get("result") or {}
                                    verdicts[job["verdict"] or job["status"]] += 1
                                    trials.append(res.get("trials_total") or (res.get("sequential") or {}).get("trials"))
                                    # in process: the sequential result's prompts, or the fixed design's classify
                                    # calls x its 3 partitions
                                    prompts.append(((res.get("sequential") or {}).get("prompts")
                                                    or 3 * int(res.get("model_calls") or 0)) if a.inprocess
                                                   else gw.prompts)
                                    labels = job["config"]["dataset"].get("decoy_labels")
                                    picks[(res.get("context") or {}).get("pick")] += 1
                                    rejected = (res.get("sequential") or {}).get("rejected")
                                    if rejected:
                                        firsts.append({k: v["trials"] for k, v in rejected.items()})
                            row = {"claim": eps, "design": design, "decoy_labels": "auto" if decoys is None else decoys,
                                   "resolved_decoys": labels, "context": dict(picks), "target": mode, "verdicts": dict(verdicts),
                                   "mean_trials": round(sum(t or 0 for t in trials) / len(trials), 1),
                                   "mean_prompts": round(sum(prompts) / len(prompts), 1),
                                   "mean_seconds": round(sum(secs) / len(secs), 2)}
                            if firsts:  # which null a sequential pass waited for (the last one rejected)
                                row["first_rejected_at"] = firsts
                                row["last_rejected"] = dict(Counter(max(f, key=f.__getitem__) for f in firsts))
                            print(json.dumps(row), flush=True)
                            rows.append(row)
    finally:
        stop(proc)
    out = {"command": " ".join(sys.argv), "reps": a.reps, "cpus": os.cpu_count(), "seconds": round(time.perf_counter() - t_all, 1),
           "rows": rows}
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
