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
    if verdict == "violation":  # at 1/alpha (confidence 0.95)
        assert seq["e_violation"] >= 1 / (1 - 0.95)
    else:  # each null a pass needs rejected once, when it first crossed 1/(1 - power.min_detection) (sticky)
        assert {n.split(":")[0] for n in seq["rejected"]} >= set(seq["e_alternatives"]), seq["rejected"]
        assert all(r["e"] >= 1 / (1 - 0.9) and r["trials"] <= seq["trials"] for r in seq["rejected"].values())
    assert seq["pass_level"] == pytest.approx(0.1) and seq["alpha"] == pytest.approx(0.05)


def test_the_pass_level_is_the_configs_min_detection(client):
    """config.power.min_detection 0.95 reaches the sequential test: the pass rejects each alternative
    at 1/(1 - 0.95) = 20 and says so; the result reports pass_level 0.05."""
    job = submit(client, "canary_mia", {**SEQ, "target": SIM, "power": {"min_detection": 0.95}}, claimed_epsilon=1.0)
    j = wait_job(client, job["id"], timeout=120)
    seq = j["result"]["sequential"]
    assert j["verdict"] == "pass" and seq["pass_level"] == pytest.approx(0.05), j
    assert "1/(1 - min_detection) = 20" in j["verdict_reason"]
    assert seq["rejected"] and all(r["e"] >= 20 for r in seq["rejected"].values()), seq["rejected"]


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
    # zero_shot claims nothing: no design model, so a sequential audit of it could never pass
    ({"target": {"mechanism": "zero_shot"}, "task": "generation", "mode": "sequential", "trials": "auto"},
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


GW_EXEMPLARS = [{"input": f"play some music number {i}", "output": "music"} for i in range(12)]


def _gw_config(url: str, probe: bool) -> dict:
    return {"target": {"type": "remote", "url": url, "mechanism": "rnm",
                       "params": {"epsilon": 1.0, "delta": 1e-5, "partitions": 5, "shots_per_partition": 2}},
            "dataset": {"exemplars": GW_EXEMPLARS, "labels": ["weather", "music"], "size": 12},
            "canary": {"type": "hex", "label": "weather"}, "query": "input_output", "mode": "sequential",
            "trials": "auto", "probe": probe, "seed": 5,
            "power": {"alternatives": ["noise_quarter", "no_noise"]}}


@pytest.mark.parametrize("mode,verdict", [("no_noise", "violation"), ("correct", "pass")])
def test_black_box_gateway_probe_first_then_the_design(client, mode, verdict):
    """An independent HTTP gateway (tests/audit/standalone_gateway.py), black-box, 5 partitions x 2
    shots, claim 1: the one-partition probe runs first (one prompt per trial). A gateway without
    noise is a violation within the probe's first pairs (under 40 prompts where the planner's fixed
    design uses 150); a correct one passes on the configured design after the probe gives up."""
    from tests.audit.standalone_gateway import StandaloneGateway

    with StandaloneGateway(mode, seed=3) as gw:
        job = submit(client, "canary_mia", _gw_config(gw.url, True), claimed_epsilon=1.0)
        j = wait_job(client, job["id"], timeout=240)
    assert j["status"] == "succeeded", j
    seq = j["result"]["sequential"]
    assert j["verdict"] == verdict == seq["verdict"], j["verdict_reason"]
    arms = seq["arms"]
    assert arms["probe"]["partitions"] == 1 and arms["probe"]["trials"] >= 2 and arms["design"]["partitions"] == 5
    assert seq["prompts"] == arms["probe"]["trials"] + 5 * arms["design"]["trials"]
    assert any("one-partition probe" in n for n in seq["notes"])
    if verdict == "violation":
        assert seq["prompts"] < 40 and arms["design"]["trials"] == 0, seq
    else:
        assert arms["probe"]["trials"] <= 16 and arms["design"]["trials"] > 0


def test_a_label_mapping_bug_behind_no_noise_is_a_violation_not_a_pass(client):
    """The gateway releases the label that lost, without noise: beyond the claim, so every
    directional alternative bet rejects its alternative; the pass waits for every label shown
    released above 0.25 x the floor, which never comes, and the floor test finds the violation
    (this passed after 6 trials before: docs/audit.md, "A release beyond the claim")."""
    from tests.audit.standalone_gateway import StandaloneGateway

    with StandaloneGateway("swapped_no_noise", seed=3) as gw:
        job = submit(client, "canary_mia", _gw_config(gw.url, False), claimed_epsilon=1.0)
        j = wait_job(client, job["id"], timeout=240)
    assert j["status"] == "succeeded", j
    seq = j["result"]["sequential"]
    assert j["verdict"] == "violation", j["verdict_reason"]
    assert "release_floor" in j["verdict_reason"] and seq["arms"]["design"]["e_spread"] <= 1.0, seq


def test_a_non_private_gateway_is_a_violation_not_a_pass(client):
    """Plain ICL over every exemplar without noise behind the gateway (the copier answers the canary's
    label whenever it is in the set), the configured 5 partitions without the probe: beyond the claim
    on the canary's side, so every alternative's bet rejects it; it passed before the leak bound
    (docs/audit.md, "A release beyond the claim") and is now a violation."""
    from tests.audit.standalone_gateway import StandaloneGateway

    with StandaloneGateway("non_private", seed=3) as gw:
        job = submit(client, "canary_mia", _gw_config(gw.url, False), claimed_epsilon=1.0)
        j = wait_job(client, job["id"], timeout=240)
    assert j["status"] == "succeeded", j
    assert j["verdict"] == "violation", j["verdict_reason"]
    assert j["result"]["sequential"]["arms"]["design"]["both_right_rate"] == 1.0


def test_probe_off_runs_the_configured_design_alone(client):
    from tests.audit.standalone_gateway import StandaloneGateway

    with StandaloneGateway("no_noise", seed=3) as gw:
        job = submit(client, "canary_mia", _gw_config(gw.url, False), claimed_epsilon=1.0)
        j = wait_job(client, job["id"], timeout=240)
    seq = j["result"]["sequential"]
    assert j["verdict"] == "violation" and list(seq["arms"]) == ["design"], j


@pytest.mark.parametrize("mode,verdict", [("winner_only", "violation"), ("correct", "pass")])
def test_a_decoy_label_makes_winner_only_noise_a_black_box_violation(client, mode, verdict):
    """`dataset.decoy_labels: 1` through the jobs API against the independent gateway (black-box, 3 x 4
    shots, claim 2, winner_only required): the gateway registers the decoy with the labels, winner-only
    noise never releases it and the release floor finds that; a correct gateway passes, and its result
    says what the decoy assumes."""
    from tests.audit.standalone_gateway import StandaloneGateway

    cfg = _gw_config("", False)
    cfg["target"]["params"] = {"epsilon": 2.0, "delta": 1e-5, "partitions": 3, "shots_per_partition": 4}
    cfg["dataset"] = {**cfg["dataset"], "decoy_labels": 1}
    cfg["power"] = {"alternatives": ["noise_quarter", "no_noise", "winner_only"]}
    with StandaloneGateway(mode, seed=3) as gw:
        cfg["target"]["url"] = gw.url
        job = submit(client, "canary_mia", cfg, claimed_epsilon=2.0)
        j = wait_job(client, job["id"], timeout=240)
    assert j["status"] == "succeeded", j
    seq = j["result"]["sequential"]
    assert j["verdict"] == verdict == seq["verdict"], j["verdict_reason"]
    assert len(j["result"]["attack"]["labels"]) == 3
    if verdict == "violation":
        assert "release_floor" in seq["reason"]
    else:
        assert "winner_only by trial" in seq["reason"]
        assert any("decoy label" in n for n in seq["notes"])
