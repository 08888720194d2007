"""Sequential generation audits through the jobs API (issue 28 item 3): real HTTP, the in-process
runner, SQLite and PostgreSQL, the bundled SmolLM2 + MiniLM."""

from __future__ import annotations

import pytest

from tests.conftest import running_app
from tests.jobs.conftest import job_settings, submit, wait_job

ESA = {"type": "mechanism", "mechanism": "esa",
       "params": {"epsilon": 0.5, "delta": 1e-5, "partitions": 2, "shots_per_partition": 1, "candidates": 2}}
SEQ = {"task": "generation", "mode": "sequential", "target": ESA, "dataset": {"size": 4},
       "canary": {"type": "false_fact"}, "max_tokens": 6, "seed": 11}


@pytest.fixture(scope="module")
def client(database_url, lm, embedder):
    with running_app(job_settings(database_url), models={lm.name: lm, embedder.name: embedder}) as c:
        yield c


@pytest.mark.parametrize("threat_model", ["black-box", "both"])
def test_esa_sequential_job_reaches_a_verdict_with_trials_and_e_values(client, threat_model, database_url):
    """The real esa mechanism on the bundled models, claim 0.5, alternative non_private, cap 8: the
    job stops at a verdict (the e-value crossing 1/alpha), and the result carries the trials used,
    the e-values, the design model's laws and the note that they are assumed. Black-box no pass within
    the cap although the alternative's e-value crossed 1/alpha (~4e7 at the cap with this seed): a
    black-box pass waits for the design-model check's 35 pairs (without that wait this job passed at
    trial 10 with the cap at 16, measured); white-box (threat_model "both", the default) esa's reported noise (384 MiniLM
    coordinates per answer, noisy - clean mean) passes after one pair, every release the candidate
    nearest the noisy mean in the auditor's own MiniLM embedding."""
    if threat_model == "black-box" and not database_url.startswith("sqlite"):
        # 26 s of model calls: the sequential job's SQL on PostgreSQL is the "both" case's (same result
        # fields), and the black-box stopping rule does not depend on the database
        pytest.skip("the black-box case runs on SQLite; PostgreSQL runs the white-box ('both') case")
    # the one-unit probe off: this test is about the configured design's wait (the probe: the test below)
    job = submit(client, "canary_mia", {**SEQ, "trials": 8, "threat_model": threat_model, "probe": False,
                                        "power": {"alternatives": ["non_private"]}})
    j = wait_job(client, job["id"], timeout=900)
    assert j["status"] == "succeeded", j
    r = j["result"]
    seq = r["sequential"]
    print("esa sequential:", j["verdict"], seq["trials"], seq["e_violation"], seq["e_alternatives"],
          seq["y1_with"], seq["y1_without"], f"{seq['seconds']:.1f}s")
    assert r["mode"] == "sequential" and r["task"] == "generation"
    assert j["verdict"] == seq["verdict"] and j["verdict_reason"] == seq["reason"]
    assert 0 < seq["trials"] == r["model_calls"] == r["target_calls"] <= 8 and seq["cap"] == 8
    assert seq["claimed_epsilon"] == pytest.approx(0.5, rel=1e-6) and seq["vote_model"] == "assumed"
    assert set(seq["e_alternatives"]) == {"non_private"} and seq["laws"]["non_private"] == {"positive": [1.0, 0.0]}
    assert seq["e_violation"] > 0 and seq["history"][-1]["trials"] == seq["trials"]
    assert any("design model" in n for n in seq["notes"])
    if threat_model == "black-box":
        # A black-box pass rests on the design model: it waits for the pairs a test of the claimed law
        # needs (gen_sequential.DesignModelCheck), more than this cap of 4 pairs; the alternative itself is
        # rejected within the cap, so the wait is what withholds the pass
        assert j["verdict"] == "inconclusive", j["verdict_reason"]
        assert seq["e_alternatives"]["non_private"] >= 20, seq["e_alternatives"]
        assert any("a black-box pass waits for" in n or "design model refuted" in n for n in seq["notes"]), seq
        assert seq["white_box"] == {} and "noise" not in seq["e_components"]
        assert "design_model_check" in seq["e_components"]
    else:
        assert j["verdict"] == "pass", j["verdict_reason"]
        assert f"after {seq['trials']} trials" in j["verdict_reason"] and seq["e_alternatives"]["non_private"] >= 20
        wb = seq["white_box"]
        assert seq["decided_by"] == "white-box" and seq["trials"] == 2 == wb["answers_read"], seq
        assert "probe" not in seq["arms"]
        assert wb["impossible"] == [] and wb["e_violation"] < 1.0 and wb["e_alternatives"]["non_private"] >= 20


def test_black_box_esa_draws_the_one_unit_probe_first(client, database_url):
    """Black-box, esa on 2 partitions: the one-unit probe (app.audit.probe.gen_probe_target: partitions 1,
    every exemplar in its prompt, the same claim) draws its pairs first, then the configured design; its
    calls are counted, and white-box (the test above, 'both') draws no probe: the noise decides there."""
    if not database_url.startswith("sqlite"):
        pytest.skip("model calls: the wiring does not depend on the database (SQLite runs it)")
    job = submit(client, "canary_mia", {**SEQ, "trials": 12, "threat_model": "black-box",
                                        "power": {"alternatives": ["non_private"]}})
    j = wait_job(client, job["id"], timeout=900)
    assert j["status"] == "succeeded", j
    r = j["result"]
    seq = r["sequential"]
    probe, design = seq["arms"]["probe"], seq["arms"]["design"]
    assert probe["units"] == 1 and probe["trials"] >= 2 * 4 or j["verdict"] == "violation", seq["arms"]
    assert probe["trials"] + design["trials"] == seq["trials"] == r["model_calls"] == r["target_calls"] <= 12
    assert any("one-unit probe drew" in n for n in seq["notes"]), seq["notes"]


@pytest.mark.parametrize("config,param", [
    ({"query": "repeat"}, "config.query"),
    ({"target": {**ESA, "mechanism": "zero_shot", "params": {}}, "trials": "auto"}, "config.target.mechanism"),
    ({"target": {**ESA, "defence": "L3"}, "trials": "auto"}, "config.target.defence"),
    ({"target": {**ESA, "params": {**ESA["params"], "epsilon": "x"}}}, "config.target.params.epsilon"),
    ({"target": {"type": "simulated"}}, "config.target.type"),
])
def test_sequential_generation_config_that_cannot_run_is_a_422(client, config, param):
    r = client.post("/v1/audits", json={"kind": "canary_mia", "config": {**SEQ, "trials": "auto", **config}})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["param"] == param, r.json()


def test_ksa_sequential_has_its_design_model(client):
    """ksa's release law (app.audit.gen_power_ksa) is a design model: trials 'auto' is accepted, and
    a cap of one pair ends inconclusive with the alternatives' e-values (not 'no power model'), their
    threshold the config's power.min_detection's (0.95: 20)."""
    r = client.post("/v1/audits", json={"kind": "canary_mia", "config": {
        **SEQ, "target": {**ESA, "mechanism": "ksa", "params": {"epsilon": 1.0, "partitions": 4}}, "trials": 2,
        "power": {"min_detection": 0.95}}})
    assert r.status_code == 202, r.text
    j = wait_job(client, r.json()["id"], timeout=900)
    assert j["status"] == "succeeded" and j["verdict"] == "inconclusive", j
    seq = j["result"]["sequential"]
    assert "cap of 2 trials" in j["verdict_reason"] and seq["vote_model"] == "assumed", j["verdict_reason"]
    assert seq["design"]["mechanism"] == "ksa" and "power_unknown" not in j["result"]
    assert seq["pass_level"] == pytest.approx(0.05) and "not rejected (at 20)" in j["verdict_reason"]  # min_detection
    from app.jobs.kinds import canary_gen_seq
    from app.jobs.kinds.canary_mia import CanaryMIAConfig

    canary_gen_seq.check(CanaryMIAConfig.model_validate({  # trials 'auto' passes the submit-time check
        **SEQ, "target": {**ESA, "mechanism": "ksa", "params": {"epsilon": 1.0, "partitions": 4}}, "trials": "auto"}))


@pytest.mark.parametrize("white_box", [False, True])
def test_remote_gateway_sequential_generation(live_server, embedder, white_box):
    """The same test against a remote dpicl gateway (``RemoteGenerationTarget``: C1 and C0 registered
    once each, one private generate per trial): the cap is honoured, every trial is one gateway
    call, and the design is computed from the target's params as for an in-process target. White-box
    (the 'internals' scope) the gateway's clean and noisy mean come back through JSON and its release
    is the nearest candidate in the auditor's embedding: a pass after one pair on the noise."""
    import numpy as np

    from app.audit import Canary
    from app.audit.gen_power import generation_design, signal_distance
    from app.audit.gen_queries import resolve_generation_query
    from app.audit.gen_sequential import run_gen_sequential
    from app.audit.gen_targets import RemoteGenerationTarget

    ex = [(f"dialogue {i} about the weather", f"summary {i}") for i in range(4)]
    canary = "zq7 the lighthouse keeper owns eleven violet kites"
    attack = resolve_generation_query("signal_text", Canary("false_fact", canary, canary))
    remote = RemoteGenerationTarget(live_server, embedder, "esa", dict(ESA["params"]), max_tokens=4, seeded=True,
                                    white_box=white_box)
    d = generation_design("esa", remote.params, len(ex), max_tokens=4, white_box=False,
                          distance=signal_distance(embedder, *attack.labels[:2]))
    try:
        r = run_gen_sequential(remote, ex, attack, claimed_epsilon=0.5, delta=1e-5, design=d,
                               alternatives=["non_private"], alpha=0.05, cap=4, rng=np.random.default_rng(3),
                               white_box=white_box)
    finally:
        remote.close()
    assert r.trials == remote.calls and len(remote.datasets) == 2
    if white_box:
        assert (r.verdict, r.decided_by, r.trials) == ("pass", "white-box", 2), r.reason
        assert r.white_box["answers_read"] == 2 and r.white_box["impossible"] == []
    else:
        assert r.trials == 4 and r.verdict in ("pass", "inconclusive")
    assert r.laws["non_private"] == {"positive": [1.0, 0.0]} and r.vote_model == "assumed"


def test_clip_softmax_sequential_job_reads_the_token_steps_in_process(client):
    """The real clip_softmax on the bundled SmolLM2 (2 prompts x 1 shot, public top-20, 6 tokens, claim
    epsilon 2), alternatives noise_tenth + no_noise, threat_model "both": the audit reads each private
    step's clean statistic through the in-process collector (``app.mechanisms.step_trace``) and passes
    on it within a few trials (a greedy release would need every step at its argmax; the claimed
    temperature's steps are not); nothing of the statistic reaches the stored result."""
    import json

    target = {"type": "mechanism", "mechanism": "clip_softmax",
              "params": {"epsilon": 2.0, "delta": 1e-5, "prompts": 2, "shots_per_prompt": 1}}
    job = submit(client, "canary_mia", {**SEQ, "target": target, "trials": 40, "threat_model": "both",
                                        "power": {"alternatives": ["noise_tenth", "no_noise"]}})
    j = wait_job(client, job["id"], timeout=900)
    assert j["status"] == "succeeded", j
    seq = j["result"]["sequential"]
    wb = seq["white_box"]
    print("clip_softmax sequential:", j["verdict"], seq["trials"], seq["e_alternatives"], wb, f"{seq['seconds']:.1f}s")
    assert wb["noise"] == "gumbel" and wb["answers_read"] == seq["trials"] and wb["impossible"] == []
    assert set(wb["e_alternatives"]) == {"noise_tenth", "no_noise"} and wb["e_alternatives"]["no_noise"] >= 20
    assert j["verdict"] == "pass" and "white-box" in seq["decided_by"] and seq["trials"] <= 10, j["verdict_reason"]
    assert "statistic" not in json.dumps(j["result"]) and "token_steps" not in json.dumps(j["result"])


def test_mozo_sequential_job_reads_the_token_steps_in_process(client):
    """The real mozo on the bundled SmolLM2 (2 experts x 1 shot, temperature 0.5, not the default;
    public top-10 + EOS, 6 tokens, claim epsilon 2), alternatives noise_tenth + no_noise, threat_model
    "both": the audit reads each private step's statistic (the mean mixed log-probability) through the
    in-process collector at mozo's own temperature and passes on it within a few trials; nothing of the
    statistic reaches the stored result."""
    import json

    target = {"type": "mechanism", "mechanism": "mozo",
              "params": {"epsilon": 2.0, "delta": 1e-5, "experts": 2, "group_size": 1, "temperature": 0.5}}
    job = submit(client, "canary_mia", {**SEQ, "target": target, "trials": 40, "threat_model": "both",
                                        "power": {"alternatives": ["noise_tenth", "no_noise"]}})
    j = wait_job(client, job["id"], timeout=900)
    assert j["status"] == "succeeded", j
    seq = j["result"]["sequential"]
    wb = seq["white_box"]
    print("mozo sequential:", j["verdict"], seq["trials"], seq["e_alternatives"], wb, f"{seq['seconds']:.1f}s")
    assert wb["noise"] == "gumbel" and wb["temperature"] == 0.5 and wb["answers_read"] == seq["trials"]
    assert wb["impossible"] == [] and set(wb["e_alternatives"]) == {"noise_tenth", "no_noise"}
    assert j["verdict"] == "pass" and "white-box" in seq["decided_by"] and seq["trials"] <= 10, j["verdict_reason"]
    assert "statistic" not in json.dumps(j["result"]) and "token_steps" not in json.dumps(j["result"])
