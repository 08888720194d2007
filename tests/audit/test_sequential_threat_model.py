"""A sequential audit keeps to its ``threat_model``: "black-box" reads the released labels only, even of an
in-process mechanism whose votes and noise it could read (before, the sequential job took the white-box
evidence whatever the config said, so a "black-box" audit of an in-process target decided in 2 prompts).
A real server, the bundled SmolLM2 behind in-process rnm, SQLite."""

from __future__ import annotations

import httpx
import pytest

from tests.jobs.conftest import submit, wait_job
from tests.ui.conftest import keyed_live_server


@pytest.fixture(scope="module")
def client(tmp_path_factory, lm):
    url = f"sqlite:///{tmp_path_factory.mktemp('seq-tm')}/db.sqlite"
    with keyed_live_server(url, {"A": ("tenant-a", ["audit", "admin"])}, {lm.name: lm}) as srv:
        with httpx.Client(base_url=srv.url, timeout=30, headers={"Authorization": f"Bearer {srv.keys['A']}"}) as c:
            yield c


def _audit(client, threat_model: str) -> dict:
    cfg = {"target": {"type": "mechanism", "mechanism": "rnm", "bug": "winner_only",
                      "params": {"epsilon": 2.0, "delta": 1e-5, "partitions": 2, "shots_per_partition": 2}},
           "dataset": {"size": 4}, "canary": {"type": "hex"}, "query": "input_output", "mode": "sequential",
           "trials": 8, "threat_model": threat_model, "seed": 3}
    job = wait_job(client, submit(client, "canary_mia", cfg, claimed_epsilon=2.0)["id"], timeout=300)
    assert job["status"] == "succeeded", job["error"]
    return job


def test_a_black_box_sequential_audit_reads_released_labels_only(client):
    both = _audit(client, "both")
    arms = both["result"]["sequential"]["arms"]
    assert any(a["white_box"] for a in arms.values()), arms  # the in-process target's noise, read
    assert both["verdict"] == "violation" and both["result"]["sequential"]["trials"] <= 4, both["verdict_reason"]
    black = _audit(client, "black-box")
    arms = black["result"]["sequential"]["arms"]
    assert not any(a["white_box"] for a in arms.values()), arms
    # the defaults for a black-box audit of rnm: a one-label context and a counted decoy
    assert black["result"]["context"]["pick"] == "one_label" and black["config"]["dataset"]["decoy_labels"] == 1
