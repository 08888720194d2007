"""Fixtures of the job tests: fast job settings, a live server per database, real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import (
    DB_KINDS,
    LiveServer,
    free_port,
    make_database_url,
    server_settings,
)

ROOT = Path(__file__).resolve().parents[2]
WEBHOOK_SECRET = "jobs-test-webhook-secret-0123"
TERMINAL = ("succeeded", "failed", "cancelled")

# Short heartbeats and stall timeouts so that crash recovery takes seconds.
FAST = dict(
    load_models=False,
    job_test_kinds=True,
    job_heartbeat_seconds=0.2,
    job_stall_seconds=2.0,
    job_poll_seconds=0.1,
    job_concurrency=2,
    webhook_secret=WEBHOOK_SECRET,
    webhook_backoff_seconds=0.2,
    webhook_timeout_seconds=3.0,
    # The receivers of these tests listen on loopback, which the default egress policy refuses.
    webhook_allowed_networks=["127.0.0.0/8"],
    auth_mode="open",
)


def claim_concurrently(db, workers: int = 6) -> dict[str, list[str]]:
    """``workers`` threads released at once, each calling ``repository.claim_next`` until the queue is
    empty: job id -> the workers that claimed it (each job must appear once, with one worker)."""
    import threading

    from app.jobs import repository as repo

    claimed: dict[str, list[str]] = {}
    lock = threading.Lock()
    barrier = threading.Barrier(workers)

    def worker(n: int) -> None:
        barrier.wait()
        while True:
            with db.session() as s:
                job_id = repo.claim_next(s, f"w{n}")
            if job_id is None:
                return
            with lock:
                claimed.setdefault(job_id, []).append(f"w{n}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return claimed


def job_settings(database_url: str, **overrides):
    return server_settings(database_url, **{**FAST, "job_runner": "inprocess", **overrides})


def fast_env(database_url: str, **extra: Any) -> dict[str, str]:
    """Environment of a `dpicl serve` / `dpicl worker` subprocess with the fast job settings."""
    env = dict(os.environ)
    env.update(
        DPICL_DATABASE_URL=database_url,
        DPICL_LOAD_MODELS="false",
        DPICL_JOB_TEST_KINDS="true",
        DPICL_JOB_HEARTBEAT_SECONDS="0.2",
        DPICL_JOB_STALL_SECONDS="2.0",
        DPICL_JOB_POLL_SECONDS="0.1",
        DPICL_AUTH_MODE="open",
        DPICL_LOG_LEVEL="info",
        PYTHONUNBUFFERED="1",
    )
    env.update({k: str(v) for k, v in extra.items()})
    return env


class Proc:
    """A real `dpicl ...` process; output goes to a log file (read on failure)."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self._fh = open(log, "ab")
        self.p = subprocess.Popen([sys.executable, "-m", "app.cli", *args], cwd=ROOT, env=env,
                                  stdout=self._fh, stderr=subprocess.STDOUT)

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def kill9(self) -> None:
        if self.p.poll() is None:
            os.kill(self.p.pid, signal.SIGKILL)
        self.p.wait(timeout=10)

    def stop(self, timeout: float = 15) -> None:
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill9()
        self._fh.close()


def start_server(env: dict[str, str], log: Path, port: int | None = None, timeout: float = 60) -> tuple[Proc, str]:
    port = port or free_port()
    proc = Proc(["serve", "--port", str(port)], env, log)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.p.poll() is None, f"dpicl serve exited:\n{proc.output()}"
        try:
            if httpx.get(f"{url}/v1/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    proc.stop()
    raise AssertionError(f"dpicl serve did not become healthy:\n{proc.output()}")


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")


def wait_job(client: httpx.Client, job_id: str, timeout: float = 30, statuses=TERMINAL) -> dict:
    def check():
        j = client.get(f"/v1/audits/{job_id}").json()
        return j if j["status"] in statuses else None

    return wait_for(check, timeout, f"job {job_id} to reach {statuses}")


def submit(client: httpx.Client, kind: str = "sleep", config: dict | None = None, **extra) -> dict:
    headers = extra.pop("headers", None)
    r = client.post("/v1/audits", json={"kind": kind, "config": config or {}, **extra}, headers=headers)
    assert r.status_code == 202, r.text
    return r.json()


@pytest.fixture(scope="module", params=DB_KINDS)
def jobs_db(request, tmp_path_factory, pg_databases) -> str:
    """A migrated database of each kind, private to the test module."""
    from app.store import migrate

    url = make_database_url(request.param, tmp_path_factory, pg_databases)
    migrate.upgrade(url)
    return url


@pytest.fixture(scope="module")
def jobs_server(jobs_db):
    """A live server (in-thread uvicorn) whose in-process runner runs the jobs."""
    from app.api.main import create_app
    from app.runtime import Runtime

    settings = job_settings(jobs_db)
    rt = Runtime.create(settings)
    srv = LiveServer(create_app(settings, runtime=rt), free_port())
    srv.start()
    srv.runtime = rt
    yield srv
    srv.stop()
    rt.close()


@pytest.fixture
def client(jobs_server):
    with httpx.Client(base_url=jobs_server.url, timeout=30) as c:
        yield c
        # Leave no running job behind for the next test.
        for status in ("running", "queued"):
            for j in c.get("/v1/audits", params={"status": status, "limit": 100}).json()["data"]:
                c.post(f"/v1/audits/{j['id']}/cancel")
