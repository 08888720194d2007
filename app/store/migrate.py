"""Alembic, driven from Python (``dpicl migrate`` and migration on start-up)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from app.store.db import make_engine, normalize_url

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    # '%' must be escaped for ConfigParser interpolation (passwords may contain it).
    cfg.set_main_option("sqlalchemy.url", normalize_url(url).replace("%", "%%"))
    return cfg


# Any fixed 64-bit key: processes migrating one PostgreSQL database take turns on it.
_PG_MIGRATION_LOCK = 0x6470_6963_6C00


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate to ``revision``. On PostgreSQL an advisory lock serialises processes that start
    together (a server and its workers), so they never race on ``alembic_version``."""
    if not normalize_url(url).startswith("postgresql"):
        from filelock import FileLock
        from sqlalchemy.engine import make_url

        db = make_url(url).database
        if not db or db == ":memory:":
            command.upgrade(alembic_config(url), revision)
            return
        # SQLite's DDL is not transactional across processes: take turns through a lock file.
        with FileLock(f"{db}.migrate.lock", timeout=300):
            command.upgrade(alembic_config(url), revision)
        return
    from sqlalchemy import text

    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _PG_MIGRATION_LOCK})
            conn.commit()
            try:
                command.upgrade(alembic_config(url), revision)
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _PG_MIGRATION_LOCK})
                conn.commit()
    finally:
        engine.dispose()


def downgrade(url: str, revision: str) -> None:
    command.downgrade(alembic_config(url), revision)


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def current_revision(url: str) -> str | None:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()
