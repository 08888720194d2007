"""All SQL for API keys."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.store.base import utcnow
from app.store.gateway_tables import ApiKey


def add_key(session: Session, **fields) -> ApiKey:
    k = ApiKey(**fields)
    session.add(k)
    session.flush()
    return k


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
