"""gateway: API keys, budget accounts, ledger entries

Revision ID: 0010
Revises: 0002
Create Date: 2026-11-22
"""
import sqlalchemy as sa
from alembic import op

from app.store.base import UTCDateTime

revision = "0010"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("prefix", sa.String(32), nullable=False),
        sa.Column("secret_hash", sa.String(128), nullable=False),
        sa.Column("scopes", sa.JSON(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("revoked_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("prefix", name=op.f("uq_api_keys_prefix")),
    )
    op.create_index(op.f("ix_api_keys_tenant_id"), "api_keys", ["tenant_id"])

    op.create_table(
        "budget_accounts",
        sa.Column("dataset_id", sa.String(64), nullable=False),
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("adjacency", sa.String(32), nullable=False),
        sa.Column("epsilon_budget", sa.Float(), nullable=False),
        sa.Column("delta_budget", sa.Float(), nullable=False),
        sa.Column("epsilon_spent", sa.Float(), nullable=False),
        sa.Column("composition_method", sa.String(32), nullable=True),
        sa.Column("rdp_orders", sa.JSON(), nullable=False),
        sa.Column("rdp_sum", sa.JSON(), nullable=False),
        sa.Column("basic_epsilon", sa.Float(), nullable=False),
        sa.Column("basic_delta", sa.Float(), nullable=False),
        sa.Column("nocurve_epsilon", sa.Float(), nullable=False),
        sa.Column("nocurve_delta", sa.Float(), nullable=False),
        sa.Column("charges", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["dataset_id"], ["datasets.id"], name=op.f("fk_budget_accounts_dataset_id_datasets"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("dataset_id", name=op.f("pk_budget_accounts")),
    )
    op.create_index(op.f("ix_budget_accounts_tenant_id"), "budget_accounts", ["tenant_id"])

    op.create_table(
        "ledger_entries",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("dataset_id", sa.String(64), nullable=False),
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("key_id", sa.String(64), nullable=True),
        sa.Column("mechanism", sa.String(64), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("epsilon", sa.Float(), nullable=False),
        sa.Column("delta", sa.Float(), nullable=False),
        sa.Column("rdp", sa.JSON(), nullable=True),
        sa.Column("idempotency_key", sa.String(200), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("response", sa.JSON(), nullable=True),
        sa.Column("epsilon_spent_after", sa.Float(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("refunded_at", UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["dataset_id"], ["datasets.id"], name=op.f("fk_ledger_entries_dataset_id_datasets"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ledger_entries")),
        sa.UniqueConstraint("dataset_id", "idempotency_key", name="uq_ledger_entries_dataset_idempotency"),
    )
    op.create_index(op.f("ix_ledger_entries_tenant_id"), "ledger_entries", ["tenant_id"])
    op.create_index("ix_ledger_entries_dataset_created", "ledger_entries", ["dataset_id", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_ledger_entries_dataset_created", table_name="ledger_entries")
    op.drop_index(op.f("ix_ledger_entries_tenant_id"), table_name="ledger_entries")
    op.drop_table("ledger_entries")
    op.drop_index(op.f("ix_budget_accounts_tenant_id"), table_name="budget_accounts")
    op.drop_table("budget_accounts")
    op.drop_index(op.f("ix_api_keys_tenant_id"), table_name="api_keys")
    op.drop_table("api_keys")
