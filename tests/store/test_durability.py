"""A commit is on disk when it returns, on both databases. An answer is released only after its charge
commits (app/answers/flow.py), so a commit that an OS crash or a power loss could still roll back would
leave released answers whose charges vanished: a budget that undercounts what was spent. On SQLite,
WAL with ``synchronous=NORMAL`` is such a commit (the WAL is fsync'd only at checkpoints); ``FULL``
fsyncs it at every commit. PostgreSQL's ``synchronous_commit`` must not be ``off`` likewise."""

from __future__ import annotations

from sqlalchemy import text

from app.store.db import Database


def test_every_pooled_connection_commits_durably(fresh_database_url):
    db = Database(fresh_database_url)
    try:
        # two connections held at once: the SQLite pragmas are set per connection, as each is opened
        with db.engine.connect() as a, db.engine.connect() as b:
            for conn in (a, b):
                if db.dialect == "sqlite":
                    assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
                    assert conn.execute(text("PRAGMA synchronous")).scalar() == 2  # FULL; NORMAL is 1
                else:
                    assert conn.execute(text("SHOW synchronous_commit")).scalar() != "off"
        with db.write_session() as s:  # the ledger's charges commit through this session
            if db.dialect == "sqlite":
                assert s.execute(text("PRAGMA synchronous")).scalar() == 2
            else:
                assert s.execute(text("SHOW synchronous_commit")).scalar() != "off"
    finally:
        db.engine.dispose()
