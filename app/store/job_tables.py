"""Tables of background audit jobs."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, Float, ForeignKey, Index, Integer, LargeBinary, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.store.base import DEFAULT_TENANT, Base, UTCDateTime, utcnow


class AuditJob(Base):
    """A background audit job. This row is the source of truth for its state."""

    __tablename__ = "audit_jobs"
    __table_args__ = (
        UniqueConstraint("tenant_id", "idempotency_key", name="uq_audit_jobs_tenant_idempotency"),
        Index("ix_audit_jobs_status_created", "status", "created_at"),
        Index("ix_audit_jobs_webhook_next_at", "webhook_next_at"),
        # 0015: a tenant's last start and its oldest queued jobs, for the fair claim (app/jobs/fair.py).
        Index("ix_audit_jobs_tenant_started", "tenant_id", "started_at"),
        Index("ix_audit_jobs_tenant_status_created", "tenant_id", "status", "created_at"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(64), index=True, default=DEFAULT_TENANT)
    kind: Mapped[str] = mapped_column(String(64), index=True)
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), default="queued")
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    progress_message: Mapped[str | None] = mapped_column(String(500), nullable=True)
    claimed_epsilon: Mapped[float | None] = mapped_column(Float, nullable=True)
    claimed_delta: Mapped[float | None] = mapped_column(Float, nullable=True)
    webhook_url: Mapped[str | None] = mapped_column(String(2000), nullable=True)
    webhook_status: Mapped[str | None] = mapped_column(String(200), nullable=True)
    idempotency_key: Mapped[str | None] = mapped_column(String(200), nullable=True)
    request_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    verdict: Mapped[str | None] = mapped_column(String(16), nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    max_attempts: Mapped[int] = mapped_column(Integer, default=3)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    worker_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    # 0002: a machine-readable reason beside ``error``, and durable webhook retries.
    error_code: Mapped[str | None] = mapped_column(String(64), nullable=True)
    webhook_attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    webhook_next_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)

    artifacts: Mapped[list["JobArtifact"]] = relationship(
        back_populates="job", cascade="all, delete-orphan", passive_deletes=True, order_by="JobArtifact.name"
    )


class JobArtifact(Base):
    """Plots and raw results of a job, stored in SQL so every worker and server can serve them."""

    __tablename__ = "job_artifacts"
    __table_args__ = (UniqueConstraint("job_id", "name", name="uq_job_artifacts_job_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("audit_jobs.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    media_type: Mapped[str] = mapped_column(String(100))
    content: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)

    job: Mapped[AuditJob] = relationship(back_populates="artifacts")
