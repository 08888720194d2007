"""Sequential mode and submit-time design checks of canary_mia through the jobs API (issue 28):
real HTTP, the in-process runner, SQLite and PostgreSQL, simulated voting targets."""

from __future__ import annotations

import pytest

from tests.conftest import running_app
from tests.jobs.conftest import job_settings, submit, wait_job

SIM = {"type": "simulated", "params": {"epsilon": 1.0, "delta": 1e-5, "partitions": 4}}
EXEMPLARS = [{"input": f"request number {i}", "output": ["weather", "music"][i % 2]} for i in range(8)]
DATASET = {"exemplars": EXEMPLARS, "labels": ["weather", "music"], "size": 8}
SEQ = {"dataset": DATASET, "query": "input_output", "mode": "sequential", "trials": "auto", "seed": 2}


@pytest.fixture(scope="module")
def client(database_url):
    with running_app(job_settings(database_url), timeout=30) as c:
        yield c


@pytest.mark.parametrize("bug,verdict", [(None, "pass"), ("noise_tenth", "violation")])
def test_sequential_verdict_with_trials_used_and_e_value(client, bug, verdict):
    target = {**SIM, "bug": bug} if bug else SIM
    job = submit(client, "canary_mia", {**SEQ, "target": target}, claimed_epsilon=1.0)
    j = wait_job(client, job["id"], timeout=120)
    assert j["status"] == "succeeded", j
    seq = j["result"]["sequential"]
    assert j["verdict"] == verdict == seq["verdict"], j["verdict_reason"]
    assert 0 < seq["trials"] == j["result"]["model_calls"] < 1000 and seq["cap"] == 10_000
    assert f"after {seq['trials']} trials" in j["verdict_reason"]
    e = seq["e_violation"] if verdict == "violation" else min(seq["e_alternatives"].values())
    assert e >= 1 / (1 - 0.95)


def test_sequential_cap_is_inconclusive(client):
    job = submit(client, "canary_mia", {**SEQ, "target": SIM, "trials": 4}, claimed_epsilon=1.0)
    j = wait_job(client, job["id"], timeout=60)
    assert j["verdict"] == "inconclusive" and "cap of 4 trials" in j["verdict_reason"], j


@pytest.mark.parametrize("config,param", [
    # white-box threshold split: 4 trials leave 2 counted, one hypothesis with probability 1/3
    ({"target": SIM, "trials": 4}, "config.trials"),
    ({"target": {"type": "remote", "url": "http://127.0.0.1:9", "params": {"partitions": 4,
                                                                          "shots_per_partition": 4}}},
     "config.target.params.partitions"),
    ({"target": SIM, "task": "synthesize", "mode": "sequential"}, "config.mode"),
    ({"target": {"mechanism": "ksa"}, "task": "generation", "mode": "sequential", "trials": "auto"},
     "config.target.mechanism"),
])
def test_config_that_cannot_run_is_a_422_at_submit(client, config, param):
    r = client.post("/v1/audits", json={"kind": "canary_mia", "config": {"dataset": DATASET, **config}})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["param"] == param, r.json()
    assert param.split(".")[-1] in r.json()["error"]["message"] or "trials" in r.json()["error"]["message"]


def test_black_box_few_trials_still_run(client):
    """Black-box counts every trial: 4 trials are a (weak) design, not a refusal."""
    r = client.post("/v1/audits", json={"kind": "canary_mia", "config": {
        "dataset": DATASET, "target": SIM, "trials": 4, "threat_model": "black-box"}})
    assert r.status_code == 202, r.text
