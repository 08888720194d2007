"""answer reuse: datasets.answer_reuse (opt-out) and ledger_entries.reuse_key

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-24
"""
import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("datasets") as b:
        b.add_column(sa.Column("answer_reuse", sa.Boolean(), nullable=False, server_default=sa.true()))
    with op.batch_alter_table("ledger_entries") as b:
        b.add_column(sa.Column("reuse_key", sa.String(64), nullable=True))
    op.create_index("ix_ledger_entries_dataset_reuse_key", "ledger_entries", ["dataset_id", "reuse_key"])


def downgrade() -> None:
    op.drop_index("ix_ledger_entries_dataset_reuse_key", table_name="ledger_entries")
    with op.batch_alter_table("ledger_entries") as b:
        b.drop_column("reuse_key")
    with op.batch_alter_table("datasets") as b:
        b.drop_column("answer_reuse")
