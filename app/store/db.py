from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from typing import Iterator

from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import Session, sessionmaker

from app.store.json_memo import json_dumps, json_loads  # noqa: F401  (json_dumps: the engines' serializer)


def normalize_url(url: str) -> str:
    """Map ``postgresql://`` to the psycopg 3 driver; leave SQLite URLs as they are."""
    u = make_url(url)
    if u.drivername in ("postgresql", "postgres"):
        u = u.set(drivername="postgresql+psycopg")
    return u.render_as_string(hide_password=False)


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    # WAL lets readers run beside the one writer; busy_timeout makes concurrent
    # writers wait instead of failing with "database is locked". synchronous=FULL: a commit returns once
    # the WAL is fsync'd. An answer is released only after its charge commits, and under NORMAL (WAL's
    # usual pairing) the last commits can roll back after an OS crash or power loss: released answers
    # whose charges vanished, a budget that undercounts. One fsync per commit (docs/deploy.md#sqlite).
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=FULL")
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
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, hide_parameters=True,
                               json_serializer=json_dumps, json_deserializer=json_loads)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20, hide_parameters=True,
                         json_serializer=json_dumps, json_deserializer=json_loads)


class Database:
    """An engine and its session factory. Services receive sessions; callers commit."""

    def __init__(self, url: str) -> None:
        self.url = normalize_url(url)
        self.engine = make_engine(url)
        self.sessionmaker = sessionmaker(self.engine, expire_on_commit=False)
        # SQLite has one writer per database file. A connection that finds the write lock taken waits in
        # SQLite's busy handler, which SLEEPS (1, 2, 5, 10, ... 100 ms) and retries: with a few charges in
        # flight the lock sits free while its waiters sleep (issue 27: a 3.7 ms-CPU charge waited 17 ms on
        # average at 16 clients). Hot write transactions of this process queue on this lock instead, and
        # the next one starts the moment the last commits. Other processes on the same file still meet the
        # busy handler (docs/deploy.md: replicas belong on PostgreSQL, whose row lock wakes its waiters).
        self._writer = threading.Lock() if self.engine.dialect.name == "sqlite" else None

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

    @contextmanager
    def write_session(self) -> Iterator[Session]:
        """``session()`` for a short write transaction that the caller commits inside the block (the
        ledger's charge): on SQLite it holds this process's writer lock for the whole session, so
        concurrent writers of this process queue in Python instead of sleeping in SQLite's busy handler.
        Never nest it, and never hold it across model work or I/O other than the database's."""
        if self._writer is None:
            with self.session() as s:
                yield s
            return
        with self._writer, self.session() as s:
            yield s

    def ping(self) -> None:
        with self.engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    def dispose(self) -> None:
        self.engine.dispose()
