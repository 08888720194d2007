from __future__ import annotations

import json
import logging
import threading
from array import array
from collections import OrderedDict
from contextlib import contextmanager
from typing import Any, Iterator

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


_CURVES: OrderedDict[bytes, str] = OrderedDict()
_CURVES_SIZE = 64
_CURVES_LOCK = threading.Lock()
_MIN_CURVE = 32


def json_dumps(value: Any) -> str:
    """``json.dumps(value)``, the text of a long list of floats remembered by its bits (issue 27).

    A charge writes RDP curves (~156 floats each; a float's shortest repr is most of ``json.dumps``'
    time): the entry's curve is the same for every answer with the same parameters, only the account's
    running sum changes. The key is the floats' IEEE bytes, so only bit-identical lists share a text
    (-0.0 and 0.0, or a list holding an int, never do); anything else is ``json.dumps`` as before."""
    if type(value) is list and len(value) >= _MIN_CURVE and all(type(x) is float for x in value):
        key = array("d", value).tobytes()
        with _CURVES_LOCK:
            text = _CURVES.get(key)
            if text is not None:
                _CURVES.move_to_end(key)
                return text
        text = json.dumps(value)
        with _CURVES_LOCK:
            _CURVES[key] = text
            if len(_CURVES) > _CURVES_SIZE:
                _CURVES.popitem(last=False)
        return text
    return json.dumps(value)


def make_engine(url: str) -> Engine:
    """An engine that never writes bound parameters (exemplar text, keys) into logs or exception
    messages (``hide_parameters``), nor result rows into DEBUG logs."""
    url = normalize_url(url)
    _quiet_rows()
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, hide_parameters=True,
                               json_serializer=json_dumps)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20, hide_parameters=True,
                         json_serializer=json_dumps)


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
