"""A restart loses nothing: real `dpicl serve` / `dpicl worker` processes, killed with SIGKILL mid-job.

Heartbeats every 0.2 s and a 2 s stall timeout keep these to seconds.
"""

from __future__ import annotations

import signal

import httpx
import pytest

from app.jobs import repository as repo
from app.store import Database
from tests.conftest import DB_KINDS
from tests.jobs.conftest import fast_env, start_server, submit, wait_for, wait_job


def _log_tail(log, n: int = 150) -> str:
    lines = [x for x in log.read_text(errors="replace").splitlines() if '" 200 OK' not in x and '" 202 Accepted' not in x]
    return "\n".join(lines[-n:])


def _row(url: str, job_id: str):
    db = Database(url)
    try:
        with db.session() as s:
            return repo.get_job(s, job_id, tenant_id=None)
    finally:
        db.dispose()


def _running_with_progress(c: httpx.Client, job_id: str, attempt: int):
    def check():
        j = c.get(f"/v1/audits/{job_id}").json()
        return j if j["status"] == "running" and j["attempts"] == attempt and j["progress"]["fraction"] > 0 else None

    return wait_for(check, 30, f"job {job_id} running attempt {attempt}")


@pytest.fixture(params=DB_KINDS)
def fresh_url(request, tmp_path_factory, pg_databases):
    from tests.conftest import make_database_url

    return make_database_url(request.param, tmp_path_factory, pg_databases)


def test_killed_server_retries_interrupted_jobs_fails_exhausted_ones_and_runs_the_queue(fresh_url, tmp_path):
    """In-process runner (the embedded mode; on PostgreSQL with DPICL_JOB_RUNNER=inprocess)."""
    from app.store import migrate

    env = fast_env(fresh_url, DPICL_JOB_RUNNER="inprocess", DPICL_JOB_CONCURRENCY=2, DPICL_JOB_MAX_ATTEMPTS=2)
    log = tmp_path / "serve.log"
    # One job allowed a single attempt (written straight to the table: max_attempts is per row).
    migrate.upgrade(fresh_url)
    db = Database(fresh_url)
    with db.session() as s:
        once, _ = repo.create_job(s, kind="sleep", config={"steps": 60, "step_seconds": 0.1}, claimed_epsilon=None,
                                  claimed_delta=None, webhook_url=None, idempotency_key=None, request_hash="x",
                                  max_attempts=1)
    db.dispose()
    procs = []
    try:
        srv, url = start_server(env, log)
        procs.append(srv)
        with httpx.Client(base_url=url, timeout=10) as c:
            twice = submit(c, config={"steps": 12, "step_seconds": 0.1})  # max_attempts 2 (the setting)
            queued = submit(c, config={"steps": 2, "step_seconds": 0.01})
            _running_with_progress(c, once.id, 1)
            _running_with_progress(c, twice["id"], 1)
        srv.kill9()

        # Dead server: the rows say running (nobody left to say otherwise) and the queue waits.
        assert _row(fresh_url, once.id).status == "running"
        assert _row(fresh_url, twice["id"]).status == "running"
        assert _row(fresh_url, queued["id"]).status == "queued"

        srv, url = start_server(env, log)
        procs.append(srv)
        with httpx.Client(base_url=url, timeout=10) as c:
            # Reaped after the stall timeout: retried while attempts remain...
            done = wait_job(c, twice["id"], timeout=40)
            assert done["status"] == "succeeded" and done["attempts"] == 2 and done["result"]["attempt"] == 2
            # ...failed with a reason a user can act on when they are used up...
            failed = wait_job(c, once.id, timeout=30)
            assert failed["status"] == "failed" and failed["attempts"] == 1, failed
            assert failed["error"]["code"] == "worker_lost"
            assert "interrupted 1 time(s)" in failed["error"]["message"]
            assert "DPICL_JOB_MAX_ATTEMPTS" in failed["error"]["message"]
            # ...and the queue runs.
            assert wait_job(c, queued["id"], timeout=30)["status"] == "succeeded"
            assert c.get("/v1/audits", params={"status": "running"}).json()["data"] == []
            assert c.get("/v1/audits", params={"status": "queued"}).json()["data"] == []
    except BaseException:
        print(_log_tail(log))
        raise
    finally:
        for p in procs:
            p.stop()


def _insert_queued(url: str, config: dict) -> str:
    """A queued row with no procrastinate job: what a server killed between commit and defer leaves."""
    db = Database(url)
    try:
        with db.session() as s:
            job, _ = repo.create_job(s, kind="sleep", config=config, claimed_epsilon=None, claimed_delta=None,
                                     webhook_url=None, idempotency_key=None, request_hash="x", max_attempts=2)
        return job.id
    finally:
        db.dispose()


def _wait_row(url: str, job_id: str, timeout: float, pred):
    return wait_for(lambda: (lambda r: r if pred(r) else None)(_row(url, job_id)), timeout, f"row {job_id}")


@pytest.mark.skipif("postgres" not in DB_KINDS, reason="PostgreSQL skipped (DPICL_TEST_SKIP_POSTGRES=1)")
def test_procrastinate_workers_survive_kill_9_of_a_worker_and_the_server(pg_databases, tmp_path):
    from tests.jobs.conftest import Proc

    url = pg_databases.create()
    env = fast_env(url, DPICL_JOB_MAX_ATTEMPTS=2)  # runner auto: procrastinate on PostgreSQL
    log = tmp_path / "procs.log"
    procs: list = []
    try:
        # The server and three workers start side by side, each migrating the empty database
        # (process start-up dominates this test).
        workers = {n: Proc(["worker", "--name", n], env, log) for n in ("w1", "w2", "w3")}
        procs += workers.values()
        srv, base = start_server(env, log)
        procs.append(srv)
        with httpx.Client(base_url=base, timeout=10) as c:
            assert c.get("/v1/health").json()["extras"]["job_runner"] == "procrastinate"
            a = submit(c, config={"steps": 25, "step_seconds": 0.1})["id"]
            b = submit(c, config={"steps": 2, "step_seconds": 0.01})["id"]
            _running_with_progress(c, a, 1)
        victim = _row(url, a).worker_id
        workers.pop(victim).kill9()
        srv.kill9()  # the server is gone for the rest of the test: rows are read from SQL
        assert _row(url, a).status == "running"  # nobody left to say otherwise
        # A queued row without a procrastinate job (a server in another runner mode wrote it).
        c_id = _insert_queued(url, {"steps": 2, "step_seconds": 0.01})

        done = _wait_row(url, a, 60, lambda r: r.status in ("succeeded", "failed"))
        assert done.status == "succeeded" and done.attempts == 2 and done.result["attempt"] == 2
        assert done.worker_id in workers
        for j in (b, c_id):
            assert _wait_row(url, j, 30, lambda r: r.status != "queued" and r.status != "running").status == "succeeded"

        # A graceful stop (SIGTERM) hands the running job back; the other worker finishes it,
        # and the interrupted attempt does not count.
        e = _insert_queued(url, {"steps": 40, "step_seconds": 0.1})
        row = _wait_row(url, e, 30, lambda r: r.status == "running" and r.progress > 0)
        owner = row.worker_id
        workers[owner].p.send_signal(signal.SIGTERM)
        assert workers[owner].p.wait(timeout=30) == 0
        done = _wait_row(url, e, 40, lambda r: r.status in ("succeeded", "failed"))
        assert done.status == "succeeded" and done.attempts == 1
        assert done.worker_id not in (owner, victim)

        # procrastinate's own rows do not stay "doing" for the dead worker.
        import psycopg

        def settled():
            with psycopg.connect(url) as conn:
                return conn.execute("SELECT count(*) FROM procrastinate_jobs WHERE status = 'doing'").fetchone()[0] == 0

        wait_for(settled, 20, "no procrastinate job left doing")
    except BaseException:
        print(_log_tail(log))
        raise
    finally:
        for p in procs:
            p.stop()
