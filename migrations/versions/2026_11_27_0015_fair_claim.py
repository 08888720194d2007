"""audit jobs: indexes for the fair claim

The fair order of queued jobs (app/jobs/fair.py) reads each waiting tenant's last start and its
oldest queued jobs; these indexes make each a lookup per tenant instead of a scan of its job history.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-27
"""
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_audit_jobs_tenant_started", "audit_jobs", ["tenant_id", "started_at"])
    op.create_index("ix_audit_jobs_tenant_status_created", "audit_jobs", ["tenant_id", "status", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_audit_jobs_tenant_status_created", table_name="audit_jobs")
    op.drop_index("ix_audit_jobs_tenant_started", table_name="audit_jobs")
