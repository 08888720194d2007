"""A job's inline texts never leave the server (docs/security.md, "What never leaves"): a canary audit
with inline exemplars carrying a unique marker, against a live keyed server (SQLite and PostgreSQL).
The marker is in none of: the 202, GET one, the list, the webhook body, the /ui job page and list,
the re-run form, the artifacts, the CLI's --json output and JUnit file, the server log. The stored
config stays whole (the job runs on it)."""

from __future__ import annotations

import json
import logging
import re
import time
import uuid

from typer.testing import CliRunner

from app.cli import cli
from tests.jobs.conftest import submit, wait_for, wait_job
from tests.jobs.test_webhooks import Receiver
from tests.ui.conftest import CANARY, api


def _config(marker: str) -> dict:
    exemplars = [{"input": f"{marker} ticket {i} about the refund", "output": "yes" if i % 2 else "no"}
                 for i in range(8)]
    return {**CANARY, "dataset": {"exemplars": exemplars, "labels": ["yes", "no"], "size": 8,
                                  "heldout": [{"input": f"{marker} held out", "output": "no"}]}}


def _chars(cfg: dict) -> int:
    return sum(len(e["input"]) + len(e["output"]) for e in cfg["dataset"]["exemplars"])


def test_job_inline_exemplars_never_leave_the_server(keyed_server, ui, caplog, tmp_path):
    caplog.set_level(logging.INFO)
    marker = f"ZEBRA-MARKER-{uuid.uuid4().hex}"
    cfg = _config(marker)
    rcv = Receiver([])
    seen: list[tuple[str, str]] = []
    try:
        with api(keyed_server, "A") as c:
            created = submit(c, "canary_mia", cfg, claimed_epsilon=1.0, webhook_url=rcv.url)
            seen.append(("202", json.dumps(created)))
            job = wait_job(c, created["id"], timeout=60)
            assert job["status"] == "succeeded", job["error"]  # the runner had the whole config
            assert job["result"]["exemplar_count"] == 8
            seen.append(("GET one", c.get(f"/v1/audits/{job['id']}").text))
            listing = c.get("/v1/audits", params={"limit": 100})
            seen.append(("list", listing.text))
            for a in job["artifacts"]:
                seen.append((f"artifact {a['name']}",
                             c.get(f"/v1/audits/{job['id']}/artifacts/{a['name']}").content.decode(errors="replace")))
            wait_for(lambda: rcv.calls, 20, "the webhook")
            seen.append(("webhook", rcv.calls[0]["body"].decode()))
            # The same data again: the same summary, so a client can tell which data a job was sent.
            again = submit(c, "canary_mia", cfg, claimed_epsilon=1.0)
            seen.append(("202 again", json.dumps(again)))
    finally:
        rcv.close()
    page = ui("A")
    seen.append(("/ui job", page.get(f"/ui/audits/{job['id']}").text))
    ui_list = page.get("/ui/audits").text
    seen.append(("/ui list", ui_list))
    assert "simulated · rnm · ε=1.0" in ui_list  # the target column, from the config's head only
    rerun = page.get(f"/ui/audits/new?rerun={job['id']}").text
    seen.append(("/ui re-run", rerun))
    junit = tmp_path / "junit.xml"
    out = CliRunner().invoke(cli, ["audit", "run", "--server", keyed_server.url, "--config",
                                   _file(tmp_path, {"kind": "canary_mia", "config": cfg}), "--claimed-epsilon", "1.0",
                                   "--wait", "--json", "--junit", str(junit), "--quiet", "--run-id",
                                   f"echo-{time.time_ns()}"],
                             env={"DPICL_API_KEY": keyed_server.keys["A"]}, catch_exceptions=False)
    assert out.exit_code in (0, 4), out.output  # pass or inconclusive: the verdict is not what this tests
    seen += [("CLI --json", out.stdout), ("CLI JUnit", junit.read_text())]
    seen.append(("server log", "\n".join(r.getMessage() for r in caplog.records)))

    leaked = [where for where, text in seen if marker in text]
    assert not leaked, f"the marker left the server in: {leaked}"

    one = json.loads(seen[1][1])["config"]["dataset"]
    assert one["exemplars"]["omitted"] == "inline text" and one["exemplars"]["count"] == 8
    assert one["exemplars"]["chars"] == _chars(cfg)
    assert re.fullmatch(r"[0-9a-f]{64}", one["exemplars"]["hmac_sha256"])  # the server has DPICL_SECRETS_KEY
    assert one["heldout"]["count"] == 1 and one["labels"] == ["yes", "no"]  # class labels are metadata
    assert again["config"]["dataset"]["exemplars"] == one["exemplars"]
    assert all("config" not in j for j in json.loads(seen[2][1])["data"])  # the list carries no config
    assert json.loads(out.stdout)["config"]["dataset"]["exemplars"]["omitted"] == "inline text"
    assert "put the texts back" in rerun
    with api(keyed_server, "A") as c:  # the public view sent back is refused naming the field, never run
        back = c.post("/v1/audits", json={"kind": "canary_mia", "config": json.loads(seen[1][1])["config"]})
        assert back.status_code == 422 and back.json()["error"]["param"] == "config.dataset.exemplars", back.text


def _file(tmp_path, body: dict) -> str:
    p = tmp_path / "audit.json"
    p.write_text(json.dumps(body))
    return str(p)
