"""Every fenced example in README.md and docs/*.md runs as written, in order, or is marked and explained.

The rule and the markers: tests/docs/doc_blocks.py. Each document runs in order in its own scratch folder,
as if pasted into one terminal and one Python session after ``make serve``; the documents that talk to the
service run against a live dpicl (both bundled models, in-process job runner) on SQLite and on PostgreSQL.
What the harness fills in, and only this:

* ``localhost:8000`` / ``127.0.0.1:8000`` and ``--server URL`` become the live server's address (and
  ``DPICL_SERVER`` is set, the CLI's stand-in for its default ``http://127.0.0.1:8000``);
* ``ds_...`` is the dataset the document most recently created and did not delete (a ``curl`` that answered
  a dataset, ``dpicl datasets load-sample``); ``job_...`` (``job_4c0e...``) the job it most recently
  submitted;
* Python blocks of the library docs find ``lm`` and ``embedder``, the bundled models loaded as in
  docs/models.md's first example.

Checks: every command exits 0 (or with the ``# exit N`` its comment names); every ``curl`` answers 2xx
(with JSON unless it saves to a file or shows headers); ``$ command`` blocks print what they show (line by
line, in order; ``...`` stands for anything). ``dpicl`` is the virtual environment's, running this
checkout. The terminal summary counts the blocks (tests/docs/conftest.py).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import DB_KINDS, make_database_url, running_app, server_settings
from tests.docs import doc_blocks as db

T = 300  # one command: private answers on a loaded 2-core machine
DOCS = [str(p.relative_to(db.ROOT)) for p in db.doc_paths()]
SERVER_DOCS = [d for d in DOCS if any(b.needs_server for b in db.blocks(db.ROOT / d))]
LIBRARY_DOCS = [d for d in DOCS if d not in SERVER_DOCS]
JOB_ID = re.compile(r"job_[0-9a-f]*\.\.\.")


@dataclass
class Run:
    doc: str
    scratch: Path
    url: str | None = None
    ns: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)
    datasets: list[str] = field(default_factory=list)  # created and not deleted, oldest first
    job: str | None = None

    def fill(self, text: str) -> str:
        if self.datasets:  # none yet: ``ds_...`` stays (in a comment; elsewhere the command fails, 404)
            text = text.replace("ds_...", self.datasets[-1])
        if self.job is not None:
            text = JOB_ID.sub(self.job, text)
        if self.url is not None:
            text = db.SERVICE.sub(self.url.removeprefix("http://"), text).replace("--server URL", f"--server {self.url}")
        return text

    def sh(self, cmd: str, merged: bool = False) -> subprocess.CompletedProcess:
        """``merged``: stderr into stdout, in the order a terminal shows them."""
        return subprocess.run(["bash", "-c", cmd], cwd=self.scratch, env=self.env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT if merged else subprocess.PIPE, text=True, timeout=T)

    def track(self, out: str) -> None:
        """Datasets and jobs a command's output names: a dataset or job resource, a CLI line ``ds_x  name: ...``."""
        try:
            obj = json.loads(out)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and obj.get("object") == "dataset":
            if obj.get("deleted"):
                self.datasets.remove(obj["id"])
            else:
                self.datasets.append(obj["id"])
        elif isinstance(obj, dict) and obj.get("object") == "audit.job":
            self.job = obj["id"]
        elif obj is None:
            m = re.match(r"(ds_\w+)\s", out)
            if m:
                self.datasets.append(m.group(1))


def _env(url: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "DPICL_API_KEY"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = f"{db.ROOT}{os.pathsep}{env['PYTHONPATH']}" if env.get("PYTHONPATH") else str(db.ROOT)
    if url:
        env["DPICL_SERVER"] = url
    return env


def _wait_for_job(run: Run) -> None:
    import httpx

    for _ in range(3000):
        if httpx.get(f"{run.url}/v1/audits/{run.job}").json()["status"] in ("succeeded", "failed", "cancelled"):
            return
        time.sleep(0.1)


def run_shell(run: Run, b: db.Block) -> None:
    for raw in db.shell_commands(b.body):
        cmd = run.fill(raw)
        words = shlex.split(cmd, comments=True)
        word = next((w for w in words if "=" not in w), "")
        if word == "export":
            for w in words[1:]:
                k, _, v = w.partition("=")
                run.env[k] = v
            continue
        is_curl = word == "curl"
        if is_curl:
            if run.job is not None and "/artifacts/" in cmd:  # the doc polls by hand; here: wait for the job
                _wait_for_job(run)
            cmd = re.sub(r"^curl -s(i?)", lambda m: f"curl -s{m.group(1)} -w '\\n%{{http_code}}'", cmd)
            assert "-w '" in cmd, f"{b.where}: a curl example should start with 'curl -s': {raw}"
        proc = run.sh(cmd)
        want = db.expected_exit(raw)
        assert proc.returncode == want, f"{b.where}: exit {proc.returncode} (not {want}): {raw}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        out = proc.stdout
        if is_curl:
            out, _, status = out.rpartition("\n")
            assert status.startswith("2"), f"{b.where}: answered {status}: {raw}\n{out[:2000]}"
            loc = re.search(r"^location: (\S+)", out, re.M | re.I)
            if loc and "/v1/audits/" in loc.group(1):
                run.job = loc.group(1).rsplit("/", 1)[-1]
            if " -o " not in cmd and not re.match(r"curl -si", cmd):
                json.loads(out)  # the service answers JSON
        run.track(out.strip())


_PURE: dict[str, subprocess.CompletedProcess] = {}  # `dpicl privacy` commands (pure math, no server) already run


def run_console(run: Run, b: db.Block) -> None:
    for raw, shown in db.console_steps(b.body):
        cmd = run.fill(raw)
        pure = cmd.startswith("dpicl privacy ")  # README repeats docs/privacy.md's: run once per session
        proc = _PURE.get(cmd) if pure else None
        if proc is None:
            proc = run.sh(cmd, merged=True)
            if pure:
                _PURE[cmd] = proc
        want = db.expected_exit(raw)
        out = proc.stdout
        assert proc.returncode == want, f"{b.where}: exit {proc.returncode} (not {want}): $ {raw}\n{out[-3000:]}"
        bad = db.output_mismatch([run.fill(x) for x in shown], out)
        assert bad is None, f"{b.where}: $ {raw}\n{bad}; the command printed:\n{out[-3000:]}"
        run.track(out.strip())


def run_python(run: Run, b: db.Block) -> None:
    code = run.fill(b.body)
    cwd = os.getcwd()
    os.chdir(run.scratch)
    try:
        exec(compile(code, f"{b.where} (python)", "exec"), run.ns)  # noqa: S102 - the doc's own example
    finally:
        os.chdir(cwd)
    r = run.ns.get("r")
    if hasattr(r, "model_extra") and isinstance(getattr(r, "model_extra", None), dict) and "dp" in r.model_extra:
        assert r.model_extra["dp"]["privacy"]["epsilon"] > 0  # README's OpenAI-client example: charged
    ds = run.ns.get("ds")
    if isinstance(ds, dict) and ds.get("object") == "dataset":
        run.datasets.append(ds["id"])


RUNNERS = {"shell": run_shell, "console": run_console, "python": run_python}


def run_doc(doc: str, scratch: Path, url: str | None, ns: dict) -> dict:
    from app.jobs import registry

    run = Run(doc, scratch, url, ns=dict(ns, __name__="__doc_example__"), env=_env(url))
    kinds = dict(registry.all_kinds())  # docs/jobs.md registers an example kind: only while its doc runs
    counts = {"ran": 0, "skip": 0, "output": 0}
    try:
        for b in db.blocks(db.ROOT / doc):
            assert db.problems(b) is None, db.problems(b)
            if b.marker:
                counts[b.marker] += 1
                continue
            RUNNERS[b.mode](run, b)
            counts["ran"] += 1
    finally:
        with registry._lock:
            registry._KINDS.clear()
            registry._KINDS.update(kinds)
    return counts


def test_every_block_runs_or_is_marked():
    """The rule itself, and the count (a new unmarked block the harness cannot run fails here; one it can run
    but that fails, in the run tests below)."""
    found = [b for p in db.doc_paths() for b in db.blocks(p)]
    bad = [x for b in found if (x := db.problems(b))]
    assert not bad, "\n".join(bad)
    n = {k: sum(1 for b in found if b.marker == k) for k in (None, "skip", "output")}
    db.TALLY["static"] = (n[None], n["skip"], n["output"], len(found))
    assert n[None] >= 20 and len(found) >= 60, db.summary_line()
    assert set(SERVER_DOCS) >= {"README.md", "docs/budget.md", "docs/jobs.md"}, SERVER_DOCS


def test_the_rule_catches_unmarked_unrunnable_and_wrong_examples(tmp_path):
    md = tmp_path / "x.md"
    md.write_text("```json\n{}\n```\n\n<!-- doc-test: skip -->\n```bash\nvllm serve\n```\n\n"
                  "<!-- doc-test: maybe (x) -->\n```\nls\n```\n\n<!-- doc-test: output (a layout) -->\n```\na/\n```\n"
                  "\n<!-- doc-test: skip (a GPU: vLLM) -->\n\n```bash\nvllm serve\n```\n")
    found = db.blocks(md)
    assert [db.problems(b) is None for b in found] == [False, False, False, True, True]
    assert found[4].marker == "skip" and found[4].reason == "a GPU: vLLM"  # a blank line between is allowed
    steps = db.console_steps("$ dpicl privacy convert --mu 1 \\\n  --epsilon 2\ndelta  0.02092\n...\n")
    assert steps == [("dpicl privacy convert --mu 1 \\\n  --epsilon 2", ["delta  0.02092", "..."])]
    assert db.output_mismatch(["delta  0.02092"], "mu 1\ndelta            0.02092\n") is None
    assert db.output_mismatch(["delta  0.02093"], "delta 0.02092\n") is not None
    assert db.output_mismatch(["b 2", "a 1"], "a 1\nb 2\n") is not None  # order matters
    assert db.output_mismatch(["epsilon  4.54   (a rigorous lower bound)", "notes  ..."], "epsilon 4.54\nnotes x y\n") is None
    assert db.expected_exit("dpicl x --mechanism nope      # exit 2") == 2


@pytest.mark.parametrize("doc", LIBRARY_DOCS)
def test_library_doc_examples_run(doc, request, tmp_path):
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    python = any(b.marker is None and b.mode == "python" for b in db.blocks(db.ROOT / doc))
    ns = {k: request.getfixturevalue(k) for k in ("lm", "embedder")} if python else {}
    counts = run_doc(doc, tmp_path, None, ns)
    db.TALLY[(doc, "-")] = counts


@pytest.fixture(scope="module", params=DB_KINDS)
def docs_server(request, tmp_path_factory, pg_databases, lm, embedder):
    url = make_database_url(request.param, tmp_path_factory, pg_databases)
    settings = server_settings(url, job_runner="inprocess", job_poll_seconds=0.1, auth_mode="open",
                               artifacts_dir=str(tmp_path_factory.mktemp("artifacts")))
    with running_app(settings, models={lm.name: lm, embedder.name: embedder}, timeout=T) as c:
        yield request.param, str(c.base_url).rstrip("/")


@pytest.mark.parametrize("doc", SERVER_DOCS)
def test_service_doc_examples_run(doc, docs_server, lm, embedder, tmp_path):
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    kind, url = docs_server
    counts = run_doc(doc, tmp_path, url, {"lm": lm, "embedder": embedder})
    db.TALLY[(doc, kind)] = counts
    if doc == "docs/jobs.md":
        assert (tmp_path / "epsilon.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
