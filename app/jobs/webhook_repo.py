"""The SQL of webhook delivery: which jobs' webhooks are due, leasing one attempt, recording the outcome.
The ``audit_jobs`` row holds the delivery state (``webhook_*`` columns); ``app.jobs.webhooks`` delivers."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.store.base import utcnow
from app.store.job_tables import AuditJob


def due_webhooks(s: Session, limit: int = 20, *, now: datetime | None = None) -> list[tuple[str, int]]:
    now = now or utcnow()
    rows = s.execute(
        select(AuditJob.id, AuditJob.webhook_attempts)
        .where(AuditJob.webhook_next_at.is_not(None), AuditJob.webhook_next_at <= now)
        .order_by(AuditJob.webhook_next_at)
        .limit(limit)
    ).all()
    s.rollback()
    return [(r[0], int(r[1])) for r in rows]


def lease_webhook(s: Session, job_id: str, attempts: int, lease_seconds: float) -> bool:
    """Take one delivery attempt (so that two runners never deliver the same attempt)."""
    now = utcnow()
    res = s.execute(
        update(AuditJob)
        .where(
            AuditJob.id == job_id,
            AuditJob.webhook_attempts == attempts,
            AuditJob.webhook_next_at.is_not(None),
            AuditJob.webhook_next_at <= now,
        )
        .values(webhook_next_at=now + timedelta(seconds=lease_seconds))
        .execution_options(synchronize_session=False)
    )
    s.commit()
    return res.rowcount == 1


def record_webhook(s: Session, job_id: str, *, attempts: int, status: str, next_at: datetime | None) -> None:
    s.execute(
        update(AuditJob)
        .where(AuditJob.id == job_id)
        .values(webhook_attempts=attempts, webhook_status=status[:200], webhook_next_at=next_at)
        .execution_options(synchronize_session=False)
    )
    s.commit()
