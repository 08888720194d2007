"""The fair claim (app/jobs/fair.py): tenants take turns at the job slots, on SQLite and PostgreSQL,
with the in-process runner's claim, with a real `dpicl worker` (procrastinate), and the queue position
that the API shows follows the order the runners take."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest
from sqlalchemy import update

from app.jobs import fair
from app.jobs import repository as repo
from app.store import Database
from app.store.job_tables import AuditJob
from tests.conftest import DB_KINDS, full_key, running_app
from tests.jobs.conftest import Proc, claim_concurrently, fast_env, job_settings, wait_for


@pytest.fixture(scope="module")
def db(jobs_db):
    d = Database(jobs_db)
    yield d
    d.dispose()


_RUN = {"suffix": ""}


@pytest.fixture
def q(db):
    """The module's database with an empty queue and tenants of this test's own (a tenant's last start
    counts in the order)."""
    _RUN["suffix"] = "-" + uuid.uuid4().hex[:8]
    with db.session() as s:
        s.execute(update(AuditJob).where(AuditJob.status.in_(["queued", "running"])).values(status="failed"))
        s.commit()
    return db


def _new(db, tenant: str, kind: str = "sleep", enqueue=None) -> str:
    with db.session() as s:
        job, created = repo.create_job(s, kind=kind, config={"steps": 1}, claimed_epsilon=None, claimed_delta=None,
                                       webhook_url=None, idempotency_key=None, request_hash="h", max_attempts=2,
                                       tenant_id=tenant + _RUN["suffix"], enqueue=enqueue)
    assert created
    return job.id


def _claim(db, worker="w", kinds=None, on_claim=None):
    with db.session() as s:
        return repo.claim_next(s, worker, kinds, on_claim=on_claim)


def _finish(db, job_id, worker="w"):
    with db.session() as s:
        assert repo.finish(s, job_id, worker, "succeeded", result={})


def _drain(db) -> list[str]:
    out = []
    for _ in range(1000):
        job_id = _claim(db)
        if job_id is None:
            return out
        out.append(job_id)
    raise AssertionError("the queue did not drain")


def test_a_newcomer_is_taken_within_one_claim_per_other_waiting_tenant(q):
    db = q
    a = [_new(db, "ta") for _ in range(12)]  # a backlog, created first
    c = [_new(db, "tc") for _ in range(3)]
    b = _new(db, "tb")
    order = _drain(db)
    assert order.index(b) < 3, order.index(b)  # oldest first across tenants took it 16th
    # within a tenant, oldest first
    assert [j for j in order if j in a] == a and [j for j in order if j in c] == c
    assert sorted(order) == sorted([*a, *c, b])


def test_a_tenant_with_running_jobs_yields(q):
    db = q
    a = [_new(db, "ta") for _ in range(5)]
    assert _claim(db) == a[0]
    b = _new(db, "tb")  # created after all of ta's
    assert _claim(db) == b  # ta has one running, tb none
    assert _claim(db) == a[1]


def test_one_slot_alternates_between_tenants(q):
    db = q
    """Claims with nothing running (one slot): the tenant served longest ago goes first, so a backlog
    does not win every tie by age."""
    a = [_new(db, "ta") for _ in range(4)]
    b = [_new(db, "tb") for _ in range(2)]
    order = []
    for _ in range(6):
        job_id = _claim(db)
        order.append(job_id)
        _finish(db, job_id)
    assert order == [a[0], b[0], a[1], b[1], a[2], a[3]]


def test_the_kinds_filter_is_honoured(q):
    db = q
    _new(db, "ta")
    other = _new(db, "tb", kind="fail")
    assert _claim(db, kinds=["nothing-of-this-kind"]) is None
    assert _claim(db, kinds=["fail"]) == other
    assert _claim(db, kinds=["fail"]) is None


def test_positions_are_the_order_in_which_jobs_are_claimed(q):
    db = q
    for t, n in (("ta", 6), ("tb", 3), ("tc", 1)):
        for _ in range(n):
            _new(db, t)
    first = _claim(db)  # ta: one running
    d = _new(db, "td")  # a newcomer, last
    with db.session() as s:
        view = fair.ordered(s)
        places = {j: fair.place(s, repo.get_job(s, j, tenant_id=None)) for j in view}
    assert all(places[j] == (i + 1, len(view)) for i, j in enumerate(view)), places
    assert places[d][0] <= 3
    claimed = _drain(db)
    assert claimed == view and first not in claimed
    with db.session() as s:
        assert fair.place(s, repo.get_job(s, d, tenant_id=None)) == (None, 0)


def test_concurrent_claims_over_several_tenants_take_each_job_once(q):
    db = q
    ids = {_new(db, f"t{n % 3}") for n in range(36)}
    claimed = claim_concurrently(db, 6)
    assert set(claimed) == ids
    assert all(len(v) == 1 for v in claimed.values()), {k: v for k, v in claimed.items() if len(v) > 1}


def test_a_message_that_runs_another_job_hands_that_jobs_message_over(q, jobs_db):
    """PostgreSQL: "run job X" took Y (fair order); Y's waiting message becomes X's, so each queued row
    keeps one message and the sweeper finds none missing."""
    db = q
    if not jobs_db.startswith("postgresql"):
        pytest.skip("procrastinate is the PostgreSQL transport")
    import psycopg

    from app.jobs import pg_transport, transport_repo

    pg_transport.ensure_schema(jobs_db)
    enqueue = pg_transport.ProcrastinateTransport.enqueue
    with psycopg.connect(pg_transport.conninfo(jobs_db), autocommit=True) as conn:
        conn.execute("DELETE FROM procrastinate_jobs")
    busy = _new(db, "ta", enqueue=enqueue)
    x = _new(db, "ta", enqueue=enqueue)
    y = _new(db, "tb", enqueue=enqueue)
    with psycopg.connect(pg_transport.conninfo(jobs_db), autocommit=True) as conn:
        # a worker started the messages of `busy` and `x`
        conn.execute("UPDATE procrastinate_jobs SET status = 'doing' WHERE queueing_lock = ANY(%s)",
                     ([pg_transport.LOCK_PREFIX + busy, pg_transport.LOCK_PREFIX + x],))
    assert _claim(db) == busy

    def hand_over(s, taken):
        transport_repo.hand_over(s, pg_transport.LOCK_PREFIX, message_job=x, taken=taken)

    assert _claim(db, on_claim=hand_over) == y  # ta has a running job: tb's goes first
    with psycopg.connect(pg_transport.conninfo(jobs_db)) as conn:
        todo = conn.execute("SELECT queueing_lock, args FROM procrastinate_jobs WHERE status = 'todo'").fetchall()
    assert todo == [(pg_transport.LOCK_PREFIX + x, {"job_id": x})]
    with db.session() as s:
        assert transport_repo.queued_without_transport(s, pg_transport.LOCK_PREFIX, older_than=0,
                                                       worker_alive_seconds=60) == []


def test_queue_position_in_the_api_is_the_order_the_runner_takes(fresh_database_url):
    """A real server, one slot, two tenants: the newcomer's job says position 1 behind a backlog and
    runs next."""
    settings = job_settings(fresh_database_url, auth_mode="required", job_concurrency=1)
    ka, kb = full_key(settings, "fa"), full_key(settings, "fb")
    with running_app(settings, timeout=30) as c:
        ha, hb = ({"Authorization": f"Bearer {k}"} for k in (ka, kb))

        def post(h, config):
            r = c.post("/v1/audits", json={"kind": "sleep", "config": config}, headers=h)
            assert r.status_code == 202, r.text
            return r.json()["id"]

        blocker = post(ha, {"steps": 60, "step_seconds": 0.05})
        wait_for(lambda: c.get(f"/v1/audits/{blocker}", headers=ha).json()["status"] == "running", 30, "blocker")
        backlog = [post(ha, {"steps": 1}) for _ in range(4)]
        newcomer = post(hb, {"steps": 1})
        q = c.get(f"/v1/audits/{newcomer}", headers=hb).json()["queue"]
        assert (q["position"], q["queued"]) == (1, 5), q  # created last, taken first
        assert [c.get(f"/v1/audits/{j}", headers=ha).json()["queue"]["position"] for j in backlog] == [2, 3, 4, 5]
        listed = {j["id"]: j["queue"]["position"] for j in c.get("/v1/audits", headers=ha).json()["data"]
                  if j["status"] == "queued"}
        assert listed == dict(zip(backlog, [2, 3, 4, 5]))
        done = {j: wait_job_h(c, j, h) for j, h in [(newcomer, hb), *((j, ha) for j in backlog)]}
        starts = sorted(done, key=lambda j: done[j]["started_at"])
        assert starts == [newcomer, *backlog], starts


def wait_job_h(c: httpx.Client, job_id: str, headers: dict) -> dict:
    def check():
        j = c.get(f"/v1/audits/{job_id}", headers=headers).json()
        return j if j["status"] in ("succeeded", "failed", "cancelled") else None

    return wait_for(check, 60, f"job {job_id}")


@pytest.mark.skipif("postgres" not in DB_KINDS, reason="PostgreSQL skipped (DPICL_TEST_SKIP_POSTGRES=1)")
def test_a_procrastinate_worker_takes_a_newcomer_at_its_fair_turn(pg_databases, tmp_path):
    """A real `dpicl worker -c 1`: a tenant's backlog of six, deferred first, does not hold back another
    tenant's job (oldest first ran it seventh); every job runs once, with one message each."""
    import psycopg

    from app.jobs import pg_transport
    from app.store import migrate

    url = pg_databases.create()
    migrate.upgrade(url)
    pg_transport.ensure_schema(url)
    d = Database(url)
    enqueue = pg_transport.ProcrastinateTransport.enqueue
    try:
        backlog = [_new(d, "pa", enqueue=enqueue) for _ in range(6)]
        newcomer = _new(d, "pb", enqueue=enqueue)
        log = tmp_path / "worker.log"
        w = Proc(["worker", "--name", "fair-w", "-c", "1"], fast_env(url), log)
        try:
            def done():
                with d.session() as s:
                    rows = [repo.get_job(s, j, tenant_id=None) for j in (*backlog, newcomer)]
                return rows if all(r.status == "succeeded" for r in rows) else None

            rows = wait_for(done, 90, "every job to succeed", interval=0.2)
            time.sleep(1.0)  # a sweep after the last job: nothing may be deferred again
        except BaseException:
            print(log.read_text(errors="replace")[-4000:])
            raise
        finally:
            w.stop()
        starts = [r.id for r in sorted(rows, key=lambda r: r.started_at)]
        assert starts.index(newcomer) <= 1, starts
        assert [j for j in starts if j != newcomer] == backlog
        assert all(r.attempts == 1 for r in rows)
        with psycopg.connect(pg_transport.conninfo(url)) as conn:
            left = conn.execute("SELECT count(*) FILTER (WHERE status = 'todo'), count(*) FROM procrastinate_jobs"
                                ).fetchone()
        assert left == (0, 7), left  # one message per job: none deferred again, none left waiting
    finally:
        d.dispose()
