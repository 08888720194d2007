"""Verdicts a CI gate can trust, against an independent gateway over HTTP (issue 14).

``standalone_gateway`` imports nothing from ``app``: an ideal-copier model behind Gaussian
report-noisy-max, correct or broken (sigma/4, winner-only noise, no noise). Every audit goes
through a real dpicl server and its job runner, on SQLite and PostgreSQL. Seeds are fixed (the
auditor's and the gateway's), and the designs are planned for P(detect) >= 0.99, so a seed that
misses a detection is a 1-in-100 event, not a tuned one.
"""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from tests.audit.standalone_gateway import StandaloneGateway
from tests.conftest import running_app
from tests.jobs.conftest import fast_env, job_settings, submit, wait_job

ROOT = Path(__file__).resolve().parents[2]
EXEMPLARS = [{"input": f"play some music number {i}", "output": "music"} for i in range(9)]
DATASET = {"exemplars": EXEMPLARS, "labels": ["weather", "music"], "size": 9}
CANARY = {"type": "hex", "label": "weather"}


def _config(url: str, *, partitions: int, epsilon: float, white_box: bool = False, **kw) -> dict:
    return {"target": {"type": "remote", "url": url, "mechanism": "rnm", "white_box": white_box,
                       "params": {"epsilon": epsilon, "delta": 1e-5, "partitions": partitions,
                                  "shots_per_partition": 9 // partitions}},
            "dataset": DATASET, "canary": CANARY, "query": "input_output", "insertion": "paired",
            "threat_model": "white-box" if white_box else "black-box", "seed": 7, **kw}


@pytest.fixture(scope="module")
def client(database_url):
    with running_app(job_settings(database_url), timeout=60) as c:
        yield c


def _run(client, cfg, claim, timeout=240):
    job = submit(client, "canary_mia", cfg, claimed_epsilon=claim)
    j = wait_job(client, job["id"], timeout=timeout)
    assert j["status"] == "succeeded", j
    return j


def test_black_box_planned_design_passes_correct_and_catches_sigma_quarter(client):
    """trials 'auto' (the planner: 3 partitions, P(detect sigma/4) >= 0.99 at claim 2, black-box:
    the bound and the release floor)."""
    power = {"alternatives": ["noise_quarter"], "min_detection": 0.99}
    out = {}
    for mode in ("correct", "sigma_quarter", "winner_only"):
        with StandaloneGateway(mode, seed=11) as gw:
            out[mode] = _run(client, _config(gw.url, partitions=3, epsilon=2.0, trials="auto", power=power), 2.0)
    ok, bad = out["correct"], out["sigma_quarter"]
    plan = ok["result"]["plan"]["configured"]
    assert plan["trials"] == ok["result"]["trials_total"] > 50
    assert ok["verdict"] == "pass", ok["verdict_reason"]
    p = ok["result"]["power"]
    assert p["vote_model"] == "assumed" and p["alternatives"]["noise_quarter"]["detection"] >= 0.99
    # One power model: the campaign ran the labels the plan counted (the default decoy among them: before,
    # a direct campaign dropped the decoys and reported 0.809 where the plan promised 0.999)
    assert ok["config"]["dataset"]["decoy_labels"] == 1 and plan["labels"] == p["design"]["labels"] == 3
    assert p["alternatives"]["noise_quarter"]["detection"] == pytest.approx(plan["detection"]["noise_quarter"])
    assert ok["result"]["attack"]["labels"] == ["weather", "music", "weather (decoy 1)"]
    # winner-only noise never releases the decoy, which the claimed noise releases at >= its floor
    wo = out["winner_only"]
    assert wo["verdict"] == "violation", wo["verdict_reason"]
    assert wo["result"]["release_floor"]["counts"][2] == 0 < ok["result"]["release_floor"]["counts"][2]
    assert bad["verdict"] == "violation", bad["verdict_reason"]
    # sigma/4 releases the canary label ~4% of the time where any correct noise gives >= 22.6%
    assert bad["result"]["release_floor"]["conformant"] is False and ok["result"]["release_floor"]["conformant"]


def test_black_box_no_noise_is_caught_by_the_release_floor(client):
    """The issue's trap: 3 partitions and one canary, a noise-free argmax never changes and the
    bound is 0. The release floor sees it from the released labels alone: any correct noise
    releases each label with probability >= Phi(-3 / (sigma sqrt 2)) = 0.226 at epsilon 2."""
    with StandaloneGateway("no_noise", seed=3) as gw:
        j = _run(client, _config(gw.url, partitions=3, epsilon=2.0, trials=400), 2.0)
    assert j["result"]["epsilon"] == 0.0
    assert j["verdict"] == "violation", j["verdict_reason"]
    assert "too deterministic for the claimed noise" in j["verdict_reason"]
    assert j["result"]["power"]["design"]["release_changes_without_noise"] is False
    assert j["result"]["release_floor"]["counts"][0] == 0


def test_black_box_design_blind_to_no_noise_is_inconclusive(client):
    """Too few trials for the release floor to see a missing noise (and the bound never can at
    3 partitions): inconclusive, with the reason, never pass."""
    with StandaloneGateway("correct", seed=3) as gw:
        j = _run(client, _config(gw.url, partitions=3, epsilon=2.0, trials=6,
                                 power={"alternatives": ["no_noise"]}), 2.0)
    assert j["verdict"] == "inconclusive", j["verdict_reason"]
    assert "no noise" in j["verdict_reason"] and "3 partitions" in j["verdict_reason"]


def test_the_readme_ci_audit_keeps_the_plans_promise_on_a_pool_of_five_labels(client, database_url):
    """README.md's CI audit as pasted (the bundled 5-label pool, size 12, trials auto for P(detect sigma/4)
    >= 0.9), claim 2. With a random context the partitions' votes split over the labels and sigma/4
    passed 13 of 20 audits (5 with the decoy alone: benchmarks/results/issue28/default_decoy_random_context.json);
    the defaults now draw a one-label context and add a decoy, and the plan's promise holds: 6 seeds, each
    a violation against sigma/4 and winner-only, a pass against the correct gateway."""
    if not database_url.startswith("sqlite"):
        pytest.skip("no database-specific step: the verdicts over HTTP run on PostgreSQL in the tests above")
    verdicts: dict[str, list[str]] = {"correct": [], "sigma_quarter": [], "winner_only": []}
    for seed in range(1, 7):
        for mode in verdicts:
            with StandaloneGateway(mode, seed=100 + seed) as gw:
                cfg = {"target": {"type": "remote", "url": gw.url, "mechanism": "rnm",
                                  "params": {"epsilon": 2, "delta": 1e-5, "partitions": 3, "shots_per_partition": 4}},
                       "dataset": {"size": 12}, "canary": {"type": "hex"}, "query": "input_output",
                       "threat_model": "black-box", "trials": "auto", "power": {"alternatives": ["noise_quarter"]},
                       "seed": seed}
                j = _run(client, cfg, 2.0)
            assert j["result"]["context"]["pick"] == "one_label" and j["config"]["dataset"]["decoy_labels"] == 1
            verdicts[mode].append(j["verdict"])
    assert verdicts == {"correct": ["pass"] * 6, "sigma_quarter": ["violation"] * 6, "winner_only": ["violation"] * 6}


def test_too_few_trials_are_inconclusive_not_pass(client):
    with StandaloneGateway("correct", seed=4) as gw:
        j = _run(client, _config(gw.url, partitions=1, epsilon=2.0, trials=40,
                                 power={"alternatives": ["no_noise"]}), 2.0)
    assert j["verdict"] == "inconclusive" and "can never be refuted" in j["verdict_reason"], j["verdict_reason"]
    assert j["result"]["power"]["ceiling_epsilon"] < 2.0


@pytest.mark.parametrize("mode,verdict", [("correct", "pass"), ("sigma_quarter", "violation"),
                                          ("winner_only", "violation"), ("no_noise", "violation")])
def test_white_box_direct_conformance(client, mode, verdict):
    with StandaloneGateway(mode, seed=5) as gw:
        j = _run(client, _config(gw.url, partitions=3, epsilon=1.0, white_box=True, trials=40), 1.0)
    assert j["verdict"] == verdict, j["verdict_reason"]
    c = j["result"]["conformance"]
    assert c["conformant"] is (mode == "correct")
    if mode != "correct":
        assert j["verdict_reason"].startswith("implementation does not match its claim")


@pytest.mark.parametrize("mode", ["correct", "sigma_quarter", "winner_only", "no_noise"])
def test_remote_bootstrap_observes_the_gateways_own_noise(client, mode):
    with StandaloneGateway(mode, seed=6) as gw:
        cfg = _config(gw.url, partitions=3, epsilon=1.0, white_box=True, mode="bootstrap", n_llm=8,
                      n_sample=20_000)
        j = _run(client, cfg, 1.0)
    c = j["result"]["conformance"]
    assert c["calls"] == 16 and c["conformant"] is (mode == "correct")
    assert j["verdict"] == ("pass" if mode == "correct" else "violation"), j["verdict_reason"]


def test_remote_bootstrap_without_internals_is_refused(client):
    cfg = _config("http://127.0.0.1:9", partitions=3, epsilon=1.0, mode="bootstrap")
    r = client.post("/v1/audits", json={"kind": "canary_mia", "config": cfg})
    assert r.status_code == 422 and r.json()["error"]["param"] == "config.mode", r.text
    assert "never observes the gateway's own noise" in r.json()["error"]["message"]


def test_plan_endpoint(client):
    cfg = _config("http://127.0.0.1:9", partitions=4, epsilon=1.0, power={"alternatives": ["noise_quarter"]})
    r = client.post("/v1/audits/plan", json={"config": cfg, "claimed_epsilon": 1.0, "seconds_per_trial": 0.01})
    assert r.status_code == 200, r.text
    plan = r.json()
    by = {(d["threat_model"], d["partitions"]): d for d in plan["designs"]}
    # The default decoy (dataset.decoy_labels "auto": black-box rnm): one partition sees sigma/4 through the
    # decoy's floor (the claimed noise releases it; sigma/4 almost never does)
    assert by[("black-box", 1)]["labels"] == 3 and by[("black-box", 1)]["trials"] is not None
    assert any("1 decoy label(s)" in n for n in plan["notes"]), plan["notes"]
    assert any("dataset.pick" in n for n in plan["notes"]), plan["notes"]
    two = client.post("/v1/audits/plan", json={"config": {**cfg, "dataset": {**DATASET, "decoy_labels": 0}},
                                               "claimed_epsilon": 1.0}).json()
    by2 = {(d["threat_model"], d["partitions"]): d for d in two["designs"]}
    assert by2[("black-box", 1)]["labels"] == 2 and not any("decoy label(s)" in n for n in two["notes"])
    assert by2[("black-box", 1)]["trials"] is None  # two labels, sigma/4 at 1 partition: log-odds 0.87 < 1, never
    # sigma/4 releases the canary label ~8% of the time; any correct noise >= 29.6% (the release floor)
    assert 10 < by[("black-box", 4)]["trials"] < 500 and by[("black-box", 4)]["detection"]["noise_quarter"] >= 0.9
    assert by[("black-box", 4)]["seconds"] == pytest.approx(by[("black-box", 4)]["trials"] * 0.01)
    both = client.post("/v1/audits/plan", json={"config": {**cfg, "power": {"alternatives": ["noise_quarter",
                                                                                           "no_noise"]}}})
    rec = both.json()["recommended"]
    assert rec is not None and rec["partitions"] > 1 and min(rec["detection"].values()) >= 0.9
    bad = client.post("/v1/audits/plan", json={"config": {**cfg, "power": {"alternatives": ["typo"]}}})
    assert bad.status_code == 422 and bad.json()["error"]["param"].startswith("config.power"), bad.text


def test_cli_exit_codes_and_junit(client, database_url, tmp_path):
    """A real `dpicl audit run` process: exit 4 (inconclusive, JUnit skipped or failure), 1 (violation)."""
    server = str(client.base_url)
    env = fast_env(database_url)
    with StandaloneGateway("no_noise", seed=8) as gw:
        cfg = tmp_path / "audit.json"
        cfg.write_text(json.dumps({"kind": "canary_mia", "config": _config(gw.url, partitions=3, epsilon=2.0,
                                                                             trials=6)}))
        codes = {}
        for as_ in ("skipped", "failure"):
            junit = tmp_path / f"{as_}.xml"
            p = subprocess.run([sys.executable, "-m", "app.cli", "audit", "run", "--server", server, "--config",
                                str(cfg), "--claimed-epsilon", "2", "--wait", "--junit", str(junit),
                                "--junit-inconclusive", as_, "--run-id", as_],
                               cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
            codes[as_] = p.returncode
            assert "INCONCLUSIVE" in p.stdout + p.stderr, p.stdout + p.stderr
            suite = ET.parse(junit).getroot().find("testsuite")
            assert suite.get(as_ if as_ == "skipped" else "failures") == "1"
        assert codes == {"skipped": 4, "failure": 4}
        wb = tmp_path / "wb.json"
        wb.write_text(json.dumps({"kind": "canary_mia", "config": _config(gw.url, partitions=3, epsilon=2.0,
                                                                            white_box=True, trials=40)}))
        p = subprocess.run([sys.executable, "-m", "app.cli", "audit", "run", "--server", server, "--config",
                            str(wb), "--claimed-epsilon", "2", "--wait"], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 1 and "implementation does not match its claim" in p.stdout + p.stderr


@pytest.mark.parametrize("test", ["bound", "release_floor"])
def test_power_predictions_match_observed_detection_rates(test):
    """Predicted P(detect sigma/4) of each black-box test against 60 simulated campaigns at a trial
    count where it is mid-range (no HTTP; the target's noise is the audited code). Tolerance: 3
    binomial standard deviations of the observed rate over 60 runs."""
    from scipy import stats

    from app.audit import Canary, CampaignConfig, SimulatedVotingTarget, run_campaign
    from app.audit.conformance import min_release_probability
    from app.audit.noise import gaussian_voting_noise
    from app.audit.power import power_report

    noise = gaussian_voting_noise(2.0, 1e-5)
    bad = gaussian_voting_noise(2.0, 1e-5, bug="noise_quarter")
    ex = [(f"text {i}", "b") for i in range(6)]
    canary = Canary("hex", "00ff00ff00ff", "a")
    if test == "bound":  # inquiry: labels a, b, Yes, No; the canary moves one of 3 votes from No to Yes
        vw, vo, query, trials, pos = [0, 0, 1, 2], [0, 0, 0, 3], "inquiry", 500, 2
        threshold = None
    else:  # input_output: labels a, b; release floor Phi(-3 / (sigma sqrt 2))
        vw, vo, query, trials, pos = [1, 2], [0, 3], "input_output", 30, 0
        threshold = int(stats.binom.ppf(0.05 / 4, trials, min_release_probability(noise, 3)))
    rep = power_report(noise, np.array([vw]), np.array([vo]), pos, n_members=trials // 2,
                       n_nonmembers=trials // 2, claimed_epsilon=2.0, confidence=0.95, delta=1e-5,
                       vote_model="assumed", vote_model_note="", partitions=3, floor_threshold=threshold)
    a = rep.alternatives["noise_quarter"]
    p = a.detection_bound if test == "bound" else a.detection_floor
    assert 0.15 < p < 0.85  # a mid-range prediction, so the comparison has teeth
    hits, runs = 0, 60
    for seed in range(runs):
        target = SimulatedVotingTarget(vw, vo, bad)
        res = run_campaign(target, ex, canary, query, task_labels=["a", "b"],
                           config=CampaignConfig(trials=trials, threat_models=("black-box",)),
                           rng=np.random.default_rng(seed))
        hits += (res.epsilon > 2.0) if test == "bound" else (not res.release_floor.conformant)
    sd = (p * (1 - p) / runs) ** 0.5
    assert abs(hits / runs - p) <= 3 * sd, (hits, runs, p)
