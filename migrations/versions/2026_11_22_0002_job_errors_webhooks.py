"""audit jobs: error code, durable webhook retries

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""
import sqlalchemy as sa
from alembic import op

from app.store.base import UTCDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("audit_jobs") as batch:
        batch.add_column(sa.Column("error_code", sa.String(64), nullable=True))
        batch.add_column(sa.Column("webhook_attempts", sa.Integer(), server_default="0", nullable=False))
        batch.add_column(sa.Column("webhook_next_at", UTCDateTime(), nullable=True))
    # Due webhook deliveries are found by this index.
    op.create_index("ix_audit_jobs_webhook_next_at", "audit_jobs", ["webhook_next_at"])


def downgrade() -> None:
    op.drop_index("ix_audit_jobs_webhook_next_at", table_name="audit_jobs")
    with op.batch_alter_table("audit_jobs") as batch:
        batch.drop_column("webhook_next_at")
        batch.drop_column("webhook_attempts")
        batch.drop_column("error_code")
