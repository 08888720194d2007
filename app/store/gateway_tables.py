"""Tables of the gateway: API keys, per-dataset privacy budgets and their append-only ledger."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Float, ForeignKey, Index, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.store.base import Base, UTCDateTime, utcnow


class ApiKey(Base):
    """An API key. Only a SHA-256 hash of the secret is stored; the prefix finds the row."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(64), index=True)
    name: Mapped[str] = mapped_column(String(200))
    prefix: Mapped[str] = mapped_column(String(32), unique=True)
    secret_hash: Mapped[str] = mapped_column(String(128))
    scopes: Mapped[list[str]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class AuthState(Base):
    """Facts about authentication that only ever become true. The row ``name="keyed"`` is written with
    the first API key and never removed: ``DPICL_AUTH_MODE=auto`` then requires keys for good, even
    once every key is revoked (issue 26); only the operator's ``DPICL_AUTH_MODE=open`` opens it again."""

    __tablename__ = "auth_state"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    set_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class BudgetAccount(Base):
    """A dataset's (epsilon, delta) budget and the running composition of its live charges.

    ``rdp_sum`` is the sum of the RDP curves (on ``rdp_orders``) of charges that have one;
    ``basic_*`` sum every live charge's own (epsilon, delta); ``nocurve_*`` the charges
    without a curve. ``epsilon_spent`` is the composed total at ``delta_budget``.
    """

    __tablename__ = "budget_accounts"

    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(64), index=True)
    adjacency: Mapped[str] = mapped_column(String(32))
    epsilon_budget: Mapped[float] = mapped_column(Float)
    delta_budget: Mapped[float] = mapped_column(Float)
    epsilon_spent: Mapped[float] = mapped_column(Float, default=0.0)
    composition_method: Mapped[str | None] = mapped_column(String(32), nullable=True)
    rdp_orders: Mapped[list[float]] = mapped_column(JSON)
    rdp_sum: Mapped[list[float]] = mapped_column(JSON)
    basic_epsilon: Mapped[float] = mapped_column(Float, default=0.0)
    basic_delta: Mapped[float] = mapped_column(Float, default=0.0)
    nocurve_epsilon: Mapped[float] = mapped_column(Float, default=0.0)
    nocurve_delta: Mapped[float] = mapped_column(Float, default=0.0)
    charges: Mapped[int] = mapped_column(Integer, default=0)
    # PLD composition (app.budget.composition): counts per event type of the charges with a dominating
    # pair, and the RDP sum of the other curves. None: an account from before (all curves are RDP).
    pld_counts: Mapped[dict[str, int] | None] = mapped_column(JSON, nullable=True)
    rest_rdp: Mapped[list[float] | None] = mapped_column(JSON, nullable=True)
    version: Mapped[int] = mapped_column(Integer, default=0)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class LedgerEntry(Base):
    """One charge (append-only; a refund flips ``status`` and never deletes the row)."""

    __tablename__ = "ledger_entries"
    __table_args__ = (
        UniqueConstraint("dataset_id", "idempotency_key", name="uq_ledger_entries_dataset_idempotency"),
        Index("ix_ledger_entries_dataset_created", "dataset_id", "created_at"),
        Index("ix_ledger_entries_dataset_reuse_key", "dataset_id", "reuse_key"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"))
    tenant_id: Mapped[str] = mapped_column(String(64), index=True)
    key_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    mechanism: Mapped[str] = mapped_column(String(64))
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    epsilon: Mapped[float] = mapped_column(Float)
    delta: Mapped[float] = mapped_column(Float)
    rdp: Mapped[list[float] | None] = mapped_column(JSON, nullable=True)
    pld: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)  # app.privacy.pld.PldSpec
    idempotency_key: Mapped[str | None] = mapped_column(String(200), nullable=True)
    status: Mapped[str] = mapped_column(String(16), default="charged")  # charged | refunded
    response: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    epsilon_spent_after: Mapped[float] = mapped_column(Float)
    # sha256 of the normalized request (query, mechanism, parameters, model): answer reuse finds the
    # released answer of an identical earlier request here. None: not reusable (seeded noise, opt-out).
    reuse_key: Mapped[str | None] = mapped_column(String(64), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    refunded_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
