"""The fair order of queued jobs: tenants take turns at the job slots (both runner modes).

A runner takes the oldest queued job of the tenant with the fewest running jobs; between tenants with
equally few, the one whose last job started longest ago (a tenant never served first), then the tenant
whose oldest queued job is oldest. So one tenant's long queue no longer delays another tenant's audit:
a newcomer's job is taken at the next free slot unless a tenant with fewer running jobs waits too.

The whole queue, in the order that rule takes it if nothing else changes (no job finishes, none is
submitted), is sorted by the key of :meth:`Tenant.key`::

    (turn, -running, served, first, tenant id)

``turn`` = the tenant's running jobs + the job's rank among its tenant's queued jobs (0 for the oldest);
``running`` = the tenant's running jobs; ``served`` = the tenant's last ``started_at`` (never first);
``first`` = the ``created_at`` of the tenant's oldest queued job. Taking a job keeps the ``turn`` of its
tenant's other jobs (one more running, one fewer ahead) and moves the tenant behind the tenants that
reach the same turn through jobs already running, which ``-running`` and ``served`` say in advance.
``repository.claim_next`` takes the first job of this order; ``queue.py`` shows positions in it.

Cost: one grouped query over the queued and running rows (a hash aggregate, no sort of the queue) with
one index lookup per waiting tenant (``ix_audit_jobs_tenant_started``); the key is a function of the
tenant and the rank, so a claim reads the first few queued ids of the first few tenants
(``ix_audit_jobs_tenant_status_created``) and a position is a count, never the whole queue in Python.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, case, func, or_, select
from sqlalchemy.orm import Session, aliased

from app.store.job_tables import AuditJob


@dataclass(frozen=True)
class Tenant:
    """A tenant with queued jobs: how many, how many running, when it was last served."""

    tenant_id: str
    queued: int
    running: int
    served: datetime | None
    first: datetime

    def key(self, rank: int) -> tuple[Any, ...]:
        """The sort key of this tenant's queued job of ``rank`` (0: its oldest)."""
        served = (0,) if self.served is None else (1, self.served)
        return (self.running + rank, -self.running, served, self.first, self.tenant_id)

    def ahead_of(self, key: tuple[Any, ...]) -> int:
        """How many of this tenant's queued jobs sort before ``key`` (keys grow with the rank)."""
        turn, rest = key[0], key[1:]
        below = min(self.queued, max(0, turn - self.running))
        if below < self.queued and self.running + below == turn and self.key(below)[1:] < rest:
            below += 1
        return below


def tenants(s: Session, kinds: Iterable[str] | None = None) -> list[Tenant]:
    """The tenants with queued jobs (of ``kinds``: a runner that takes only those sees their queue)."""
    j = AuditJob
    waiting = j.status == "queued"
    if kinds is not None:
        waiting = and_(waiting, j.kind.in_(list(kinds)))
    h = aliased(AuditJob)
    last = select(func.max(h.started_at)).where(h.tenant_id == j.tenant_id).scalar_subquery()
    queued = func.sum(case((waiting, 1), else_=0))
    rows = s.execute(
        select(j.tenant_id, queued, func.sum(case((j.status == "running", 1), else_=0)),
               last, func.min(case((waiting, j.created_at))))
        .where(j.status.in_(("queued", "running")))
        .group_by(j.tenant_id)
        .having(queued > 0)
    ).all()
    return [Tenant(r[0], int(r[1]), int(r[2]), r[3], r[4]) for r in rows]


def _first_queued(s: Session, tenant_id: str, n: int, kinds: list[str] | None) -> list[str]:
    q = select(AuditJob.id).where(AuditJob.tenant_id == tenant_id, AuditJob.status == "queued")
    if kinds is not None:
        q = q.where(AuditJob.kind.in_(kinds))
    return list(s.scalars(q.order_by(AuditJob.created_at, AuditJob.id).limit(n)))


def candidates(s: Session, kinds: Iterable[str] | None = None, limit: int = 8) -> list[str]:
    """The first ``limit`` queued jobs (of ``kinds``) in the fair order: what a runner tries to claim."""
    kinds = list(kinds) if kinds is not None else None
    heap = [(t.key(0), 0, t) for t in tenants(s, kinds)]
    heapq.heapify(heap)
    picked: list[tuple[Tenant, int]] = []
    while heap and len(picked) < limit:
        _, rank, t = heapq.heappop(heap)
        picked.append((t, rank))
        if rank + 1 < t.queued:
            heapq.heappush(heap, (t.key(rank + 1), rank + 1, t))
    wanted: dict[str, int] = {}
    for t, rank in picked:
        wanted[t.tenant_id] = rank + 1
    ids = {tid: _first_queued(s, tid, n, kinds) for tid, n in wanted.items()}
    return [ids[t.tenant_id][rank] for t, rank in picked if rank < len(ids[t.tenant_id])]


def place(s: Session, job: AuditJob) -> tuple[int | None, int]:
    """``(position, queued)``: the job's place in the fair order (1 is taken next; None when it is not
    queued) and the number of queued jobs."""
    ts = tenants(s)
    total = sum(t.queued for t in ts)
    own = next((t for t in ts if t.tenant_id == job.tenant_id), None)
    rank = s.scalar(select(func.count()).select_from(AuditJob).where(
        AuditJob.tenant_id == job.tenant_id, AuditJob.status == "queued",
        or_(AuditJob.created_at < job.created_at, and_(AuditJob.created_at == job.created_at, AuditJob.id < job.id))))
    still = s.scalar(select(AuditJob.status).where(AuditJob.id == job.id)) == "queued"
    if own is None or not still:
        return None, total
    key = own.key(int(rank or 0))
    return 1 + sum(t.ahead_of(key) for t in ts), total


def ordered(s: Session) -> list[str]:
    """Every queued job id in the fair order (a page that shows many queued jobs)."""
    by_tenant = {t.tenant_id: t for t in tenants(s)}
    rows = s.execute(select(AuditJob.id, AuditJob.tenant_id).where(AuditJob.status == "queued")
                     .order_by(AuditJob.created_at, AuditJob.id)).all()
    seen: dict[str, int] = {}
    keyed = []
    for job_id, tenant_id in rows:
        rank = seen.get(tenant_id, 0)
        seen[tenant_id] = rank + 1
        t = by_tenant.get(tenant_id)
        if t is not None:  # queued since the tenants were read: left out of this look
            keyed.append((t.key(rank), job_id))
    return [job_id for _, job_id in sorted(keyed)]
