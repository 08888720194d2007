"""The canary_mia kind through the jobs API (real HTTP, in-process runner, SQLite and PostgreSQL).
Simulated-vote targets: no model needed, the statistics are exact enough at thousands of trials."""

from __future__ import annotations

import pytest

from tests.conftest import running_app
from tests.jobs.conftest import job_settings, submit, wait_job

SIM = {"type": "simulated", "params": {"epsilon": 1.0, "delta": 1e-5, "partitions": 4}}
EXEMPLARS = [{"input": f"request number {i}", "output": ["weather", "music"][i % 2]} for i in range(8)]
DATASET = {"exemplars": EXEMPLARS, "labels": ["weather", "music"], "size": 8}


@pytest.fixture(scope="module")
def client(database_url):
    with running_app(job_settings(database_url), timeout=30) as c:
        yield c


def test_correct_passes_and_broken_is_a_violation(client):
    ok = submit(client, "canary_mia", {"target": SIM, "dataset": DATASET, "trials": 2000, "seed": 1})
    bad = submit(client, "canary_mia", {"target": {**SIM, "bug": "noise_quarter"}, "dataset": DATASET,
                                        "trials": 2000, "seed": 1}, claimed_epsilon=1.0)
    j = wait_job(client, ok["id"], timeout=60)
    assert j["status"] == "succeeded", j
    r = j["result"]
    assert j["verdict"] == "pass" and r["epsilon_claimed"] == pytest.approx(1.0) and r["epsilon"] <= 1.0
    assert set(r["estimates"]) == {"black-box", "white-box"} and r["trials_total"] == 2000
    assert r["attack"]["strategy"] == "inquiry" and r["attack"]["labels"][-2:] == ["Yes", "No"]
    b = wait_job(client, bad["id"], timeout=60)
    assert b["verdict"] == "violation" and b["result"]["epsilon"] > 1.0, b["result"]["estimates"]
    names = {a["name"] for a in client.get(f"/v1/audits/{ok['id']}/artifacts").json()["data"]}
    assert {"trials.csv", "estimates.csv", "roc.png", "histogram.png", "result.json"} <= names
    png = client.get(f"/v1/audits/{ok['id']}/artifacts/roc.png")
    assert png.status_code == 200 and png.content[:8] == b"\x89PNG\r\n\x1a\n"


def test_bootstrap_job_reports_convergence(client):
    job = submit(client, "canary_mia", {"target": {**SIM, "params": {**SIM["params"], "epsilon": 2.0}},
                                        "dataset": DATASET, "mode": "bootstrap", "n_llm": 4, "n_sample": 400_000,
                                        "threat_model": "white-box", "objective": "mu", "seed": 2,
                                        "power": {"alternatives": ["noise_quarter"]}})
    j = wait_job(client, job["id"], timeout=60)
    assert j["status"] == "succeeded", j
    wb = j["result"]["estimates"]["white-box"]
    assert abs(wb["epsilon_gdp"] - 2.0) <= 0.2 and wb["epsilon_lower"] <= 2.0 and j["verdict"] == "pass"
    assert j["result"]["model_calls"] == 8 and j["result"]["bootstrap"]["convergence"]
    names = {a["name"] for a in client.get(f"/v1/audits/{job['id']}/artifacts").json()["data"]}
    assert {"convergence.csv", "convergence.png", "histogram.png"} <= names


@pytest.mark.parametrize("config,param", [
    ({"query": "telepathy"}, "config.query"),
    ({"target": {**SIM, "bug": "sloppy"}}, "config.target.bug"),
    ({"target": {"type": "remote"}}, "config.target"),
    ({"trials": 1}, "config.trials"),
])
def test_bad_config_is_a_422_naming_the_field(client, config, param):
    r = client.post("/v1/audits", json={"kind": "canary_mia", "config": {"target": SIM, **config}})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["param"].startswith(param), r.json()
