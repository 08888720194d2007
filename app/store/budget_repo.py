"""All SQL of the budget ledger. Callers own the transaction."""

from __future__ import annotations

from datetime import datetime
from typing import cast

from sqlalchemy import Table, bindparam, func, insert, select, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from app.store.base import ColumnRow, utcnow
from app.store.gateway_tables import BudgetAccount, LedgerEntry

# The statements every answer runs, built once with bound parameters (issue 27): building a
# statement's expression tree costs more Python than SQLite's whole round trip, and the compiled
# form is cached by SQLAlchemy either way. Same SQL, same locking, as when built per call.
_LOCK_ACCOUNT = (
    update(BudgetAccount)
    .where(BudgetAccount.dataset_id == bindparam("the_dataset"), BudgetAccount.tenant_id == bindparam("the_tenant"))
    .values(version=BudgetAccount.version + 1)
    .returning(BudgetAccount)
)
_FIND_ENTRY = select(LedgerEntry).where(LedgerEntry.dataset_id == bindparam("dataset_id"),
                                        LedgerEntry.idempotency_key == bindparam("key"))
_FIND_REUSABLE = (
    select(LedgerEntry)
    .where(LedgerEntry.dataset_id == bindparam("dataset_id"), LedgerEntry.reuse_key == bindparam("key"),
           LedgerEntry.status == "charged", LedgerEntry.response.is_not(None))
    .order_by(LedgerEntry.id)
    .limit(1)
)
# A Core insert on the table (column defaults apply; no ORM bulk-insert machinery for one row).
_ENTRIES = LedgerEntry.__table__
_ADD_ENTRY = insert(_ENTRIES).returning(_ENTRIES.c.id)
_ENTRY_COLUMNS = frozenset(_ENTRIES.c.keys())


def _known(fields: dict, columns: frozenset[str], what: str) -> None:
    """A Core statement silently drops keys that name no column: refuse them instead."""
    unknown = fields.keys() - columns
    if unknown:
        raise TypeError(f"unknown {what} fields: {sorted(unknown)}")


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
        _LOCK_ACCOUNT, {"the_dataset": dataset_id, "the_tenant": tenant_id},
        execution_options={"populate_existing": True, "synchronize_session": False},
    ).one_or_none()


_ACCOUNTS = BudgetAccount.__table__
_STORE_ACCOUNT = _ACCOUNTS.update().where(_ACCOUNTS.c.dataset_id == bindparam("the_dataset"))
_ACCOUNT_COLUMNS = frozenset(_ACCOUNTS.c.keys())
# The same lock as _LOCK_ACCOUNT, as a Core statement on the table: the row comes back as a plain
# result row (no ORM instance to build, register and populate: about half the Python of the ORM
# statement, issue 27). Same SQL text, same lock.
_LOCK_ACCOUNT_ROW = (
    update(cast(Table, _ACCOUNTS))
    .where(_ACCOUNTS.c.dataset_id == bindparam("the_dataset"), _ACCOUNTS.c.tenant_id == bindparam("the_tenant"))
    .values(version=_ACCOUNTS.c.version + 1)
    .returning(*_ACCOUNTS.c)
)


class AccountRow(ColumnRow):
    """A budget account row read by a Core statement (``lock_account_row``, the answer's read in
    datasets_repo): the columns as attributes, what the ledger reads; ``store_account`` updates them
    like an ORM instance's committed values."""

    __slots__ = tuple(_ACCOUNTS.c.keys())  # in the table's column order (a row's order); checked below
    dataset_id: str
    tenant_id: str
    adjacency: str
    epsilon_budget: float
    delta_budget: float
    epsilon_spent: float
    composition_method: str | None
    rdp_orders: list[float]
    rdp_sum: list[float]
    basic_epsilon: float
    basic_delta: float
    nocurve_epsilon: float
    nocurve_delta: float
    charges: int
    pld_counts: dict[str, int] | None
    rest_rdp: list[float] | None
    version: int
    updated_at: datetime


assert set(AccountRow.__annotations__) == set(AccountRow.__slots__), "AccountRow must list the account's columns"


def lock_account_row(session: Session, dataset_id: str, tenant_id: str) -> AccountRow | None:
    """``lock_account`` for a caller that only reads the account and writes it back with
    ``store_account`` (the ledger's charge): the same ``UPDATE ... RETURNING``, the row as a
    :class:`AccountRow`. The session's pending changes are flushed first (SQLAlchemy autoflushes before
    a Core statement too), and a copy of the account the session already holds is expired (it is
    reloaded on its next access: never a stale one)."""
    row = session.execute(_LOCK_ACCOUNT_ROW, {"the_dataset": dataset_id, "the_tenant": tenant_id}).one_or_none()
    if row is None:
        return None
    held = session.identity_map.get(session.identity_key(BudgetAccount, (dataset_id,)))
    if held is not None:
        session.expire(held)
    return AccountRow(tuple(row))


def store_account(session: Session, acc: BudgetAccount | AccountRow, **fields) -> None:
    """Write ``fields`` to the (locked) account row with one Core UPDATE by key, and set them on ``acc``
    as committed values: the ORM's unit of work would diff and flush the same columns for several
    times the Python (issue 27); ``acc`` stays what the row now holds, and nothing is left dirty. A
    :class:`AccountRow` gets them as plain attributes (a copy in the session was expired when it
    was locked)."""
    _known(fields, _ACCOUNT_COLUMNS, "budget account")
    session.execute(_STORE_ACCOUNT, {"the_dataset": acc.dataset_id, **fields})
    if isinstance(acc, AccountRow):
        for key, value in fields.items():
            setattr(acc, key, value)
        return
    for key, value in fields.items():
        set_committed_value(acc, key, value)


def get_account(session: Session, dataset_id: str, tenant_id: str) -> BudgetAccount | None:
    return session.scalar(
        select(BudgetAccount).where(BudgetAccount.dataset_id == dataset_id, BudgetAccount.tenant_id == tenant_id)
    )


def find_entry(session: Session, dataset_id: str, idempotency_key: str) -> LedgerEntry | None:
    return session.scalar(_FIND_ENTRY, {"dataset_id": dataset_id, "key": idempotency_key})


def find_reusable(session: Session, dataset_id: str, reuse_key: str) -> LedgerEntry | None:
    """The earliest live charge of an identical request whose released answer is stored."""
    return session.scalar(_FIND_REUSABLE, {"dataset_id": dataset_id, "key": reuse_key})


def get_entry(session: Session, entry_id: int) -> LedgerEntry | None:
    return session.get(LedgerEntry, entry_id)


def add_entry(session: Session, **fields) -> int:
    """Append a ledger entry; its id. One ``INSERT ... RETURNING`` (no unit-of-work flush)."""
    _known(fields, _ENTRY_COLUMNS, "ledger entry")
    return int(session.execute(_ADD_ENTRY, fields).scalar_one())


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
