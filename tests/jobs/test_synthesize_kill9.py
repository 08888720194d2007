"""kill -9 of a real `dpicl serve` while a ``synthesize`` job generates, after its charge: the
restarted server runs the job again under the SAME charge (one ledger entry) and releases one set.

SQLite, in-process runner, SmolLM2 loaded by the subprocess (the SQL of the charge is covered on
both databases in tests/api/test_synthesize.py)."""

from __future__ import annotations

import json

import httpx

from tests.conftest import model_cache_dir
from tests.jobs.conftest import fast_env, start_server, wait_for, wait_job


def test_kill9_mid_synthesis_charges_once(tmp_path):
    url = f"sqlite:///{tmp_path / 'dpicl.db'}"
    lm_only = json.dumps([{"name": "smollm2-135m-instruct", "kind": "lm", "source": "bundled:smollm2-135m-instruct"}])
    env = fast_env(url, DPICL_JOB_RUNNER="inprocess", DPICL_LOAD_MODELS="true", DPICL_MODELS=lm_only,
                   DPICL_MODEL_CACHE_DIR=str(model_cache_dir()), DPICL_DEVICE="cpu", DPICL_DTYPE="float32",
                   DPICL_MIGRATE_ON_STARTUP="true", OMP_NUM_THREADS="1", DPICL_JOB_MAX_ATTEMPTS="3")
    proc, base = start_server(env, tmp_path / "serve1.log", timeout=180)
    try:
        with httpx.Client(base_url=base, timeout=30) as c:
            ex = [{"input": t, "output": "lights"} for t in ("turn the lamp on", "dim the lights", "lights off")] + \
                 [{"input": t, "output": "music"} for t in ("play jazz", "skip this song", "volume up")]
            ds = c.post("/v1/datasets", json={"name": "k9", "task": "classification", "labels": ["lights", "music"],
                                              "exemplars": ex}).json()["id"]
            job = c.post("/v1/audits", json={"kind": "synthesize", "config": {
                "dataset_id": ds, "epsilon": 4.0, "delta": 1e-5, "shots_per_label": 4, "max_tokens": 24,
                "partitions": 2}}).json()
            # Wait for the charge (the ledger entry), then kill mid-generation.
            wait_for(lambda: c.get(f"/v1/datasets/{ds}/budget").json()["charges"] == 1, 120, "the charge")
            first = c.get(f"/v1/audits/{job['id']}").json()
            assert first["status"] == "running", first
        proc.kill9()
        proc, base = start_server(env, tmp_path / "serve2.log", timeout=180)
        with httpx.Client(base_url=base, timeout=30) as c:
            done = wait_job(c, job["id"], timeout=300)
            assert done["status"] == "succeeded", (done["error"], proc.output())
            assert done["attempts"] == 2 and done["result"]["charged"] is False
            assert done["result"].get("resumed") is not True  # killed before the release: generated again
            led = c.get(f"/v1/datasets/{ds}/ledger").json()["data"]
            assert [(e["idempotency_key"], e["status"]) for e in led] == [(f"synthesize:{job['id']}", "charged")]
            new = c.get(f"/v1/datasets/{done['result']['dataset_id']}").json()
            assert new["visibility"] == "public" and new["provenance"]["ledger_entry_id"] == led[0]["id"]
    finally:
        proc.stop()
