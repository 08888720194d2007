from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Iterator

from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import Session, sessionmaker


def normalize_url(url: str) -> str:
    """Map ``postgresql://`` to the psycopg 3 driver; leave SQLite URLs as they are."""
    u = make_url(url)
    if u.drivername in ("postgresql", "postgres"):
        u = u.set(drivername="postgresql+psycopg")
    return u.render_as_string(hide_password=False)


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    # WAL lets readers run beside the one writer; busy_timeout makes concurrent
    # writers wait instead of failing with "database is locked".
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()


class _NoRowLogging(logging.Filter):
    """Drops SQLAlchemy's DEBUG "Row (...)" records: result rows hold exemplar text (docs/security.md)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (isinstance(record.msg, str) and record.msg.startswith("Row "))


_ROW_FILTER = _NoRowLogging()


def _quiet_rows() -> None:
    # SQLAlchemy logs rows on "sqlalchemy.engine.Engine" when that logger is at DEBUG (an operator's
    # choice); a logger filter applies to the records logged on that logger, which is where rows go.
    lg = logging.getLogger("sqlalchemy.engine.Engine")
    if _ROW_FILTER not in lg.filters:
        lg.addFilter(_ROW_FILTER)


def make_engine(url: str) -> Engine:
    """An engine that never writes bound parameters (exemplar text, keys) into logs or exception
    messages (``hide_parameters``), nor result rows into DEBUG logs."""
    url = normalize_url(url)
    _quiet_rows()
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, hide_parameters=True)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20, hide_parameters=True)


class Database:
    """An engine and its session factory. Services receive sessions; callers commit."""

    def __init__(self, url: str) -> None:
        self.url = normalize_url(url)
        self.engine = make_engine(url)
        self.sessionmaker = sessionmaker(self.engine, expire_on_commit=False)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self.sessionmaker() as s:
            try:
                yield s
            except BaseException:
                s.rollback()
                raise

    def ping(self) -> None:
        with self.engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    def dispose(self) -> None:
        self.engine.dispose()
