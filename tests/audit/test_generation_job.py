"""canary_mia with task generation through the jobs API (real HTTP, in-process runner, the
bundled SmolLM2 + MiniLM, SQLite and PostgreSQL). Few model calls: an ESA bootstrap."""

from __future__ import annotations

import pytest

from tests.conftest import running_app
from tests.jobs.conftest import job_settings, submit, wait_job

ESA = {"type": "mechanism", "mechanism": "esa",
       "params": {"epsilon": 2.0, "delta": 1e-5, "partitions": 2, "shots_per_partition": 1, "candidates": 2}}


@pytest.fixture(scope="module")
def client(database_url, lm, embedder):
    with running_app(job_settings(database_url), models={lm.name: lm, embedder.name: embedder}) as c:
        yield c


def test_esa_bootstrap_job(client):
    job = submit(client, "canary_mia", {"task": "generation", "target": ESA, "dataset": {"size": 4},
                                        "canary": {"type": "false_fact"}, "mode": "bootstrap", "n_llm": 1,
                                        "n_sample": 20_000, "max_tokens": 8, "seed": 3})
    j = wait_job(client, job["id"], timeout=600)
    assert j["status"] == "succeeded", j
    r = j["result"]
    assert r["target_calls"] == 2 and r["model_calls"] == 2
    assert r["attack"]["strategy"] == "signal_text" and r["attack"]["decision"] == "signal"
    assert r["epsilon_claimed"] == pytest.approx(2.0, rel=1e-6) and j["verdict"] in ("pass", "inconclusive")
    assert set(r["estimates"]) == {"black-box", "white-box"}
    names = {a["name"] for a in client.get(f"/v1/audits/{job['id']}/artifacts").json()["data"]}
    assert {"convergence.csv", "estimates.csv"} <= names


@pytest.mark.parametrize("config,param", [
    ({"query": "inquiry"}, "config.query"),
    ({"target": {**ESA, "mechanism": "rnm"}}, "config.target.mechanism"),
    ({"target": {**ESA, "mechanism": "ksa"}, "mode": "bootstrap"}, "config.target.mechanism"),
    ({"statistic": "positive"}, "config.statistic"),
    ({"signals": ["same", "same"]}, "config.signals"),
    ({"signals": ["only one"]}, "config.signals"),
    ({"target": {**ESA, "bug": "noise_quarter"}}, "config.target.bug"),
    ({"target": {**ESA, "defence": "L3"}, "mode": "bootstrap"}, "config.target.defence"),
    ({"target": {"type": "remote", "url": "http://example.com", "defence": "L1"}}, "config.target.defence"),
])
def test_bad_generation_config_is_a_422_naming_the_field(client, config, param):
    r = client.post("/v1/audits", json={"kind": "canary_mia",
                                        "config": {"task": "generation", "target": ESA, **config}})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["param"].startswith(param), r.json()


def test_reference_vector_needs_generation(client):
    r = client.post("/v1/audits", json={"kind": "canary_mia", "config": {"statistic": "reference_vector"}})
    assert r.status_code == 422 and r.json()["error"]["param"] == "config.statistic", r.text
