"""``Database.write_session``: on SQLite, this process's write transactions queue on a Python lock (the next
starts the moment the last ends) instead of sleeping in SQLite's busy handler; on PostgreSQL it is a plain
session (a row lock already wakes its waiters)."""

from __future__ import annotations

import threading

from sqlalchemy import text

from app.store.db import Database


def test_writers_of_one_process_queue_on_sqlite_and_not_on_postgresql(fresh_database_url):
    db = Database(fresh_database_url)
    inside, release, second_in = threading.Event(), threading.Event(), threading.Event()

    def first() -> None:
        with db.write_session() as s:
            s.execute(text("SELECT 1"))
            inside.set()
            release.wait(10)

    def second() -> None:
        with db.write_session() as s:
            s.execute(text("SELECT 1"))
            second_in.set()

    a = threading.Thread(target=first)
    a.start()
    assert inside.wait(10)
    b = threading.Thread(target=second)
    b.start()
    try:
        if db.dialect == "sqlite":
            assert not second_in.wait(0.3)  # the first writer holds the process's writer lock
        else:
            assert second_in.wait(10)  # no process-wide lock: PostgreSQL locks rows
    finally:
        release.set()
        a.join(10)
        b.join(10)
    assert second_in.is_set()
    db.dispose()


def test_a_failed_write_releases_the_lock(fresh_database_url):
    db = Database(fresh_database_url)
    try:
        with db.write_session() as s:
            s.execute(text("SELECT no_such_column FROM no_such_table"))
    except Exception:
        pass
    done = threading.Event()

    def again() -> None:
        with db.write_session() as s:
            s.execute(text("SELECT 1"))
        done.set()

    t = threading.Thread(target=again)
    t.start()
    t.join(10)
    assert done.is_set()
    db.dispose()
