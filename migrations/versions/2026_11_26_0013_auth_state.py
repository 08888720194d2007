"""auth_state: the "keyed" fact (auto auth mode stays keyed once any key has existed)

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26
"""
import sqlalchemy as sa
from alembic import op

from app.store.base import UTCDateTime

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "auth_state",
        sa.Column("name", sa.String(32), primary_key=True),
        sa.Column("set_at", UTCDateTime(), nullable=False),
    )
    # A database that already has (or had: revoked) keys is keyed from now on.
    op.execute("INSERT INTO auth_state (name, set_at) "
               "SELECT 'keyed', created_at FROM api_keys ORDER BY created_at LIMIT 1")


def downgrade() -> None:
    op.drop_table("auth_state")
