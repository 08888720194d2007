"""README's CI audit config as pasted (its URL and claim replaced) against a real dpicl gateway: two
``dpicl serve`` processes, a gateway serving the bundled SmolLM2 (in-process rnm) and an auditor without
models, both open-mode on SQLite; the black-box defaults (a one-label context, a counted decoy the gateway
registers as a label). One sequential audit at claim 1, one direct at claim 2::

    python benchmarks/readme_ci_audit_e2e.py
"""
import json
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.dpicl_server import start_dpicl, stop  # noqa: E402

gw, gw_url = start_dpicl("gateway", {"DPICL_LOAD_MODELS": "true", "OMP_NUM_THREADS": "2"})
au, au_url = start_dpicl("auditor", {"DPICL_LOAD_MODELS": "false", "DPICL_EGRESS_ALLOW_PRIVATE": "true",
                                     "DPICL_JOB_POLL_SECONDS": "0.1"})
try:
    for mode, eps in (("sequential", 1), ("direct", 2)):
        cfg = {"target": {"type": "remote", "url": gw_url, "mechanism": "rnm",
                          "params": {"epsilon": eps, "delta": 1e-5, "partitions": 3, "shots_per_partition": 4}},
               "dataset": {"size": 12}, "canary": {"type": "hex"}, "query": "input_output",
               "threat_model": "black-box", "trials": "auto", "power": {"alternatives": ["noise_quarter"]}, "seed": 1,
               "mode": mode}
        t0 = time.time()
        r = httpx.post(au_url + "/v1/audits", json={"kind": "canary_mia", "config": cfg, "claimed_epsilon": eps},
                       timeout=60)
        assert r.status_code == 202, r.text
        job = r.json()
        while job["status"] not in ("succeeded", "failed", "cancelled"):
            time.sleep(1)
            job = httpx.get(f"{au_url}/v1/audits/{job['id']}", timeout=30).json()
        res = job.get("result") or {}
        print(json.dumps({"mode": mode, "claim": eps, "status": job["status"], "verdict": job["verdict"],
                          "reason": (job.get("verdict_reason") or str(job.get("error")))[:300],
                          "context": res.get("context"), "labels": (res.get("attack") or {}).get("labels"),
                          "trials": res.get("trials_total"), "seconds": round(time.time() - t0, 1)}), flush=True)
finally:
    stop(gw, au)
