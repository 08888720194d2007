"""initial: datasets, exemplars, audit jobs, job artifacts

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""
import sqlalchemy as sa
from alembic import op

from app.store.base import UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "datasets",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("task", sa.String(32), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("template", sa.JSON(), nullable=False),
        sa.Column("exemplar_count", sa.Integer(), nullable=False),
        sa.Column("label_counts", sa.JSON(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_datasets")),
    )
    op.create_index(op.f("ix_datasets_tenant_id"), "datasets", ["tenant_id"])

    op.create_table(
        "exemplars",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("dataset_id", sa.String(64), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("input", sa.Text(), nullable=False),
        sa.Column("output", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["dataset_id"], ["datasets.id"], name=op.f("fk_exemplars_dataset_id_datasets"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_exemplars")),
        sa.UniqueConstraint("dataset_id", "position", name="uq_exemplars_dataset_position"),
    )
    op.create_index(op.f("ix_exemplars_dataset_id"), "exemplars", ["dataset_id"])

    op.create_table(
        "audit_jobs",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("progress", sa.Float(), nullable=False),
        sa.Column("progress_message", sa.String(500), nullable=True),
        sa.Column("claimed_epsilon", sa.Float(), nullable=True),
        sa.Column("claimed_delta", sa.Float(), nullable=True),
        sa.Column("webhook_url", sa.String(2000), nullable=True),
        sa.Column("webhook_status", sa.String(200), nullable=True),
        sa.Column("idempotency_key", sa.String(200), nullable=True),
        sa.Column("request_hash", sa.String(64), nullable=True),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("verdict", sa.String(16), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("worker_id", sa.String(200), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=True),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
        sa.Column("heartbeat_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_jobs")),
        sa.UniqueConstraint("tenant_id", "idempotency_key", name="uq_audit_jobs_tenant_idempotency"),
    )
    op.create_index(op.f("ix_audit_jobs_tenant_id"), "audit_jobs", ["tenant_id"])
    op.create_index(op.f("ix_audit_jobs_kind"), "audit_jobs", ["kind"])
    op.create_index("ix_audit_jobs_status_created", "audit_jobs", ["status", "created_at"])

    op.create_table(
        "job_artifacts",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("media_type", sa.String(100), nullable=False),
        sa.Column("content", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["audit_jobs.id"], name=op.f("fk_job_artifacts_job_id_audit_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_artifacts")),
        sa.UniqueConstraint("job_id", "name", name="uq_job_artifacts_job_name"),
    )
    op.create_index(op.f("ix_job_artifacts_job_id"), "job_artifacts", ["job_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_job_artifacts_job_id"), table_name="job_artifacts")
    op.drop_table("job_artifacts")
    op.drop_index("ix_audit_jobs_status_created", table_name="audit_jobs")
    op.drop_index(op.f("ix_audit_jobs_kind"), table_name="audit_jobs")
    op.drop_index(op.f("ix_audit_jobs_tenant_id"), table_name="audit_jobs")
    op.drop_table("audit_jobs")
    op.drop_index(op.f("ix_exemplars_dataset_id"), table_name="exemplars")
    op.drop_table("exemplars")
    op.drop_index(op.f("ix_datasets_tenant_id"), table_name="datasets")
    op.drop_table("datasets")
