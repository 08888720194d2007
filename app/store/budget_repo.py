"""All SQL of the budget ledger. Callers own the transaction."""

from __future__ import annotations

from sqlalchemy import func, insert, select, update
from sqlalchemy.orm import Session

from app.store.base import utcnow
from app.store.gateway_tables import BudgetAccount, LedgerEntry


def create_account(session: Session, **fields) -> BudgetAccount:
    acc = BudgetAccount(**fields)
    session.add(acc)
    return acc


def lock_account(session: Session, dataset_id: str, tenant_id: str) -> BudgetAccount | None:
    """Take the account's write lock, then read it.

    The first statement is a write (``version = version + 1``): PostgreSQL locks the
    row until commit, SQLite takes its database write lock, so concurrent charges
    on one dataset serialise on both backends and each sees the previous one's
    committed total. The same statement returns the row as it is after the write
    (``UPDATE ... RETURNING``, PostgreSQL and SQLite >= 3.35): one round trip, and the
    session's copy is refreshed from it (``populate_existing``), never a stale one.
    """
    return session.scalars(
        update(BudgetAccount)
        .where(BudgetAccount.dataset_id == dataset_id, BudgetAccount.tenant_id == tenant_id)
        .values(version=BudgetAccount.version + 1)
        .returning(BudgetAccount),
        execution_options={"populate_existing": True, "synchronize_session": False},
    ).one_or_none()


def get_account(session: Session, dataset_id: str, tenant_id: str) -> BudgetAccount | None:
    return session.scalar(
        select(BudgetAccount).where(BudgetAccount.dataset_id == dataset_id, BudgetAccount.tenant_id == tenant_id)
    )


def find_entry(session: Session, dataset_id: str, idempotency_key: str) -> LedgerEntry | None:
    return session.scalar(
        select(LedgerEntry).where(LedgerEntry.dataset_id == dataset_id, LedgerEntry.idempotency_key == idempotency_key)
    )


def find_reusable(session: Session, dataset_id: str, reuse_key: str) -> LedgerEntry | None:
    """The earliest live charge of an identical request whose released answer is stored."""
    return session.scalar(
        select(LedgerEntry)
        .where(LedgerEntry.dataset_id == dataset_id, LedgerEntry.reuse_key == reuse_key,
               LedgerEntry.status == "charged", LedgerEntry.response.is_not(None))
        .order_by(LedgerEntry.id)
        .limit(1)
    )


def get_entry(session: Session, entry_id: int) -> LedgerEntry | None:
    return session.get(LedgerEntry, entry_id)


def add_entry(session: Session, **fields) -> int:
    """Append a ledger entry; its id. One ``INSERT ... RETURNING`` (no unit-of-work flush)."""
    return int(session.execute(insert(LedgerEntry).values(**fields).returning(LedgerEntry.id)).scalar_one())


def live_entries(session: Session, dataset_id: str) -> list[LedgerEntry]:
    return list(
        session.scalars(
            select(LedgerEntry)
            .where(LedgerEntry.dataset_id == dataset_id, LedgerEntry.status == "charged")
            .order_by(LedgerEntry.id)
        )
    )


def list_entries(session: Session, dataset_id: str, *, limit: int, offset: int) -> tuple[list[LedgerEntry], int]:
    q = select(LedgerEntry).where(LedgerEntry.dataset_id == dataset_id)
    total = session.scalar(select(func.count()).select_from(q.subquery())) or 0
    rows = session.scalars(q.order_by(LedgerEntry.id).limit(limit).offset(offset)).all()
    return list(rows), int(total)


def mark_refunded(session: Session, entry: LedgerEntry) -> None:
    entry.status = "refunded"
    entry.refunded_at = utcnow()
