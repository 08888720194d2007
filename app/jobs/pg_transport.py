"""PostgreSQL mode: procrastinate carries "run job X" to ``dpicl worker`` processes.

procrastinate is the transport only: the API defers ``dpicl.run_audit_job(job_id)``
in the transaction that inserts the row (procrastinate's own defer function,
queueing lock ``audit:<id>``: at most one waiting per job), so a row never exists
without its message; a worker runs the task, which claims the **next job in the fair
order** (``app.jobs.fair``: tenants take turns; ``repository.claim_next``, as the in-process
runner does) and executes it through the same executor. The messages are interchangeable
turns, one per queued row: "run job X" may run job Y, the first in the fair order; then, in
the claim's transaction, Y's waiting message becomes X's (``transport_repo.hand_over``), so
every queued row still has its message and the sweeper below sees nothing missing. A message
that finds no queued job (a cancelled job's) is skipped. The row keeps the state, the
heartbeat and the attempts, so both modes behave alike.

A maintenance loop (in every worker, and in the server) reaps stalled rows,
defers a procrastinate job for every queued row that has none waiting (a job the
reaper queued again, a job a stopping worker handed back, a row written by a
server in another runner mode), closes procrastinate jobs left ``doing`` by dead
workers, and delivers due webhooks.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import make_url

from app.jobs import registry, webhooks
from app.jobs import repository as repo
from app.jobs import transport_repo
from app.jobs.executor import execute_job, new_worker_id
from app.jobs.runner import maintenance_interval

if TYPE_CHECKING:
    import procrastinate

    from app.runtime import Runtime

log = logging.getLogger("dpicl.jobs.pg")

TASK_NAME = "dpicl.run_audit_job"
QUEUE = "audits"
LOCK_PREFIX = "audit:"
# Any fixed 64-bit number: serialises concurrent schema set-ups of several processes.
_SCHEMA_LOCK_KEY = 4_711_402_026


def conninfo(database_url: str) -> str:
    """libpq URI of a SQLAlchemy PostgreSQL URL (drops the ``+psycopg`` driver suffix)."""
    return make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)


def ensure_schema(database_url: str) -> bool:
    """Create procrastinate's tables once (idempotent, safe with concurrent callers). True if created."""
    import psycopg
    from procrastinate.schema import SchemaManager

    with psycopg.connect(conninfo(database_url), autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_SCHEMA_LOCK_KEY,))
        try:
            exists = conn.execute("SELECT to_regclass('procrastinate_jobs') IS NOT NULL").fetchone()[0]
            if exists:
                return False
            with conn.transaction():
                conn.execute(SchemaManager.get_schema())
            log.info("procrastinate schema created")
            return True
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_SCHEMA_LOCK_KEY,))


@dataclass
class WorkerState:
    """Handed to the task through procrastinate's ``additional_context``."""

    runtime: Runtime
    worker_id: str
    stopping: threading.Event = field(default_factory=threading.Event)


def _run_audit_job(context: Any, job_id: str) -> str:
    """Run the next queued job in the fair order (``job_id``'s own or another tenant's)."""
    state: WorkerState = context.additional_context["dpicl"]

    def hand_over(s, taken: str) -> None:
        transport_repo.hand_over(s, LOCK_PREFIX, message_job=job_id, taken=taken)

    with state.runtime.db.session() as s:
        taken = repo.claim_next(s, state.worker_id, on_claim=hand_over)
    if taken is None:
        return "skipped: no queued job (its own was taken, cancelled or finished)"
    return execute_job(
        state.runtime,
        taken,
        state.worker_id,
        should_stop=lambda: state.stopping.is_set() or context.should_abort(),
    )


def build_app(database_url: str, *, max_pool: int = 4) -> procrastinate.App:
    import procrastinate

    connector = procrastinate.PsycopgConnector(conninfo=conninfo(database_url), min_size=1, max_size=max_pool)
    app = procrastinate.App(connector=connector)
    # No procrastinate-level retries: the row's attempts decide (the reaper re-defers).
    app.task(name=TASK_NAME, queue=QUEUE, pass_context=True)(_run_audit_job)
    return app


async def defer(app: procrastinate.App, job_id: str) -> bool:
    """Queue "run job X"; False when one is already waiting for it."""
    from procrastinate.exceptions import AlreadyEnqueued

    try:
        await app.tasks[TASK_NAME].configure(queueing_lock=LOCK_PREFIX + job_id).defer_async(job_id=job_id)
        return True
    except AlreadyEnqueued:
        return False


async def maintenance_once(app: procrastinate.App, runtime: Runtime) -> None:
    settings = runtime.settings

    def reap_and_sweep() -> tuple[repo.ReapReport, list[str]]:
        with runtime.db.session() as s:
            report = repo.reap_stalled(s, settings.job_stall_seconds)
        with runtime.db.session() as s:
            orphans = transport_repo.queued_without_transport(
                s, LOCK_PREFIX, older_than=1.0, worker_alive_seconds=settings.job_stall_seconds
            )
        return report, orphans

    report, orphans = await asyncio.to_thread(reap_and_sweep)
    if report:
        log.warning("reaper: requeued %s, failed %s, cancelled %s", report.requeued, report.failed, report.cancelled)
    for job_id in orphans:
        if await defer(app, job_id):
            log.info("deferred queued job %s (it had no procrastinate job waiting)", job_id)
    from procrastinate.jobs import Status

    for pjob in await app.job_manager.get_stalled_jobs(
        task_name=TASK_NAME, seconds_since_heartbeat=settings.job_stall_seconds
    ):
        # The row was (or will be) reaped and re-deferred; close the dead worker's procrastinate job
        # (another runner's maintenance may have closed it a moment ago).
        try:
            await app.job_manager.finish_job(pjob, status=Status.FAILED, delete_job=False)
        except Exception as exc:
            log.debug("stalled procrastinate job %s already closed (%s)", pjob.id, exc)


async def maintenance_loop(app: procrastinate.App, runtime: Runtime, stop: asyncio.Event) -> None:
    interval = maintenance_interval(runtime.settings)
    while not stop.is_set():
        try:
            await maintenance_once(app, runtime)
        except Exception:
            log.exception("job maintenance error (retrying)")
        try:
            await asyncio.wait_for(stop.wait(), timeout=interval)
        except TimeoutError:
            pass


async def webhook_loop(runtime: Runtime, stop: asyncio.Event, wake: asyncio.Event | None = None) -> None:
    wake = wake or asyncio.Event()
    while not stop.is_set():
        try:
            await asyncio.to_thread(webhooks.deliver_due, runtime)
        except Exception:
            log.exception("webhook delivery error (retrying)")
        try:
            await asyncio.wait_for(wake.wait(), timeout=min(runtime.settings.job_poll_seconds, 1.0))
        except TimeoutError:
            pass
        wake.clear()


class ProcrastinateTransport:
    """The server side in PostgreSQL mode: defers on submit, runs maintenance; executes nothing."""

    name = "procrastinate"

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.app = build_app(runtime.settings.database_url)
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task] = []

    async def start(self) -> None:
        await asyncio.to_thread(ensure_schema, self.runtime.settings.database_url)
        await self.app.open_async()
        self._tasks = [
            asyncio.create_task(maintenance_loop(self.app, self.runtime, self._stop), name="dpicl-jobs-maintenance"),
            asyncio.create_task(webhook_loop(self.runtime, self._stop), name="dpicl-jobs-webhooks"),
        ]
        log.info("procrastinate transport ready (jobs run in `dpicl worker` processes)")

    @staticmethod
    def enqueue(session, job_id: str) -> None:
        """Given to ``repo.create_job``: the row and its procrastinate job commit in one transaction."""
        transport_repo.enqueue_procrastinate(session, job_id, queue=QUEUE, task_name=TASK_NAME, lock_prefix=LOCK_PREFIX)

    async def stop(self) -> None:
        self._stop.set()
        for t in self._tasks:
            try:
                await asyncio.wait_for(t, timeout=15)
            except (TimeoutError, asyncio.CancelledError):
                t.cancel()
        await self.app.close_async()

    def notify(self) -> None:
        pass

    def cancel_local(self, job_id: str) -> None:
        pass

    def status(self) -> dict:
        return {"runner": self.name}


async def run_worker(runtime: Runtime, *, concurrency: int, name: str | None = None) -> None:
    """``dpicl worker``: one procrastinate worker (``concurrency`` jobs at a time in threads) plus
    maintenance. Models were loaded by the caller, once, in this process. SIGINT/SIGTERM stop it:
    running jobs stop at their next progress point and go back to the queue."""
    settings = runtime.settings
    await asyncio.to_thread(ensure_schema, settings.database_url)
    registry.all_kinds()  # import every kind before the first job
    state = WorkerState(runtime=runtime, worker_id=name or new_worker_id("worker"))
    app = build_app(settings.database_url, max_pool=concurrency + 4)
    stop = asyncio.Event()
    async with app.open_async():
        side = [
            asyncio.create_task(maintenance_loop(app, runtime, stop), name="dpicl-jobs-maintenance"),
            asyncio.create_task(webhook_loop(runtime, stop), name="dpicl-jobs-webhooks"),
        ]
        log.info("worker %s ready (concurrency %d)", state.worker_id, concurrency)
        try:
            await app.run_worker_async(
                queues=[QUEUE],
                name=state.worker_id,
                concurrency=concurrency,
                additional_context={"dpicl": state},
                fetch_job_polling_interval=settings.job_poll_seconds,
                abort_job_polling_interval=settings.job_poll_seconds,
                update_heartbeat_interval=settings.job_heartbeat_seconds,
                stalled_worker_timeout=settings.job_stall_seconds,
                shutdown_graceful_timeout=0,
                install_signal_handlers=True,
            )
        finally:
            state.stopping.set()
            stop.set()
            await asyncio.gather(*side, return_exceptions=True)
    log.info("worker %s stopped", state.worker_id)
