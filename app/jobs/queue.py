"""What a queued job waits for: its place in the queue and the job slots it waits on (issue 28).

Runners take queued jobs in the fair order (``app.jobs.fair``: tenants take turns, a tenant with
running jobs yields to one with fewer, within a tenant oldest first; ``repository.claim_next``, which a
procrastinate worker's task runs too), so a job's position is its place in that order: the place in
which the runners take it if no job finishes and none is submitted meanwhile (a finished job moves its
tenant's queued jobs forward; a newcomer tenant's job goes before a busy tenant's backlog). A job
leaves the queue when a runner has a free slot:
``DPICL_JOB_CONCURRENCY`` slots per server (in-process runner) or per ``dpicl worker``. The slots
of workers are not known to the server, so in PostgreSQL mode only the running jobs are counted.

Other tenants' jobs are counted, never named: a queued job lists the caller's own running jobs
(id and kind) and says how many running jobs belong to others.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.jobs import fair
from app.store.job_tables import AuditJob

# Own running jobs named in ``waiting_for`` (the list in ``running_jobs`` is complete).
_NAMED = 4


@dataclass
class QueueView:
    """The queue as one query saw it: queued job ids in the fair order, and the running jobs."""

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
    return QueueView(queued=fair.ordered(s), running=_running(s))


def queue_of(s: Session, job: AuditJob, slots: int | None) -> dict[str, Any]:
    """The ``queue`` object of one queued job (counts, not the whole queue)."""
    position, queued = fair.place(s, job)
    if position is None:  # taken (or cancelled) since the caller read it: it was next
        position, queued = 1, queued + 1
    return describe(position, queued, _running(s), job.tenant_id, slots)


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
