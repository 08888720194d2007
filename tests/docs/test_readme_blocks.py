"""README.md runs as written: every shell and Python block that talks to the service
(``localhost:8000`` / ``127.0.0.1:8000``) is executed, in order, against a live server.

Shell blocks are split into commands (a command goes on while a quote is open or a line ends
with a backslash); ``curl`` and ``printf`` commands run in bash in a scratch folder, each
``curl`` must answer 2xx with JSON. The placeholder ``ds_...`` is the dataset most recently
created by an earlier command and not deleted since (the tour deletes the bulk set, then uses
``tickets``). Python blocks run with the server's URL and the same dataset id.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
SERVICE = re.compile(r"(localhost|127\.0\.0\.1):8000")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
T = 300  # private answers on a loaded 2-core machine


def service_blocks(text: str) -> list[tuple[str, str]]:
    return [(lang, body) for lang, body in FENCE.findall(text)
            if lang in ("bash", "sh", "shell", "python") and SERVICE.search(body)]


def shell_commands(block: str) -> list[str]:
    cmds, cur = [], ""
    for line in block.splitlines():
        if not cur and (not line.strip() or line.lstrip().startswith("#")):
            continue
        cur += line + "\n"
        if line.rstrip().endswith("\\"):
            continue
        try:
            shlex.split(cur, comments=True)
        except ValueError:  # an open quote: the command goes on
            continue
        cmds.append(cur.strip())
        cur = ""
    assert not cur, f"unterminated command in README: {cur!r}"
    return cmds


def test_the_readme_has_service_blocks():
    blocks = service_blocks(README.read_text())
    assert sum(1 for lang, _ in blocks if lang == "bash") >= 2 and any(lang == "python" for lang, _ in blocks)


def test_readme_blocks_run_against_a_live_server(live_server, tmp_path):
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    host = live_server.removeprefix("http://")
    datasets: list[str] = []  # created and not deleted, oldest first
    ran = 0
    for lang, block in service_blocks(README.read_text()):
        if lang == "python":
            assert datasets, "a Python block needs a dataset from an earlier block"
            code = SERVICE.sub(host, block).replace("ds_...", datasets[-1])
            ns: dict = {}
            exec(compile(code, "README.md (python block)", "exec"), ns)  # noqa: S102 - the README's own code
            if "r" in ns and hasattr(ns["r"], "model_extra"):  # the OpenAI-client example
                assert ns["r"].model_extra["dp"]["privacy"]["epsilon"] > 0
            ran += 1
            continue
        for cmd in shell_commands(block):
            word = cmd.split()[0]
            if word not in ("curl", "printf"):
                continue
            if "ds_..." in cmd:
                assert datasets, f"no dataset to fill in for: {cmd}"
                cmd = cmd.replace("ds_...", datasets[-1])
            cmd = SERVICE.sub(host, cmd)
            if word == "curl":
                cmd = cmd.replace("curl -s", "curl -s -w '\\n%{http_code}'", 1)
            proc = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, capture_output=True, text=True, timeout=T)
            assert proc.returncode == 0, f"{cmd}\n{proc.stderr}"
            ran += 1
            if word != "curl":
                continue
            body, _, status = proc.stdout.rpartition("\n")
            assert status.startswith("2"), f"README command answered {status}:\n{cmd}\n{body[:2000]}"
            obj = json.loads(body)
            if isinstance(obj, dict) and obj.get("object") == "dataset":
                if obj.get("deleted"):
                    datasets.remove(obj["id"])
                else:
                    datasets.append(obj["id"])
    assert ran >= 8, f"only {ran} README commands ran"


DOCS = ["docs/budget.md", "docs/jobs.md"]  # docs/synthesize.md's block runs a minutes-long synthesis:
# its flow is tests/api/test_synthesize.py's.


def test_docs_blocks_run_against_a_live_server(tmp_path):
    """The service blocks of docs/budget.md and docs/jobs.md, pasted: ``ds_...`` is a 16-exemplar set
    made here, ``job_...`` the job the block itself submitted (an artifact is fetched once it is done)."""
    import httpx

    from tests.conftest import running_app, server_settings

    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    settings = server_settings(f"sqlite:///{tmp_path / 'docs.db'}", job_runner="inprocess", job_poll_seconds=0.1,
                               auth_mode="open", artifacts_dir=str(tmp_path / "artifacts"), load_models=False)
    with running_app(settings, models={}) as c:
        host = str(c.base_url).removeprefix("http://").rstrip("/")
        labels = ["billing", "shipping"]
        ds = c.post("/v1/datasets", json={"name": "docs", "labels": labels, "exemplars": [
            {"input": f"ticket {i}", "output": labels[i % 2]} for i in range(16)]}).json()["id"]
        job = None
        ran = 0
        for doc in DOCS:
            blocks = service_blocks((README.parent / doc).read_text())
            assert blocks, f"{doc} has no service block"
            for _, block in blocks:
                for cmd in shell_commands(block):
                    if cmd.split()[0] != "curl":
                        continue
                    cmd = SERVICE.sub(host, cmd.replace("ds_...", ds))
                    if job is not None:
                        cmd = re.sub(r"job_[0-9a-f]*\.\.\.", job, cmd)
                        if "/artifacts/" in cmd:  # the block polls; here: wait until the job is done
                            for _ in range(600):
                                if c.get(f"/v1/audits/{job}").json()["status"] in ("succeeded", "failed"):
                                    break
                                time.sleep(0.1)
                    cmd = re.sub(r"^curl -s(i?)", lambda m: f"curl -s{m.group(1)} -w '\\n%{{http_code}}'", cmd)
                    proc = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, capture_output=True, text=True,
                                          timeout=T)
                    assert proc.returncode == 0, f"{doc}: {cmd}\n{proc.stderr}"
                    out, _, status = proc.stdout.rpartition("\n")
                    assert status.startswith("2"), f"{doc} command answered {status}:\n{cmd}\n{out[:2000]}"
                    loc = re.search(r"^location: (\S+)", out, re.M | re.I)
                    if loc and "/v1/audits/" in loc.group(1):
                        job = loc.group(1).rsplit("/", 1)[-1]
                    ran += 1
        assert job is not None and ran >= 5, ran
        assert (tmp_path / "epsilon.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert httpx.get(f"{c.base_url}/v1/audits/{job}").json()["status"] == "succeeded"
