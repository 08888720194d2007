"""What a queued job waits for: its place in the queue and the job slots it waits on (issue 28).

Runners take queued jobs oldest first (``repository.claim_next``; procrastinate workers in the
order their tasks were deferred, which is the same order), so a job's position is the number of
queued jobs created before it, plus one. A job leaves the queue when a runner has a free slot:
``DPICL_JOB_CONCURRENCY`` slots per server (in-process runner) or per ``dpicl worker``. The slots
of workers are not known to the server, so in PostgreSQL mode only the running jobs are counted.

Other tenants' jobs are counted, never named: a queued job lists the caller's own running jobs
(id and kind) and says how many running jobs belong to others.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session

from app.store.job_tables import AuditJob

# Own running jobs named in ``waiting_for`` (the list in ``running_jobs`` is complete).
_NAMED = 4


@dataclass
class QueueView:
    """The queue as one query saw it: queued job ids oldest first, and the running jobs."""

    queued: list[str]
    running: list[tuple[str, str, str]] = field(default_factory=list)  # (id, kind, tenant id), oldest first

    def position(self, job_id: str) -> int | None:
        try:
            return self.queued.index(job_id) + 1
        except ValueError:
            return None


def _running(s: Session) -> list[tuple[str, str, str]]:
    rows = s.execute(select(AuditJob.id, AuditJob.kind, AuditJob.tenant_id)
                     .where(AuditJob.status == "running").order_by(AuditJob.started_at, AuditJob.id))
    return [(r[0], r[1], r[2]) for r in rows]


def load_view(s: Session) -> QueueView:
    """Every queued id in the runners' order and every running job: for a page listing many jobs."""
    queued = list(s.scalars(select(AuditJob.id).where(AuditJob.status == "queued")
                            .order_by(AuditJob.created_at, AuditJob.id)))
    return QueueView(queued=queued, running=_running(s))


def queue_of(s: Session, job: AuditJob, slots: int | None) -> dict[str, Any]:
    """The ``queue`` object of one queued job (counts, not the whole queue)."""
    ahead = s.scalar(select(func.count()).select_from(AuditJob).where(
        AuditJob.status == "queued",
        or_(AuditJob.created_at < job.created_at, and_(AuditJob.created_at == job.created_at, AuditJob.id < job.id))))
    queued = s.scalar(select(func.count()).select_from(AuditJob).where(AuditJob.status == "queued"))
    return describe(int(ahead or 0) + 1, max(int(queued or 0), int(ahead or 0) + 1), _running(s), job.tenant_id, slots)


def describe(position: int, queued: int, running: list[tuple[str, str, str]], tenant_id: str,
             slots: int | None) -> dict[str, Any]:
    """``position`` of ``queued``; ``running``: (id, kind, tenant id) of the running jobs; ``slots``:
    the jobs this server's runner takes at a time, or None where workers run the jobs."""
    own = [{"id": i, "kind": k} for i, k, t in running if t == tenant_id]
    others = len(running) - len(own)
    names = [f"{j['id']} ({j['kind']})" for j in own[:_NAMED]]
    if len(own) > _NAMED:
        names.append(f"{len(own) - _NAMED} more of yours")
    if others:
        names.append(f"{others} job(s) of other tenants")
    busy = ", ".join(names)
    if slots is not None:
        taken = min(len(running), slots)
        state = (f"all {slots} job slot(s) busy" if len(running) >= slots else f"{taken} of {slots} job slot(s) busy")
    else:
        state = f"{len(running)} job(s) running on the workers"
    text = f"a free job slot: position {position} of {queued} in the queue; {state}" + (f": {busy}" if busy else "")
    return {"position": position, "ahead": position - 1, "queued": queued, "running": len(running), "slots": slots,
            "running_jobs": own, "waiting_for": text}
