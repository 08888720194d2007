"""All SQL for private exemplar sets. Callers own the transaction (services never commit)."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any, Sequence

from sqlalchemy import bindparam, delete, func, insert, select
from sqlalchemy.orm import Session

from app.store.base import ColumnRow, new_id
from app.store.budget_repo import AccountRow
from app.store.dataset_tables import Dataset, Exemplar
from app.store.gateway_tables import BudgetAccount


def create_dataset(
    session: Session,
    *,
    tenant_id: str,
    name: str,
    task: str,
    labels: list[str],
    template: dict[str, Any],
    exemplars: Sequence[tuple[str, str]],
    answer_reuse: bool = True,
    dataset_id: str | None = None,
    visibility: str = "private",
    provenance: dict[str, Any] | None = None,
) -> Dataset:
    ds = Dataset(
        id=dataset_id or new_id("ds"),
        visibility=visibility,
        provenance=provenance,
        tenant_id=tenant_id,
        name=name,
        task=task,
        labels=list(labels),
        template=dict(template),
        exemplar_count=len(exemplars),
        label_counts=dict(Counter(out for _, out in exemplars)) if task == "classification" else {},
        answer_reuse=answer_reuse,
    )
    session.add(ds)
    session.flush()
    if exemplars:
        session.execute(
            insert(Exemplar),
            [{"dataset_id": ds.id, "position": i, "input": inp, "output": out} for i, (inp, out) in enumerate(exemplars)],
        )
    return ds


def get_dataset_any_tenant(session: Session, dataset_id: str) -> Dataset | None:
    """For the job that owns a dataset id it derived itself (idempotent creation); never for a request."""
    return session.get(Dataset, dataset_id)


def get_dataset(session: Session, dataset_id: str, tenant_id: str) -> Dataset | None:
    return session.scalar(select(Dataset).where(Dataset.id == dataset_id, Dataset.tenant_id == tenant_id))


# Built once (every answer runs it; see budget_repo's note on prebuilt statements). A Core statement on
# the two tables: the rows come back as plain result rows, read into DatasetRow / AccountRow (no ORM
# instances to build, register and populate: issue 27). Same join, same filter as the ORM query was.
_DATASETS = Dataset.__table__
_ACCOUNTS = BudgetAccount.__table__
_DATASET_WITH_ACCOUNT = (
    select(*_DATASETS.c, *_ACCOUNTS.c)
    .select_from(_DATASETS.outerjoin(_ACCOUNTS, (_ACCOUNTS.c.dataset_id == _DATASETS.c.id)
                                     & (_ACCOUNTS.c.tenant_id == bindparam("tenant_id"))))
    .where(_DATASETS.c.id == bindparam("dataset_id"), _DATASETS.c.tenant_id == bindparam("tenant_id"))
)
_N_DATASET = len(_DATASETS.c)


class DatasetRow(ColumnRow):
    """A dataset row read by a Core statement: its columns as attributes (read-only use: the answer's
    read phase)."""

    __slots__ = tuple(_DATASETS.c.keys())  # in the table's column order (a row's order); checked below
    id: str
    tenant_id: str
    name: str
    task: str
    labels: list[str]
    template: dict[str, Any]
    exemplar_count: int
    label_counts: dict[str, int]
    created_at: datetime
    answer_reuse: bool
    visibility: str
    provenance: dict[str, Any] | None


assert set(DatasetRow.__annotations__) == set(DatasetRow.__slots__), "DatasetRow must list the dataset's columns"


def get_dataset_with_account(session: Session, dataset_id: str,
                             tenant_id: str) -> tuple[DatasetRow, AccountRow | None] | None:
    """A dataset the tenant may see and its budget account (None for a public set), in one query, as
    read-only rows (what an answer reads; ``get_dataset`` gives the ORM instance)."""
    row = session.execute(_DATASET_WITH_ACCOUNT, {"dataset_id": dataset_id, "tenant_id": tenant_id}).first()
    if row is None:
        return None
    values = tuple(row)
    account = values[_N_DATASET:]
    return DatasetRow(values[:_N_DATASET]), (AccountRow(account) if account[0] is not None else None)


def list_datasets(session: Session, tenant_id: str, *, limit: int, offset: int) -> tuple[list[Dataset], int]:
    q = select(Dataset).where(Dataset.tenant_id == tenant_id)
    total = session.scalar(select(func.count()).select_from(q.subquery())) or 0
    rows = session.scalars(q.order_by(Dataset.created_at.desc(), Dataset.id).limit(limit).offset(offset)).all()
    return list(rows), int(total)


def load_exemplars(session: Session, dataset_id: str) -> list[tuple[str, str]]:
    """The private exemplar text, for mechanisms only. Never serialise it into a response."""
    rows = session.execute(
        select(Exemplar.input, Exemplar.output).where(Exemplar.dataset_id == dataset_id).order_by(Exemplar.position)
    ).all()
    return [(r[0], r[1]) for r in rows]


def delete_dataset(session: Session, dataset_id: str, tenant_id: str) -> bool:
    ds = get_dataset(session, dataset_id, tenant_id)
    if ds is None:
        return False
    # Explicit child delete: SQLite enforces ON DELETE CASCADE only with the pragma, be sure either way.
    session.execute(delete(Exemplar).where(Exemplar.dataset_id == dataset_id))
    session.execute(delete(Dataset).where(Dataset.id == dataset_id))
    return True
