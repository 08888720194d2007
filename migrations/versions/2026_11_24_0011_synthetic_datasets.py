"""datasets: visibility (private | public synthetic) and provenance

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-24
"""
import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("datasets") as batch:
        # Every existing set is a private one.
        batch.add_column(sa.Column("visibility", sa.String(16), server_default="private", nullable=False))
        batch.add_column(sa.Column("provenance", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("datasets") as batch:
        batch.drop_column("provenance")
        batch.drop_column("visibility")
