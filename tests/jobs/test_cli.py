"""`dpicl audit run`, the CI hook, against a live server on SQLite and PostgreSQL: exit codes,
JUnit XML, --json, idempotency, Retry-After, DPICL_API_KEY."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import httpx
from typer.testing import CliRunner

from app.cli import cli
from app.cli.audit import (
    EXIT_ERROR,
    EXIT_PASS,
    EXIT_TIMEOUT,
    EXIT_VIOLATION,
    Progress,
    idempotency_key,
)
from tests.jobs.conftest import ROOT

CALIBRATE = {"mechanism": "gaussian", "solve_for": "sigma", "target_epsilon": 1.0, "delta": 1e-5}


def _run(args: list[str], env: dict | None = None):
    return CliRunner().invoke(cli, ["audit", "run", *args], env=env, catch_exceptions=False)


def _config(tmp_path, body, name="audit.json"):
    p = tmp_path / name
    p.write_text(json.dumps(body))
    return str(p)


def _junit(path):
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    suite = root.find("testsuite")
    case = suite.find("testcase")
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    return suite, case, props


def test_pass_exits_0_with_junit_and_json(jobs_server, tmp_path):
    cfg = _config(tmp_path, {"kind": "epsilon", "config": CALIBRATE})
    junit = tmp_path / "reports" / "junit.xml"
    r = _run(["--server", jobs_server.url, "--config", cfg, "--claimed-epsilon", "1.0", "--claimed-delta", "1e-5",
              "--wait", "--junit", str(junit), "--json", "--run-id", f"pass-{time.time_ns()}"])
    assert r.exit_code == EXIT_PASS, r.output
    job = json.loads(r.stdout)
    assert job["status"] == "succeeded" and job["verdict"] == "pass"
    assert f"{jobs_server.url}/v1/audits/{job['id']}" in r.stderr  # the job's URL
    assert "PASS: measured epsilon" in r.stderr
    suite, case, props = _junit(junit)
    assert suite.get("tests") == "1" and suite.get("failures") == "0" and suite.get("errors") == "0"
    assert case.find("failure") is None and case.find("error") is None
    assert props["job_id"] == job["id"] and props["verdict"] == "pass"
    assert float(props["measured_epsilon"]) <= 1.0


def test_violation_exits_1_and_junit_has_a_failure(jobs_server, tmp_path):
    cfg = _config(tmp_path, CALIBRATE)  # a bare config: kind defaults to epsilon
    junit = tmp_path / "junit.xml"
    r = _run(["--server", jobs_server.url, "--config", cfg, "--claimed-epsilon", "0.5", "--wait",
              "--junit", str(junit), "--run-id", f"viol-{time.time_ns()}"])
    assert r.exit_code == EXIT_VIOLATION, r.output
    assert "VIOLATION: measured epsilon 1 > claimed epsilon 0.5" in r.output
    suite, case, props = _junit(junit)
    failure = case.find("failure")
    assert suite.get("failures") == "1" and failure is not None
    assert failure.get("type") == "PrivacyClaimViolation" and "claimed epsilon 0.5" in failure.get("message")
    # Plain progress lines when not on a terminal.
    assert "succeeded 100% calibrate: done" in r.output or "succeeded 100% done" in r.output


def test_failed_job_exits_2(jobs_server, tmp_path):
    cfg = _config(tmp_path, {"kind": "sleep", "config": {"steps": 2, "fail_at_step": 1,
                                                         "fail_message": "no canaries found"}})
    junit = tmp_path / "junit.xml"
    r = _run(["--server", jobs_server.url, "--config", cfg, "--claimed-epsilon", "1", "--wait", "--junit", str(junit)])
    assert r.exit_code == EXIT_ERROR, r.output
    assert "ERROR: the job failed: no canaries found" in r.output
    _, case, _ = _junit(junit)
    assert case.find("error").get("type") == "AuditError"


def test_rejected_config_exits_2_naming_the_field(jobs_server, tmp_path):
    cfg = _config(tmp_path, {**CALIBRATE, "target_epsilon": 0})
    r = _run(["--server", jobs_server.url, "--config", cfg, "--claimed-epsilon", "1", "--wait"])
    assert r.exit_code == EXIT_ERROR, r.output
    assert "HTTP 422 (config.target_epsilon)" in r.output


def test_unreadable_config_exits_2(jobs_server, tmp_path):
    r = _run(["--server", jobs_server.url, "--config", str(tmp_path / "missing.json"), "--claimed-epsilon", "1"])
    assert r.exit_code == EXIT_ERROR and "cannot read --config" in r.output
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = _run(["--server", jobs_server.url, "--config", str(bad), "--claimed-epsilon", "1"])
    assert r.exit_code == EXIT_ERROR and "not valid JSON" in r.output


def test_timeout_exits_3_and_the_job_keeps_running(jobs_server, tmp_path):
    cfg = _config(tmp_path, {"kind": "sleep", "config": {"steps": 200, "step_seconds": 0.05}})
    junit = tmp_path / "junit.xml"
    t0 = time.monotonic()
    r = _run(["--server", jobs_server.url, "--config", cfg, "--claimed-epsilon", "1", "--wait", "--timeout", "1.5",
              "--junit", str(junit), "--json", "--run-id", f"slow-{time.time_ns()}"])
    assert r.exit_code == EXIT_TIMEOUT, r.output
    assert time.monotonic() - t0 < 6
    job = json.loads(r.stdout)
    assert "TIMEOUT: timed out after 1.5 s" in r.stderr
    _, case, _ = _junit(junit)
    assert case.find("error").get("type") == "Timeout"
    with httpx.Client(base_url=jobs_server.url) as c:
        assert c.get(f"/v1/audits/{job['id']}").json()["status"] in ("queued", "running")
        c.post(f"/v1/audits/{job['id']}/cancel")


def test_same_config_and_run_id_is_the_same_job(jobs_server, tmp_path):
    cfg = _config(tmp_path, {"kind": "sleep", "config": {"steps": 1, "epsilon": 0.2}})
    run_id = f"ci-{time.time_ns()}"
    args = ["--server", jobs_server.url, "--config", cfg, "--claimed-epsilon", "1", "--json"]
    first = json.loads(_run(args + ["--wait", "--run-id", run_id]).stdout)
    again = _run(args + ["--run-id", run_id])  # no --wait: the finished job comes back, with its verdict
    assert again.exit_code == EXIT_PASS and json.loads(again.stdout)["id"] == first["id"]
    other = json.loads(_run(args + ["--wait", "--run-id", run_id + "-2"]).stdout)
    assert other["id"] != first["id"]
    body = {"kind": "sleep", "config": {"steps": 1, "epsilon": 0.2}, "claimed_epsilon": 1.0}
    assert idempotency_key(body, "7") == idempotency_key(dict(reversed(list(body.items()))), "7")
    assert idempotency_key(body, "7") != idempotency_key(body, "8") != idempotency_key(body, None)


def test_without_wait_prints_the_url_and_exits_0(jobs_server, tmp_path):
    cfg = _config(tmp_path, {"kind": "sleep", "config": {"steps": 100, "step_seconds": 0.05}})
    r = _run(["--server", jobs_server.url, "--config", cfg, "--claimed-epsilon", "1", "--run-id", str(time.time_ns())])
    assert r.exit_code == EXIT_PASS, r.output
    url = r.stdout.splitlines()[0]
    assert url.startswith(f"{jobs_server.url}/v1/audits/job_")
    job_id = url.rsplit("/", 1)[1]
    with httpx.Client(base_url=jobs_server.url) as c:
        c.post(f"/v1/audits/{job_id}/cancel")


def test_unreachable_service_exits_2(tmp_path):
    from tests.conftest import free_port

    cfg = _config(tmp_path, CALIBRATE)
    r = _run(["--server", f"http://127.0.0.1:{free_port()}", "--config", cfg, "--claimed-epsilon", "1", "--wait",
              "--retries", "1"])
    assert r.exit_code == EXIT_ERROR, r.output
    assert "did not answer" in r.output


def test_retry_after_and_5xx_are_honoured(tmp_path):
    """A flaky front (a full job queue: 429 queue_full with Retry-After, then a 503) before the real answer: the
    CLI waits and retries."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    calls: list[tuple[str, float]] = []
    job = {"id": "job_x", "url": "/v1/audits/job_x", "status": "succeeded", "verdict": "pass",
           "progress": {"fraction": 1.0, "message": "done"}, "result": {"epsilon": 0.4}, "claimed_epsilon": 1.0,
           "claimed_delta": None, "error": None}

    class H(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            calls.append((self.headers.get("Idempotency-Key"), time.monotonic()))
            if len(calls) == 1:
                self.send_response(429)
                self.send_header("Retry-After", "1")
                body = (b'{"error": {"message": "queue full", "type": "rate_limit_error", "param": "kind", '
                        b'"code": "queue_full"}}')
            elif len(calls) == 2:
                self.send_response(503)
                body = b"{}"
            else:
                self.send_response(202)
                self.send_header("Location", "/v1/audits/job_x")
                body = json.dumps(job).encode()
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        cfg = _config(tmp_path, CALIBRATE)
        r = _run(["--server", f"http://127.0.0.1:{srv.server_address[1]}", "--config", cfg, "--claimed-epsilon", "1",
                  "--wait"])
    finally:
        srv.shutdown()
        srv.server_close()
    assert r.exit_code == EXIT_PASS, r.output
    assert len(calls) == 3 and calls[1][1] - calls[0][1] >= 0.9  # waited Retry-After
    assert len({k for k, _ in calls}) == 1  # the same idempotency key on every retry


def test_progress_bar_on_a_terminal():
    class TTY(io.StringIO):
        def isatty(self):
            return True

    out = TTY()
    p = Progress(out)
    p.show({"status": "running", "progress": {"fraction": 0.5, "message": "step 5 of 10"}})
    p.done()
    text = out.getvalue()
    assert text.startswith("\r[###############...............]  50.0% running: step 5 of 10")
    plain = io.StringIO()
    q = Progress(plain)
    for f in (0.1, 0.1, 0.5):
        q.show({"status": "running", "progress": {"fraction": f, "message": "m"}})
    assert plain.getvalue().splitlines() == ["running 10% m", "running 50% m"]


def test_api_key_from_the_environment(fresh_database_url, tmp_path):
    """With a key in the database (auth_mode auto), the audit API needs it; the CLI sends DPICL_API_KEY."""
    from app.api.auth import create_key
    from app.api.main import create_app
    from app.runtime import Runtime
    from tests.conftest import LiveServer, free_port
    from tests.jobs.conftest import job_settings

    settings = job_settings(fresh_database_url, auth_mode="auto")
    rt = Runtime.create(settings)
    with rt.db.session() as s:
        key, _ = create_key(s, tenant_id="team-a", name="ci", scopes=["audit"])
        other, _ = create_key(s, tenant_id="team-b", name="other", scopes=["audit"])
        infer_only, _ = create_key(s, tenant_id="team-a", name="gateway", scopes=["infer"])
        s.commit()
    srv = LiveServer(create_app(settings, runtime=rt), free_port())
    srv.start()
    try:
        cfg = _config(tmp_path, {"kind": "sleep", "config": {"steps": 1}})
        args = ["--server", srv.url, "--config", cfg, "--claimed-epsilon", "1", "--wait", "--json"]
        denied = _run(args, env={"DPICL_API_KEY": ""})
        assert denied.exit_code == EXIT_ERROR and "HTTP 401" in denied.output
        ok = _run(args, env={"DPICL_API_KEY": key})
        assert ok.exit_code == EXIT_PASS, ok.output
        job_id = json.loads(ok.stdout)["id"]
        with httpx.Client(base_url=srv.url) as c:
            assert c.get(f"/v1/audits/{job_id}", headers={"Authorization": f"Bearer {key}"}).status_code == 200
            # Jobs belong to the key's tenant: another tenant cannot see them.
            assert c.get(f"/v1/audits/{job_id}", headers={"Authorization": f"Bearer {other}"}).status_code == 404
            listed = c.get("/v1/audits", headers={"Authorization": f"Bearer {other}"}).json()["data"]
            assert job_id not in {j["id"] for j in listed}
            assert c.get("/v1/audits", headers={"Authorization": f"Bearer {infer_only}"}).status_code == 403
    finally:
        srv.stop()
        rt.close()


def test_the_console_command_end_to_end(jobs_server, tmp_path, jobs_db):
    """One real `python -m app.cli audit run` process (not a TTY: plain lines), per database."""
    cfg = _config(tmp_path, {"kind": "epsilon", "config": {"operation": "convert", "sigma": 1.0, "delta": 1e-5}})
    junit = tmp_path / "junit.xml"
    p = subprocess.run(
        [sys.executable, "-m", "app.cli", "audit", "run", "--server", jobs_server.url, "--config", cfg,
         "--claimed-epsilon", "4", "--wait", "--junit", str(junit), "--run-id", str(time.time_ns())],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert p.returncode == EXIT_VIOLATION, p.stdout + p.stderr  # exact epsilon 4.377 > 4
    assert p.stdout.splitlines()[0].startswith(f"{jobs_server.url}/v1/audits/job_")
    assert "VIOLATION: measured epsilon 4.37718 > claimed epsilon 4" in p.stdout + p.stderr
    assert _junit(junit)[0].get("failures") == "1"



def test_status_and_cancel_commands(jobs_server):
    with httpx.Client(base_url=jobs_server.url) as c:
        job = c.post("/v1/audits", json={"kind": "sleep", "config": {"steps": 200, "step_seconds": 0.05}}).json()
    runner = CliRunner()
    st = runner.invoke(cli, ["audit", "status", job["id"], "--server", jobs_server.url])
    assert st.exit_code == 0 and json.loads(st.stdout)["id"] == job["id"]
    cancel = runner.invoke(cli, ["audit", "cancel", job["id"], "--server", jobs_server.url])
    assert cancel.exit_code == 0 and cancel.stdout.split()[0] in ("cancelled", "running")
    missing = runner.invoke(cli, ["audit", "status", "job_missing", "--server", jobs_server.url])
    assert missing.exit_code == EXIT_ERROR and "HTTP 404" in missing.output
