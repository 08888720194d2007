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


def test_plan_covers_esa_generation_audits(client, embedder):
    """POST /v1/audits/plan answers 200 for an esa target: designs with trials and the detection of
    the generation alternatives, the signal distance measured by the served MiniLM, and the
    configured design's prediction equal to gen_design_power for it (one power model)."""
    from app.audit.gen_power import DEFAULT_GEN_REQUIRED, embedding_dims, gen_design_power, generation_design

    cfg = {"task": "generation", "target": ESA, "dataset": {"size": 4}, "max_tokens": 8}
    r = client.post("/v1/audits/plan", json={"kind": "canary_mia", "config": cfg})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["mechanism"] == "esa" and out["alternatives"] == list(DEFAULT_GEN_REQUIRED)
    assert 0.0 < out["signal_distance"] < 2.0
    c = out["configured"]
    assert c["threat_model"] == "white-box" and set(c["detection"]) == set(DEFAULT_GEN_REQUIRED)
    dims = embedding_dims(embedder, "x")  # the white-box run tests trials x dims noise draws (MiniLM: 384)
    d = generation_design("esa", ESA["params"], 4, max_tokens=8, white_box=True, distance=out["signal_distance"],
                          noise_dims=dims)
    n = c["trials"] or 20_000
    rep = gen_design_power(d, trials=n, claimed_epsilon=out["claimed_epsilon"], confidence=0.95,
                           threat_models=("black-box", "white-box"), delta=out["delta"], required=DEFAULT_GEN_REQUIRED)
    assert {k: rep.alternatives[k].detection for k in DEFAULT_GEN_REQUIRED} == c["detection"]
    rec = out["recommended"]
    assert rec is None or (rec["trials"] and all(v >= 0.9 for v in rec["detection"].values()))
    # the black-box floor: no level-0.05 test says violation in fewer pairs (tests/audit/test_black_box_floor.py)
    from app.audit.eprocess import fewest_pairs_to_refute

    floor = fewest_pairs_to_refute(out["claimed_epsilon"], out["delta"], 0.05)
    assert out["black_box_floor"] == {"pairs": floor, "trials": 2 * floor}
    assert any(f"at least {2 * floor} trials" in n for n in out["notes"]), out["notes"]
    # a mechanism without a privacy claim has no design model: a 422 that says so, naming the field
    bad = client.post("/v1/audits/plan", json={"kind": "canary_mia",
                                               "config": {**cfg, "target": {**ESA, "mechanism": "zero_shot"}}})
    assert bad.status_code == 422 and bad.json()["error"]["param"] == "config.target.mechanism", bad.text
    assert "zero_shot" in bad.json()["error"]["message"]


KSA = {"type": "mechanism", "mechanism": "ksa",
       "params": {"epsilon": 2.0, "delta": 1e-5, "partitions": 4, "shots_per_partition": 1}}


def test_plan_covers_ksa_generation_audits(client):
    """POST /v1/audits/plan answers 200 for a ksa target (app.audit.gen_power_ksa): 4 partitions
    see no_noise and non_private with the planned trials, the prediction equal to gen_design_power
    for the same design; the default alternatives have no common design at claim 2, and the plan
    names one per alternative."""
    from app.audit.gen_power import gen_design_power, generation_design
    from app.audit.gen_queries import DEFAULT_SIGNALS

    req = ["no_noise", "non_private"]
    cfg = {"task": "generation", "target": KSA, "dataset": {"size": 4}, "max_tokens": 8, "threat_model": "black-box",
           "power": {"alternatives": req}}
    r = client.post("/v1/audits/plan", json={"kind": "canary_mia", "config": cfg})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["mechanism"] == "ksa" and out["alternatives"] == req and out["signal_distance"] is None
    c = out["configured"]
    assert c["threat_model"] == "black-box" and c["partitions"] == 4 and c["trials"]
    assert c["model_calls"] == c["trials"] * 5  # 4 partitions + the zero-shot prompt per answer
    d = generation_design("ksa", KSA["params"], 4, max_tokens=8, white_box=False, distance=None,
                          signals=DEFAULT_SIGNALS)
    rep = gen_design_power(d, trials=c["trials"], claimed_epsilon=out["claimed_epsilon"], confidence=0.95,
                           threat_models=("black-box",), delta=out["delta"], required=req)
    assert {k: rep.alternatives[k].detection for k in req} == c["detection"] and rep.sufficient
    assert any("keyword" in n for n in out["notes"])
    full = client.post("/v1/audits/plan", json={"kind": "canary_mia",
                                                "config": {**cfg, "power": {"alternatives": ["noise_tenth",
                                                                                             "no_noise"]}}})
    assert full.status_code == 200, full.text
    f = full.json()
    assert f["recommended"] is None and set(f["each_alternative_alone"]) == {"noise_tenth", "no_noise"}
    assert any("each alone (one audit each): noise_tenth" in n for n in f["notes"])


def test_esa_direct_audit_reaches_a_verdict_with_its_power(client):
    """A small direct esa audit on the real models (black-box, 4 trials): the verdict is not 'power
    unknown' any more; with too few trials it is inconclusive and names a trial count that can."""
    job = submit(client, "canary_mia", {"task": "generation", "target": ESA, "dataset": {"size": 4},
                                        "canary": {"type": "false_fact"}, "threat_model": "black-box",
                                        "trials": 4, "max_tokens": 6, "seed": 5,
                                        "power": {"alternatives": ["non_private"]}})
    j = wait_job(client, job["id"], timeout=900)
    assert j["status"] == "succeeded", j
    r = j["result"]
    assert r["power"] is not None and r["power"]["vote_model"] == "assumed"
    assert r["power"]["alternatives"]["non_private"]["tpr"] == 1.0
    assert j["verdict"] == "inconclusive", r["verdict_reason"]
    assert "power is unknown" not in r["verdict_reason"]
    assert "this design reaches the power with" in r["verdict_reason"], r["verdict_reason"]


def test_esa_audit_with_planned_trials_passes(client, database_url):
    """trials 'auto' for a white-box generation audit: the worker plans with its embedder (the same
    design the verdict's power uses), runs the planned count against the correct esa mechanism on the
    bundled models (claim 0.5, alternative non_private: the noise test sees it, so the white-box
    split's minimum of 14 trials sets the plan) and ends pass on the noise it observed; the design
    model is not what the pass rests on (no model check)."""
    if not database_url.startswith("sqlite"):
        # 45 s of model calls on the 2-core machine; the generation job's SQL on PostgreSQL (result, power,
        # verdict) is test_esa_direct_audit_reaches_a_verdict_with_its_power[postgres]'s, and the plan's
        # count does not depend on the database
        pytest.skip("the 14-trial planned esa audit runs once, on SQLite (PostgreSQL: the direct audit test)")
    target = {**ESA, "params": {**ESA["params"], "epsilon": 0.5}}
    job = submit(client, "canary_mia", {"task": "generation", "target": target, "dataset": {"size": 4},
                                        "canary": {"type": "false_fact"}, "threat_model": "white-box",
                                        "trials": "auto", "max_tokens": 6, "seed": 11,
                                        "power": {"alternatives": ["non_private"]}})
    j = wait_job(client, job["id"], timeout=900)
    assert j["status"] == "succeeded", j
    r = j["result"]
    assert r["plan"]["configured"]["trials"] == r["trials_total"] == r["target_calls"] == 14
    assert r["power"]["sufficient"] and r["power"]["alternatives"]["non_private"]["detection_conformance"] == 1.0
    assert "model_check" not in r["power"]["design"] and r["conformance"]["conformant"]
    assert j["verdict"] == "pass", r["verdict_reason"]


def test_ksa_audit_with_planned_trials_checks_the_design_model(client, database_url):
    """A ksa audit through the jobs API on the bundled models: trials 'auto' plans the design on the
    worker (claim 0.5, alternative non_private), with the pairs the design-model check needs, and the
    verdict's power is the plan's (app.audit.gen_power_ksa). The black-box pass rests on that model,
    and SmolLM2 behind ksa does not follow it (the release does not track the canary as the claimed
    law says), so the verdict is inconclusive and says why -- not the pass the model would predict."""
    # one partition: 2 prompts per trial (the partition's and the zero-shot one), where 4 take 5; the plan's
    # count is the check's pairs either way (68 trials)
    target = {**KSA, "params": {**KSA["params"], "epsilon": 0.5, "partitions": 1}}
    config = {"task": "generation", "target": target, "dataset": {"size": 4}, "canary": {"type": "false_fact"},
              "threat_model": "black-box", "trials": "auto", "max_tokens": 6, "seed": 13,
              "power": {"alternatives": ["non_private"]}}
    if not database_url.startswith("sqlite"):
        # The same job's SQL (result, power report, verdict) on PostgreSQL with 6 trials: too few for the
        # check, which the verdict says; the shared 2-core machine runs the planned count once, on SQLite.
        j = wait_job(client, submit(client, "canary_mia", {**config, "trials": 6})["id"], timeout=900)
        assert j["status"] == "succeeded", j
        r = j["result"]
        assert r["trials_total"] == 6 and j["verdict"] == "inconclusive"
        assert "rests on the design model" in r["verdict_reason"], r["verdict_reason"]
        return
    job = submit(client, "canary_mia", config)
    j = wait_job(client, job["id"], timeout=900)
    assert j["status"] == "succeeded", j
    r = j["result"]
    n = r["plan"]["configured"]["trials"]
    assert n == r["trials_total"] == r["target_calls"] and r["plan"]["mechanism"] == "ksa"
    assert "keyword" in r["power"]["vote_model_note"]
    assert r["power"]["alternatives"]["non_private"]["detection"] == r["plan"]["configured"]["detection"]["non_private"]
    mc = r["power"]["design"]["model_check"]
    assert n // 2 >= mc["pairs_needed"] == r["power"]["design"]["model_check_pairs_needed"] and mc["enough"]
    assert not mc["fits"] and not r["power"]["sufficient"], mc
    assert j["verdict"] == "inconclusive", r["verdict_reason"]
    assert "does not follow the design model" in r["verdict_reason"]
