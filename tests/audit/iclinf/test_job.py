"""The ``iclinf`` job kind over real HTTP (uvicorn, in-process runner, SQLite and PostgreSQL), on a
registered exemplar set whose text must never come back."""

from __future__ import annotations

import csv
import io
import time

import httpx
import pytest

from tests.conftest import LiveServer, free_port, server_settings

MARK = "QZV-ICLINF-7301"  # planted in every exemplar


@pytest.fixture(scope="module")
def server(database_url, lm):
    from app.api.main import create_app
    from app.runtime import Runtime

    settings = server_settings(database_url, job_runner="inprocess", job_poll_seconds=0.1, auth_mode="open")
    rt = Runtime.create(settings, models={lm.name: lm})
    srv = LiveServer(create_app(settings, runtime=rt), free_port())
    srv.start()
    yield srv.url
    srv.stop()
    rt.close()


def _dataset(url: str) -> str:
    texts = {"lights": ["turn the lamp on", "switch off the kitchen light", "dim the bedroom lights"],
             "music": ["play some jazz", "skip this song", "turn the music up"]}
    body = {
        "name": "iclinf-test", "task": "classification", "labels": ["lights", "music"],
        "template": {"instruction": "Classify the request.", "input_prefix": "Request: ", "output_prefix": "Intent:"},
        "exemplars": [{"input": f"{MARK} {t}", "output": lab} for lab, ts in texts.items() for t in ts for _ in (0, 1)],
    }
    r = httpx.post(f"{url}/v1/datasets", json=body, timeout=30)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _wait(url: str, job_id: str, timeout: float = 240) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        job = httpx.get(f"{url}/v1/audits/{job_id}", timeout=30).json()
        if job["status"] in ("succeeded", "failed", "cancelled"):
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} did not finish: {job}")


def test_iclinf_job_on_a_registered_set(server, database_url):
    ds = _dataset(server)
    config = {
        "dataset": {"source": "registered", "id": ds},
        "classification": {"n_shots": [1, 2], "m": 2, "seed": 3},
        "decoding": {"batch_size": 2, "targets": [1.0, 8.0], "max_tokens": 2, "clip": 10.0},
    }
    if not database_url.startswith("sqlite"):
        # Same SQL (job tenant, dataset, exemplars) on PostgreSQL with less model work: the shared
        # 2-core machine runs the full job once, on SQLite.
        config = {**config, "classification": {"n_shots": [2], "m": 1},
                  "decoding": {**config["decoding"], "targets": [8.0], "max_tokens": 1}}
    r = httpx.post(f"{server}/v1/audits", json={"kind": "iclinf", "config": config, "claimed_epsilon": 100.0},
                   timeout=30)
    assert r.status_code == 202, r.text
    job = _wait(server, r.json()["id"])
    assert job["status"] == "succeeded", job
    assert MARK not in str(job)
    res = job["result"]
    assert res["config"]["classification"]["n_shots"] == config["classification"]["n_shots"] and res["dataset"]["id"] == ds
    (entry,) = res["models"]
    runs = entry["classification"]
    shots = config["classification"]["n_shots"]
    assert [(x["n_shots"], len(x["per_position_mean"])) for x in runs] == [(n, n) for n in shots]
    assert all(x["m"] == config["classification"]["m"] and x["iclinf_mean"] > 0 for x in runs)
    cells = entry["decoding"]
    assert len(cells) == len(config["decoding"]["targets"]) and all(c["epsilon_empirical"] <= c["epsilon_theoretical"] <= c["target_epsilon"] + 1e-9
                                   for c in cells)
    assert res["epsilon"] == max(c["epsilon_empirical"] for c in cells) and job["verdict"] == "pass"
    names = {a["name"]: a for a in job["artifacts"]}
    assert {"iclinf.csv", "per_position.csv", "per_position.png", "decoding.csv", "epsilon.png",
            "config.json", "result.json"} | ({"n_shots.png"} if len(shots) > 1 else set()) == set(names)
    for name in ("per_position.png", "epsilon.png"):
        png = httpx.get(f"{server}{names[name]['url']}" if names[name]["url"].startswith("/") else names[name]["url"])
        assert png.content.startswith(b"\x89PNG\r\n\x1a\n")
    for name in ("iclinf.csv", "per_position.csv", "decoding.csv", "config.json"):
        url = names[name]["url"]
        text = httpx.get(f"{server}{url}" if url.startswith("/") else url).text
        assert MARK not in text
        if name == "per_position.csv":
            rows = list(csv.DictReader(io.StringIO(text)))
            assert [(r["n_shots"], r["position"]) for r in rows] == [(str(n), str(i + 1)) for n in shots for i in range(n)]


def test_iclinf_job_config_errors(server):
    bad = httpx.post(f"{server}/v1/audits", json={"kind": "iclinf", "config": {"classification": {"bogus": 1}}})
    assert bad.status_code == 422 and bad.json()["error"]["param"] == "config.classification.bogus"
    bad = httpx.post(f"{server}/v1/audits", json={"kind": "iclinf", "config": {"decoding": {"targets": [1], "temperature": 2}}})
    assert bad.status_code == 422 and "config.decoding" in bad.json()["error"]["param"]
    r = httpx.post(f"{server}/v1/audits", json={"kind": "iclinf", "config": {
        "dataset": {"source": "registered", "id": "ds_nope"}, "classification": {"m": 1, "n_shots": [1]}}})
    assert r.status_code == 202
    job = _wait(server, r.json()["id"], timeout=60)
    assert job["status"] == "failed" and "not found" in job["error"]["message"]
