"""The SQL of the job system's state machine (webhook delivery: ``webhook_repo``; the procrastinate
transport: ``transport_repo``). The ``audit_jobs`` row is the source of truth.

State machine of a row::

    queued --claim--> running --finish--> succeeded | failed | cancelled
      ^                  |
      +---- release -----+   (worker shutting down: the attempt does not count)
      +---- reap --------+   (no heartbeat for job_stall_seconds, attempts remain)
    queued --cancel--> cancelled
    running --reap--> failed (attempts used up) | cancelled (cancel was requested)

Every transition is one conditional UPDATE (``WHERE status = ...`` plus the
owning worker where it matters), so two runners never both win: on SQLite the
single writer serialises them, on PostgreSQL the claim of the next job uses
``FOR UPDATE SKIP LOCKED`` so concurrent workers take different rows without
waiting on each other. The next job is the first of the fair order (``app.jobs.fair``:
tenants take turns; within a tenant, oldest first). Times are the runners' UTC clocks (keep them in sync,
e.g. NTP; the stall timeout is much larger than any sane skew).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, case, delete, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, defer

from app.jobs import fair
from app.store.base import DEFAULT_TENANT, new_id, utcnow
from app.store.job_tables import AuditJob, JobArtifact

# A claim reads this many candidates of the fair order, and reads it again at most this often.
_CANDIDATES = 8
_CLAIM_ROUNDS = 5

STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")
TERMINAL = frozenset({"succeeded", "failed", "cancelled"})


class QueueFull(Exception):
    """The tenant already has ``limit`` queued jobs: a new one is refused (admission control)."""

    def __init__(self, queued: int, limit: int) -> None:
        super().__init__(f"{queued} jobs queued")
        self.queued = queued
        self.limit = limit


class IdempotencyConflict(Exception):
    """The idempotency key was used before with a different request body."""

    def __init__(self, job_id: str) -> None:
        super().__init__(job_id)
        self.job_id = job_id


@dataclass
class HeartbeatState:
    owned: bool
    cancel_requested: bool = False


@dataclass
class ReapReport:
    requeued: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.requeued or self.failed or self.cancelled)


def _is_pg(s: Session) -> bool:
    return s.get_bind().dialect.name == "postgresql"


# ---------------------------------------------------------------- create / read


def create_job(
    s: Session,
    *,
    kind: str,
    config: dict[str, Any],
    claimed_epsilon: float | None,
    claimed_delta: float | None,
    webhook_url: str | None,
    idempotency_key: str | None,
    request_hash: str,
    max_attempts: int,
    tenant_id: str = DEFAULT_TENANT,
    enqueue: Callable[[Session, str], None] | None = None,
    max_queued: int | None = None,
) -> tuple[AuditJob, bool]:
    """Insert a queued job and commit. Returns ``(job, created)``; with a known
    idempotency key and the same body hash, the existing job and False.
    ``enqueue(session, job_id)`` runs in the same transaction (the procrastinate
    transport: the row and its "run job X" message commit together, or neither)."""

    def existing() -> AuditJob | None:
        if idempotency_key is None:
            return None
        job = s.scalar(
            select(AuditJob).where(AuditJob.tenant_id == tenant_id, AuditJob.idempotency_key == idempotency_key)
        )
        if job is not None and job.request_hash != request_hash:
            raise IdempotencyConflict(job.id)
        return job

    # Optimistic: insert first (a new key is the common case); on a unique-key clash, read the winner.
    job = AuditJob(
        id=new_id("job"),
        tenant_id=tenant_id,
        kind=kind,
        config=config,
        status="queued",
        progress=0.0,
        claimed_epsilon=claimed_epsilon,
        claimed_delta=claimed_delta,
        webhook_url=webhook_url,
        idempotency_key=idempotency_key,
        request_hash=request_hash,
        attempts=0,
        max_attempts=max_attempts,
        cancel_requested=False,
        webhook_attempts=0,
        created_at=utcnow(),
    )
    s.add(job)
    try:
        s.flush()
    except IntegrityError:
        s.rollback()
        found = existing()
        if found is None:
            raise
        return found, False
    if max_queued is not None:
        # Counted after the insert, in its transaction: a replayed key (above) is never refused; under
        # concurrent submissions the cap is approximate (each sees its own row, maybe not the others').
        queued = s.scalar(select(func.count()).select_from(AuditJob).where(
            AuditJob.tenant_id == tenant_id, AuditJob.status == "queued"))
        if queued > max_queued:
            s.rollback()
            raise QueueFull(queued - 1, max_queued)
    if enqueue is not None:
        enqueue(s, job.id)
    s.commit()
    return job, True


def get_job(s: Session, job_id: str, tenant_id: str | None = DEFAULT_TENANT) -> AuditJob | None:
    q = select(AuditJob).where(AuditJob.id == job_id)
    if tenant_id is not None:
        q = q.where(AuditJob.tenant_id == tenant_id)
    return s.scalar(q)


def list_jobs(
    s: Session,
    *,
    tenant_id: str = DEFAULT_TENANT,
    kind: str | None = None,
    status: str | None = None,
    limit: int = 20,
    after: str | None = None,
    with_config: bool = True,
) -> tuple[list[AuditJob], bool]:
    """Newest first; ``after`` is the id of the last job of the previous page; ``with_config=False`` does not
    load the config column (a page of 100 megabyte configs would be read for nothing)."""
    q = select(AuditJob).where(AuditJob.tenant_id == tenant_id)
    if not with_config:
        q = q.options(defer(AuditJob.config, raiseload=True))
    if kind is not None:
        q = q.where(AuditJob.kind == kind)
    if status is not None:
        q = q.where(AuditJob.status == status)
    if after is not None:
        cursor = s.execute(
            select(AuditJob.created_at, AuditJob.id).where(AuditJob.id == after, AuditJob.tenant_id == tenant_id)
        ).first()
        if cursor is None:
            raise KeyError(after)
        q = q.where(
            or_(
                AuditJob.created_at < cursor.created_at,
                and_(AuditJob.created_at == cursor.created_at, AuditJob.id < cursor.id),
            )
        )
    rows = list(s.scalars(q.order_by(AuditJob.created_at.desc(), AuditJob.id.desc()).limit(limit + 1)))
    return rows[:limit], len(rows) > limit


# ---------------------------------------------------------------- artifacts


def artifact_index(s: Session, job_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """Name, media type and size of each job's artifacts (without loading their bytes)."""
    out: dict[str, list[dict[str, Any]]] = {j: [] for j in job_ids}
    if not job_ids:
        return out
    rows = s.execute(
        select(JobArtifact.job_id, JobArtifact.name, JobArtifact.media_type, func.length(JobArtifact.content))
        .where(JobArtifact.job_id.in_(list(job_ids)))
        .order_by(JobArtifact.job_id, JobArtifact.name)
    )
    for job_id, name, media_type, size in rows:
        out[job_id].append({"name": name, "media_type": media_type, "bytes": int(size or 0)})
    return out


def get_artifact(s: Session, job_id: str, name: str) -> JobArtifact | None:
    return s.scalar(select(JobArtifact).where(JobArtifact.job_id == job_id, JobArtifact.name == name))


def _put_artifact(s: Session, job_id: str, name: str, media_type: str, content: bytes) -> None:
    # A retried attempt overwrites what an interrupted one left behind.
    s.execute(delete(JobArtifact).where(JobArtifact.job_id == job_id, JobArtifact.name == name))
    s.add(JobArtifact(job_id=job_id, name=name, media_type=media_type, content=content, created_at=utcnow()))


def put_artifact(s: Session, job_id: str, worker_id: str, name: str, media_type: str, content: bytes) -> bool:
    """Store an artifact for a job this worker runs; False (nothing written) when it no longer owns it."""
    owned = s.scalar(
        select(AuditJob.id).where(AuditJob.id == job_id, AuditJob.worker_id == worker_id, AuditJob.status == "running")
    )
    if owned is None:
        return False
    _put_artifact(s, job_id, name, media_type, content)
    s.commit()
    return True


# ---------------------------------------------------------------- claiming and running


def _claim_values(worker_id: str, now: datetime) -> dict[str, Any]:
    return dict(
        status="running",
        worker_id=worker_id,
        attempts=AuditJob.attempts + 1,
        started_at=now,
        heartbeat_at=now,
        progress=0.0,
        progress_message="started",
    )


def claim(s: Session, job_id: str, worker_id: str) -> bool:
    """Take this very queued job (tests, tools; the runners take the fair next one: ``claim_next``)."""
    now = utcnow()
    res = s.execute(
        update(AuditJob)
        .where(AuditJob.id == job_id, AuditJob.status == "queued")
        .values(**_claim_values(worker_id, now))
        .execution_options(synchronize_session=False)
    )
    s.commit()
    return res.rowcount == 1


def claim_next(
    s: Session, worker_id: str, kinds: Iterable[str] | None = None,
    on_claim: Callable[[Session, str], None] | None = None,
) -> str | None:
    """Take the next queued job (of the given kinds) in the fair order (``app.jobs.fair``: tenants take
    turns); its id, or None when there is none. ``on_claim(session, job_id)`` runs in the claim's
    transaction (the procrastinate transport hands the taken job's message over)."""
    kinds = list(kinds) if kinds is not None else None
    now = utcnow()
    for _ in range(_CLAIM_ROUNDS):
        ids = fair.candidates(s, kinds, _CANDIDATES)
        if not ids:
            s.rollback()
            return None
        if _is_pg(s):
            # The order is read without a lock (no FOR UPDATE beside a window); then the first candidate
            # still queued is locked, skipping those concurrent workers hold.
            rank = case({job_id: n for n, job_id in enumerate(ids)}, value=AuditJob.id)
            got = s.scalar(select(AuditJob.id).where(AuditJob.id.in_(ids), AuditJob.status == "queued")
                           .order_by(rank).limit(1).with_for_update(skip_locked=True))
            taken = [got] if got is not None else []
        else:
            taken = ids  # SQLite: a single writer at a time; the conditional UPDATE decides races
        for job_id in taken:
            res = s.execute(
                update(AuditJob)
                .where(AuditJob.id == job_id, AuditJob.status == "queued")
                .values(**_claim_values(worker_id, now))
                .execution_options(synchronize_session=False)
            )
            if res.rowcount == 1:
                if on_claim is not None:
                    on_claim(s, job_id)
                s.commit()
                return job_id
        s.rollback()  # every candidate was taken meanwhile: read the order again
    return None


def heartbeat(
    s: Session, job_id: str, worker_id: str, *, progress: float | None = None, message: str | None = None
) -> HeartbeatState:
    """Refresh the heartbeat (and progress) of a job this worker runs; tells whether cancel was requested."""
    values: dict[str, Any] = {"heartbeat_at": utcnow()}
    if progress is not None:
        values["progress"] = progress
    if message is not None:
        values["progress_message"] = message[:500]
    row = s.execute(
        update(AuditJob)
        .where(AuditJob.id == job_id, AuditJob.worker_id == worker_id, AuditJob.status == "running")
        .values(**values)
        .returning(AuditJob.cancel_requested)
        .execution_options(synchronize_session=False)
    ).first()
    s.commit()
    if row is None:
        return HeartbeatState(owned=False)
    return HeartbeatState(owned=True, cancel_requested=bool(row[0]))


def finish(
    s: Session,
    job_id: str,
    worker_id: str,
    status: str,
    *,
    result: dict[str, Any] | None = None,
    verdict: str | None = None,
    error: str | None = None,
    error_code: str | None = None,
    progress_message: str | None = None,
    artifacts: Iterable[tuple[str, str, bytes]] = (),
) -> bool:
    """Move a running job this worker owns to a terminal status (with its final artifacts, atomically)."""
    assert status in TERMINAL
    now = utcnow()
    job = get_job(s, job_id, tenant_id=None)
    values: dict[str, Any] = dict(
        status=status,
        finished_at=now,
        heartbeat_at=now,
        result=result,
        verdict=verdict,
        error=error,
        error_code=error_code,
    )
    if status == "succeeded":
        values["progress"] = 1.0
    if progress_message is not None:
        values["progress_message"] = progress_message[:500]
    if job is not None and job.webhook_url:
        values.update(webhook_status="pending", webhook_next_at=now, webhook_attempts=0)
    res = s.execute(
        update(AuditJob)
        .where(AuditJob.id == job_id, AuditJob.worker_id == worker_id, AuditJob.status == "running")
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    if res.rowcount != 1:
        s.rollback()
        return False
    for name, media_type, content in artifacts:
        _put_artifact(s, job_id, name, media_type, content)
    s.commit()
    return True


def release(s: Session, job_id: str, worker_id: str, message: str) -> bool:
    """Hand a running job back to the queue (its worker is stopping); the attempt does not count."""
    res = s.execute(
        update(AuditJob)
        .where(AuditJob.id == job_id, AuditJob.worker_id == worker_id, AuditJob.status == "running")
        .values(
            status="queued",
            worker_id=None,
            heartbeat_at=None,
            progress=0.0,
            progress_message=message[:500],
            attempts=func.max(AuditJob.attempts - 1, 0) if not _is_pg(s) else func.greatest(AuditJob.attempts - 1, 0),
        )
        .execution_options(synchronize_session=False)
    )
    s.commit()
    return res.rowcount == 1


def requeue(s: Session, job_id: str, worker_id: str, message: str) -> bool:
    """Put a running job back in the queue after a transient failure (the attempt counts)."""
    res = s.execute(
        update(AuditJob)
        .where(AuditJob.id == job_id, AuditJob.worker_id == worker_id, AuditJob.status == "running")
        .values(status="queued", worker_id=None, heartbeat_at=None, progress=0.0, progress_message=message[:500])
        .execution_options(synchronize_session=False)
    )
    s.commit()
    return res.rowcount == 1


def request_cancel(s: Session, job_id: str, tenant_id: str = DEFAULT_TENANT) -> AuditJob | None:
    """Cancel a queued job at once; flag a running one (it stops at its next progress point).
    Terminal jobs are left as they are. Returns the job as it is now, or None when unknown."""
    now = utcnow()
    s.execute(
        update(AuditJob)
        .where(AuditJob.id == job_id, AuditJob.tenant_id == tenant_id, AuditJob.status == "queued")
        .values(
            status="cancelled",
            cancel_requested=True,
            finished_at=now,
            progress_message="cancelled before it started",
        )
        .execution_options(synchronize_session=False)
    )
    s.execute(
        update(AuditJob)
        .where(AuditJob.id == job_id, AuditJob.tenant_id == tenant_id, AuditJob.status == "running")
        .values(cancel_requested=True)
        .execution_options(synchronize_session=False)
    )
    s.commit()
    job = get_job(s, job_id, tenant_id)
    if job is not None:
        s.refresh(job)
        if job.status == "cancelled" and job.webhook_url and job.webhook_status is None:
            s.execute(
                update(AuditJob)
                .where(AuditJob.id == job_id, AuditJob.webhook_status.is_(None))
                .values(webhook_status="pending", webhook_next_at=now, webhook_attempts=0)
                .execution_options(synchronize_session=False)
            )
            s.commit()
            s.refresh(job)
    return job


# ---------------------------------------------------------------- the reaper


def reap_stalled(s: Session, stall_seconds: float, *, now: datetime | None = None) -> ReapReport:
    """Running jobs whose heartbeat is older than ``stall_seconds`` lost their worker (killed, out of
    memory, machine gone): queue them again while attempts remain, else fail them with the reason."""
    now = now or utcnow()
    cutoff = now - timedelta(seconds=stall_seconds)
    stale = or_(AuditJob.heartbeat_at.is_(None), AuditJob.heartbeat_at < cutoff)
    report = ReapReport()
    rows = s.execute(
        select(
            AuditJob.id, AuditJob.attempts, AuditJob.max_attempts, AuditJob.cancel_requested, AuditJob.worker_id,
            AuditJob.webhook_url,
        ).where(AuditJob.status == "running", stale)
    ).all()
    s.rollback()
    for job_id, attempts, max_attempts, cancel_requested, worker_id, webhook_url in rows:
        lost = f"its worker ({worker_id or 'unknown'}) stopped sending heartbeats for over {stall_seconds:g} s"
        cond = (AuditJob.id == job_id, AuditJob.status == "running", stale)
        hook = dict(webhook_status="pending", webhook_next_at=now, webhook_attempts=0) if webhook_url else {}
        if cancel_requested:
            values = dict(status="cancelled", finished_at=now, progress_message=f"cancelled; {lost}", **hook)
            bucket = report.cancelled
        elif attempts < max_attempts:
            values = dict(
                status="queued",
                worker_id=None,
                heartbeat_at=None,
                progress=0.0,
                progress_message=f"attempt {attempts} of {max_attempts} was interrupted ({lost}); queued again",
            )
            bucket = report.requeued
        else:
            values = dict(
                status="failed",
                finished_at=now,
                error_code="worker_lost",
                error=(
                    f"The job was interrupted {attempts} time(s) and has no attempts left: {lost} "
                    "(the process was killed, ran out of memory, or its machine went away). "
                    "Check the worker's logs and resources, then resubmit the job; "
                    "DPICL_JOB_MAX_ATTEMPTS raises the number of attempts."
                ),
                **hook,
            )
            bucket = report.failed
        res = s.execute(update(AuditJob).where(*cond).values(**values).execution_options(synchronize_session=False))
        s.commit()
        if res.rowcount == 1:
            bucket.append(job_id)
    return report
