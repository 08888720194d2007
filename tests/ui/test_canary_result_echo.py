"""A canary audit's result names a canary that holds caller or private text by kind, origin, size and
digest, never its text (docs/security.md, "What never leaves"; app/jobs/kinds/canary_view.py): a live
keyed server with the bundled models, SQLite and PostgreSQL.

* a ``heldout`` canary (a text of ``dataset.heldout``), simulated votes (inquiry, brainwash, sequential): GET one, the list, the webhook
  body, the artifacts, the /ui job page and the CLI's --json and JUnit;
* a ``unigram`` canary (rare tokens of the exemplars; the test draws the same text with the job's seed)
  on the bundled model: GET one, the list, the artifacts, the /ui job page;
* a generation audit with a caller's ``canary.text`` and ``signals``, each with a marker (esa on the
  bundled models): the same channels;
* a ``hex`` canary (random bytes, no caller text) stays shown in full, in the canary and the query.
"""

from __future__ import annotations

import json
import re
import time
import uuid

import numpy as np
import pytest
from typer.testing import CliRunner

from app.cli import cli
from tests.conftest import DB_KINDS, make_database_url
from tests.jobs.conftest import submit, wait_for, wait_job
from tests.jobs.test_webhooks import Receiver
from tests.ui.conftest import CANARY, SECRETS_KEY, UIClient, keyed_live_server

EXEMPLARS = [{"input": f"customer ticket {i} about the {w} refund", "output": "yes" if i % 2 else "no"}
             for i, w in enumerate(("late", "broken", "double", "missing", "partial", "lost", "odd", "early"))]
DATASET = {"exemplars": EXEMPLARS, "labels": ["yes", "no"], "size": 8}
ESA = {"type": "mechanism", "mechanism": "esa",
       "params": {"epsilon": 2.0, "delta": 1e-5, "partitions": 2, "shots_per_partition": 1, "candidates": 2}}


@pytest.fixture(scope="module", params=DB_KINDS)
def server(request, tmp_path_factory, pg_databases, lm, embedder):
    url = make_database_url(request.param, tmp_path_factory, pg_databases)
    with keyed_live_server(url, {"A": ("tenant-a", ["audit", "admin"])}, {lm.name: lm, embedder.name: embedder},
                           secrets_key=SECRETS_KEY) as srv:
        srv.key = srv.keys["A"]
        yield srv


def _api(server):
    import httpx

    return httpx.Client(base_url=server.url, timeout=30, headers={"Authorization": f"Bearer {server.key}"})


def _channels(server, c, job: dict) -> list[tuple[str, str]]:
    """GET one, the list, every artifact and the /ui job page of a finished job."""
    seen = [("GET one", c.get(f"/v1/audits/{job['id']}").text),
            ("list", c.get("/v1/audits", params={"limit": 100}).text)]
    for a in job["artifacts"]:
        seen.append((f"artifact {a['name']}",
                     c.get(f"/v1/audits/{job['id']}/artifacts/{a['name']}").content.decode(errors="replace")))
    page = UIClient(server.url)
    try:
        page.login(server.key)
        seen.append(("/ui job", page.get(f"/ui/audits/{job['id']}").text))
    finally:
        page.close()
    return seen


def _run(c, cfg: dict, timeout: float = 120, **extra) -> dict:
    job = wait_job(c, submit(c, "canary_mia", cfg, **extra)["id"], timeout=timeout)
    assert job["status"] == "succeeded", job["error"]
    return job


def test_heldout_canary_text_never_leaves(server, tmp_path):
    marker = f"HELDOUT-MARKER-{uuid.uuid4().hex}"
    heldout = [{"input": f"{marker} held out {i}", "output": "no"} for i in range(3)]
    cfg = {**CANARY, "dataset": {**DATASET, "heldout": heldout}, "canary": {"type": "heldout"}, "trials": 200}
    rcv = Receiver([])
    try:
        with _api(server) as c:
            job = _run(c, cfg, claimed_epsilon=1.0, webhook_url=rcv.url)
            brainwash = _run(c, {**cfg, "query": "brainwash"}, claimed_epsilon=1.0)
            seq = _run(c, {**cfg, "query": "input_output", "mode": "sequential", "trials": "auto"},
                       claimed_epsilon=1.0)
            seen = _channels(server, c, job) + _channels(server, c, brainwash) + _channels(server, c, seq)
            wait_for(lambda: rcv.calls, 20, "the webhook")
            seen.append(("webhook", rcv.calls[0]["body"].decode()))
    finally:
        rcv.close()
    junit = tmp_path / "junit.xml"
    path = tmp_path / "audit.json"
    path.write_text(json.dumps({"kind": "canary_mia", "config": cfg}))
    out = CliRunner().invoke(cli, ["audit", "run", "--server", server.url, "--config", str(path),
                                   "--claimed-epsilon", "1.0", "--wait", "--json", "--junit", str(junit), "--quiet",
                                   "--run-id", f"canary-echo-{time.time_ns()}"],
                             env={"DPICL_API_KEY": server.key}, catch_exceptions=False)
    assert out.exit_code in (0, 4), out.output
    seen += [("CLI --json", out.stdout), ("CLI JUnit", junit.read_text())]

    leaked = [where for where, text in seen if marker in text]
    assert not leaked, f"the held-out canary left the server in: {leaked}"
    a = job["result"]["attack"]
    canary = a["canary"]
    i = canary["heldout_index"]
    assert canary["kind"] == "heldout" and canary["origin"] == "dataset.heldout" and i in (0, 1, 2)
    assert canary["chars"] == len(heldout[i]["input"]) and re.fullmatch(r"[0-9a-f]{64}", canary["hmac_sha256"])
    assert canary["label"] == "no" and "text" not in canary  # a class label is public metadata
    assert a["query"] == 'Is the text "{canary}" present above? Answer Yes or No.'
    assert a["labels"] == ["yes", "no", "Yes", "No"] and a["positive"] == "Yes"  # every label here is public
    bw = brainwash["result"]["attack"]
    assert bw["strategy"] == "brainwash" and bw["query"].count("{canary}") == 7 and "{input_prefix}" in bw["query"]
    assert job["result"]["estimates"]["black-box"]["epsilon_lower"] >= 0  # every number stays
    assert seq["result"]["attack"]["canary"]["origin"] == "dataset.heldout" and seq["result"]["attack"]["query"] == "{canary}"


def _unigram_text(lm, cfg: dict) -> str:
    """The job's unigram canary, drawn as the job draws it (its seed, its pick of the exemplars)."""
    from app.audit import make_canary
    from app.jobs.kinds.canary_config import CanaryMIAConfig
    from app.jobs.kinds.canary_data import _dataset, pick_context

    rng = np.random.default_rng(cfg["seed"])
    config = CanaryMIAConfig.model_validate(cfg)
    all_ex, labels, _, _ = _dataset(config.dataset)
    pick_context(rng, all_ex, config, labels)
    return make_canary("unigram", rng, label="yes", dataset_texts=[a for a, _ in all_ex], tokenizer=lm).text


def test_unigram_canary_text_never_leaves(server, lm):
    target = {"type": "mechanism", "mechanism": "rnm", "params": {"epsilon": 1.0, "delta": 1e-5, "partitions": 2,
                                                                   "shots_per_partition": 1}}
    cfg = {"target": target, "dataset": {**DATASET, "size": 4}, "canary": {"type": "unigram"}, "trials": 4,
           "seed": 7, "threat_model": "black-box"}
    text = _unigram_text(lm, cfg)
    assert len(text) >= 20
    with _api(server) as c:
        job = _run(c, cfg, timeout=300)
        seen = _channels(server, c, job)
    leaked = [where for where, body in seen if text in body]
    assert not leaked, f"the unigram canary left the server in: {leaked}"
    canary = job["result"]["attack"]["canary"]
    assert canary["kind"] == "unigram" and canary["origin"] == "dataset.exemplars" and canary["tokens"] == 16
    assert canary["chars"] == len(text) and "text" not in canary


def test_caller_canary_and_signals_never_leave(server):
    m = {k: f"{k.upper()}-MARKER-{uuid.uuid4().hex}" for k in ("canary", "y1", "y0")}
    cfg = {"task": "generation", "target": ESA, "dataset": {"size": 4}, "threat_model": "black-box", "trials": 2,
           "max_tokens": 4, "seed": 5, "canary": {"type": "false_fact", "text": f"The {m['canary']} is blue."},
           "signals": [f"Yes {m['y1']} found.", f"No {m['y0']} here."]}
    with _api(server) as c:
        job = _run(c, cfg, timeout=600)
        seen = _channels(server, c, job)
    leaked = [(k, where) for k, marker in m.items() for where, body in seen if marker in body]
    assert not leaked, f"caller text left the server in: {leaked}"
    r = job["result"]
    a, conf = r["attack"], job["config"]
    assert a["canary"]["origin"] == "canary.text" and a["canary"]["kind"] == "false_fact"
    # The digests match the config's summaries of the same texts: a client can tell what was audited.
    assert a["canary"]["hmac_sha256"] == conf["canary"]["text"]["hmac_sha256"]
    assert r["config"]["signals"] == conf["signals"] and r["config"]["signals"]["count"] == 2
    assert a["labels"] == ["{y1}", "{y0}"] and a["positive"] == "{y1}"
    assert '"{canary}"' in a["query"] and '"{y1}"' in a["query"] and '"{y0}"' in a["query"]
    assert {t["released"] for t in r["trials"]} <= {"{y1}", "{y0}"}
    assert a["canary"]["label"]["omitted"] == "inline text"  # a generation record's output text


def test_hex_canary_stays_readable(server):
    with _api(server) as c:
        job = _run(c, {**CANARY, "dataset": DATASET, "trials": 100})
    a = job["result"]["attack"]
    assert a["canary"]["kind"] == "hex" and re.fullmatch(r"[0-9a-f]{16}", a["canary"]["text"])
    assert a["query"] == f'Is the text "{a["canary"]["text"]}" present above? Answer Yes or No.'
    assert a["canary"]["label"] in ("yes", "no")
