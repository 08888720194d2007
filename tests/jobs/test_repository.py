"""The job row's state machine in SQL, on SQLite and PostgreSQL: claims, heartbeats, the reaper."""

from __future__ import annotations

from datetime import timedelta

import pytest

from sqlalchemy import select

from app.jobs import repository as repo
from app.jobs import webhook_repo
from app.store.job_tables import AuditJob
from app.store import Database
from app.store.base import utcnow
from tests.jobs.conftest import claim_concurrently


@pytest.fixture(scope="module")
def db(jobs_db):
    d = Database(jobs_db)
    yield d
    d.dispose()


def _new(db, **kw) -> str:
    args = dict(kind="sleep", config={}, claimed_epsilon=None, claimed_delta=None, webhook_url=None,
                idempotency_key=None, request_hash="h", max_attempts=2)
    args.update(kw)
    with db.session() as s:
        job, created = repo.create_job(s, **args)
    assert created
    return job.id


def _row(db, job_id):
    with db.session() as s:
        return repo.get_job(s, job_id, tenant_id=None)


def _drain(db):
    """Close whatever earlier tests left queued or running, so each test starts from an empty queue."""
    from sqlalchemy import update

    from app.store.job_tables import AuditJob

    with db.session() as s:
        s.execute(update(AuditJob).where(AuditJob.status.in_(["queued", "running"])).values(status="failed"))
        s.commit()


def test_concurrent_claims_take_each_job_exactly_once(db):
    _drain(db)
    ids = {_new(db) for _ in range(30)}
    claimed = claim_concurrently(db, 6)
    assert set(claimed) == ids
    assert all(len(v) == 1 for v in claimed.values()), {k: v for k, v in claimed.items() if len(v) > 1}
    for job_id, (w,) in claimed.items():
        row = _row(db, job_id)
        assert (row.status, row.worker_id, row.attempts) == ("running", w, 1)
        assert row.started_at is not None and row.heartbeat_at is not None


def test_claim_by_id_is_conditional(db):
    _drain(db)
    job_id = _new(db)
    with db.session() as s:
        assert repo.claim(s, job_id, "a") is True
    with db.session() as s:
        assert repo.claim(s, job_id, "b") is False
    assert _row(db, job_id).worker_id == "a"


def test_only_the_owner_heartbeats_and_finishes(db):
    _drain(db)
    job_id = _new(db)
    with db.session() as s:
        assert repo.claim(s, job_id, "owner")
    with db.session() as s:
        assert repo.heartbeat(s, job_id, "intruder").owned is False
        st = repo.heartbeat(s, job_id, "owner", progress=0.25, message="a quarter")
    assert st.owned and not st.cancel_requested
    row = _row(db, job_id)
    assert (row.progress, row.progress_message) == (0.25, "a quarter")
    with db.session() as s:
        repo.request_cancel(s, job_id)
        assert repo.heartbeat(s, job_id, "owner").cancel_requested is True
        assert repo.finish(s, job_id, "intruder", "succeeded", result={}) is False
        assert repo.finish(s, job_id, "owner", "cancelled") is True
        assert repo.finish(s, job_id, "owner", "succeeded", result={}) is False  # terminal is final
    assert _row(db, job_id).status == "cancelled"


def test_cancel_queued_is_immediate_and_terminal_jobs_stay(db):
    _drain(db)
    job_id = _new(db)
    with db.session() as s:
        job = repo.request_cancel(s, job_id)
    assert job.status == "cancelled" and job.finished_at is not None
    with db.session() as s:
        assert repo.claim_next(s, "w") is None
        assert repo.request_cancel(s, "job_missing") is None


def test_reaper_requeues_then_fails_with_a_reason(db):
    _drain(db)
    job_id = _new(db, max_attempts=2)
    later = utcnow() + timedelta(seconds=100)
    with db.session() as s:
        assert repo.claim(s, job_id, "dead-1")
        # A fresh heartbeat is not stalled.
        assert not repo.reap_stalled(s, 60)
        report = repo.reap_stalled(s, 60, now=later)
    assert report.requeued == [job_id]
    row = _row(db, job_id)
    assert (row.status, row.worker_id, row.attempts) == ("queued", None, 1)
    assert "interrupted" in row.progress_message
    with db.session() as s:
        assert repo.claim_next(s, "dead-2") == job_id
        report = repo.reap_stalled(s, 60, now=utcnow() + timedelta(seconds=100))
    assert report.failed == [job_id]
    row = _row(db, job_id)
    assert row.status == "failed" and row.error_code == "worker_lost" and row.attempts == 2
    assert "dead-2" in row.error and "no attempts left" in row.error
    # The lost worker's late result is refused.
    with db.session() as s:
        assert repo.finish(s, job_id, "dead-2", "succeeded", result={"x": 1}) is False


def test_reaper_cancels_a_stalled_job_whose_cancel_was_requested(db):
    _drain(db)
    job_id = _new(db)
    with db.session() as s:
        repo.claim(s, job_id, "dead")
        repo.request_cancel(s, job_id)
        report = repo.reap_stalled(s, 1, now=utcnow() + timedelta(seconds=10))
    assert report.cancelled == [job_id]
    assert _row(db, job_id).status == "cancelled"


def test_release_does_not_count_the_attempt(db):
    _drain(db)
    job_id = _new(db)
    with db.session() as s:
        repo.claim(s, job_id, "stopping")
        assert repo.release(s, job_id, "stopping", "worker stopping")
    row = _row(db, job_id)
    assert (row.status, row.attempts, row.worker_id) == ("queued", 0, None)


def test_idempotency_key_returns_the_same_job_or_conflicts(db):
    with db.session() as s:
        a, created_a = repo.create_job(s, kind="sleep", config={}, claimed_epsilon=None, claimed_delta=None,
                                       webhook_url=None, idempotency_key="key-1", request_hash="h1", max_attempts=1)
        b, created_b = repo.create_job(s, kind="sleep", config={}, claimed_epsilon=None, claimed_delta=None,
                                       webhook_url=None, idempotency_key="key-1", request_hash="h1", max_attempts=1)
        assert (created_a, created_b, a.id) == (True, False, b.id)
        with pytest.raises(repo.IdempotencyConflict):
            repo.create_job(s, kind="sleep", config={}, claimed_epsilon=None, claimed_delta=None,
                            webhook_url=None, idempotency_key="key-1", request_hash="h2", max_attempts=1)
        # Keys are per tenant.
        c, created_c = repo.create_job(s, kind="sleep", config={}, claimed_epsilon=None, claimed_delta=None,
                                       webhook_url=None, idempotency_key="key-1", request_hash="h2", max_attempts=1,
                                       tenant_id="other")
        assert created_c and c.id != a.id


def test_webhook_attempt_is_leased_once(db):
    _drain(db)
    job_id = _new(db, webhook_url="http://127.0.0.1:9/hook")
    with db.session() as s:
        repo.claim(s, job_id, "w")
        repo.finish(s, job_id, "w", "succeeded", result={})
    row = _row(db, job_id)
    assert row.webhook_status == "pending" and row.webhook_next_at is not None
    with db.session() as s:
        due = dict(webhook_repo.due_webhooks(s, 100))
        assert due[job_id] == 0
        wins = [webhook_repo.lease_webhook(s, job_id, 0, 30) for _ in range(3)]
    assert wins == [True, False, False]


def test_procrastinate_message_commits_with_the_row_or_not_at_all(db, jobs_db):
    """PostgreSQL: the submit transaction writes the row and procrastinate's job together."""
    if not jobs_db.startswith("postgresql"):
        pytest.skip("procrastinate is the PostgreSQL transport")
    import psycopg

    from app.jobs import pg_transport

    pg_transport.ensure_schema(jobs_db)
    assert pg_transport.ensure_schema(jobs_db) is False  # idempotent

    with db.session() as s:
        job, created = repo.create_job(s, kind="sleep", config={}, claimed_epsilon=None, claimed_delta=None,
                                       webhook_url=None, idempotency_key=None, request_hash="h", max_attempts=1,
                                       enqueue=pg_transport.ProcrastinateTransport.enqueue)
    with psycopg.connect(pg_transport.conninfo(jobs_db)) as conn:
        rows = conn.execute("SELECT task_name, status, args FROM procrastinate_jobs WHERE queueing_lock = %s",
                            (pg_transport.LOCK_PREFIX + job.id,)).fetchall()
    assert rows == [(pg_transport.TASK_NAME, "todo", {"job_id": job.id})]

    def broken(session, job_id):
        pg_transport.ProcrastinateTransport.enqueue(session, job_id)
        raise RuntimeError("crash between the two writes")

    with db.session() as s, pytest.raises(RuntimeError):
        repo.create_job(s, kind="sleep", config={}, claimed_epsilon=None, claimed_delta=None, webhook_url=None,
                        idempotency_key="atomic-1", request_hash="h", max_attempts=1, enqueue=broken)
    with db.session() as s:
        assert s.scalar(select(AuditJob).where(AuditJob.idempotency_key == "atomic-1")) is None
    with psycopg.connect(pg_transport.conninfo(jobs_db)) as conn:
        n = conn.execute("SELECT count(*) FROM procrastinate_jobs").fetchone()[0]
    assert n == 1


def test_progress_writes_are_throttled_and_the_heartbeat_carries_the_latest(db):
    import time
    from types import SimpleNamespace

    from app.jobs.context import JobContext
    from app.jobs.errors import JobCancelled

    _drain(db)
    job_id = _new(db)
    with db.session() as s:
        repo.claim(s, job_id, "w")
    rt = SimpleNamespace(db=db, settings=SimpleNamespace(job_heartbeat_seconds=0.1))
    ctx = JobContext(rt, job_id=job_id, kind="sleep", attempt=1, worker_id="w")
    ctx.start_heartbeat()
    try:
        ctx.progress(0.1, "first")        # written
        ctx.progress(0.5, "second")       # within 0.2 s: kept in memory...
        assert _row(db, job_id).progress == 0.1
        time.sleep(0.4)                   # ...and carried by the heartbeat
        row = _row(db, job_id)
        assert (row.progress, row.progress_message) == (0.5, "second")
        with db.session() as s:
            repo.request_cancel(s, job_id)
        time.sleep(0.3)
        with pytest.raises(JobCancelled):
            ctx.progress(0.6)
    finally:
        ctx.stop_heartbeat()
