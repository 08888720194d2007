"""PLD ledger: budget_accounts.pld_counts / rest_rdp and ledger_entries.pld (issue 30)

Nullable, no backfill: an account with pld_counts NULL composes every earlier curve by RDP
(rest_rdp NULL reads as rdp_sum), which is what it was charged under.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-26
"""
import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("budget_accounts") as b:
        b.add_column(sa.Column("pld_counts", sa.JSON(), nullable=True))
        b.add_column(sa.Column("rest_rdp", sa.JSON(), nullable=True))
    with op.batch_alter_table("ledger_entries") as b:
        b.add_column(sa.Column("pld", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("ledger_entries") as b:
        b.drop_column("pld")
    with op.batch_alter_table("budget_accounts") as b:
        b.drop_column("rest_rdp")
        b.drop_column("pld_counts")
