"""All SQL for API keys."""

from __future__ import annotations

from sqlalchemy import exists, func, select
from sqlalchemy.orm import Session

from app.store.base import DEFAULT_TENANT, utcnow
from app.store.dataset_tables import Dataset
from app.store.gateway_tables import ApiKey, AuthState

KEYED = "keyed"


def add_key(session: Session, **fields) -> ApiKey:
    k = ApiKey(**fields)
    session.add(k)
    mark_keyed(session)  # the same transaction: no key is ever visible without the fact
    session.flush()
    return k


def mark_keyed(session: Session) -> None:
    """Record, once and for good, that this database has had an API key (idempotent, race-free)."""
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        session.execute(pg_insert(AuthState).values(name=KEYED, set_at=utcnow()).on_conflict_do_nothing())
    elif dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        session.execute(sqlite_insert(AuthState).values(name=KEYED, set_at=utcnow()).on_conflict_do_nothing())
    elif session.get(AuthState, KEYED) is None:
        session.add(AuthState(name=KEYED))


def ever_keyed(session: Session) -> bool:
    """Whether any API key has ever existed here (revoked ones included): the marker row, or (belt and
    braces, e.g. a key row restored from a backup without it) any key row at all."""
    return bool(session.scalar(select(exists().where(AuthState.name == KEYED) | exists().select_from(ApiKey))))


def default_tenant_datasets(session: Session) -> int:
    """How many datasets the default tenant (everyone, in open mode) holds."""
    return int(session.scalar(select(func.count()).select_from(Dataset).where(Dataset.tenant_id == DEFAULT_TENANT))
               or 0)


def find_by_prefix(session: Session, prefix: str) -> ApiKey | None:
    return session.scalar(select(ApiKey).where(ApiKey.prefix == prefix))


def list_keys(session: Session, tenant_id: str | None = None) -> list[ApiKey]:
    q = select(ApiKey).order_by(ApiKey.created_at)
    if tenant_id is not None:
        q = q.where(ApiKey.tenant_id == tenant_id)
    return list(session.scalars(q))


def active_count(session: Session) -> int:
    return int(session.scalar(select(func.count()).select_from(ApiKey).where(ApiKey.revoked_at.is_(None))) or 0)


def revoke(session: Session, key_id: str) -> bool:
    k = session.get(ApiKey, key_id)
    if k is None or k.revoked_at is not None:
        return False
    k.revoked_at = utcnow()
    return True
