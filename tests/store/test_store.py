"""Migrations run up and down on both databases and match the ORM tables exactly."""

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from app.store import migrate
from app.store.base import Base
from app.store.db import make_engine
from app.store import models  # noqa: F401


def test_upgrade_downgrade_roundtrip(fresh_database_url):
    url = fresh_database_url
    migrate.upgrade(url)
    assert migrate.current_revision(url) == migrate.head_revision()
    engine = make_engine(url)
    try:
        tables = set(inspect(engine).get_table_names())
        assert {"datasets", "exemplars", "audit_jobs", "job_artifacts"} <= tables
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
        # The migrations create exactly what the models declare.
        assert diff == [], diff
    finally:
        engine.dispose()
    migrate.downgrade(url, "base")
    engine = make_engine(url)
    try:
        assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
    finally:
        engine.dispose()
    migrate.upgrade(url)
    assert migrate.current_revision(url) == migrate.head_revision()


def test_revision_files_are_date_prefixed():
    import re

    files = sorted(p.name for p in migrate.MIGRATIONS_DIR.joinpath("versions").glob("*.py"))
    assert files
    for f in files:
        assert re.match(r"^\d{4}_\d{2}_\d{2}_\w+\.py$", f), f


def test_concurrent_upgrades_do_not_race(fresh_database_url):
    """Several processes starting together on an empty database all succeed (advisory lock on PG)."""
    import subprocess
    import sys

    code = "import sys; from app.store import migrate; migrate.upgrade(sys.argv[1])"
    procs = [subprocess.Popen([sys.executable, "-c", code, fresh_database_url], stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    errs = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    assert all(rc == 0 for rc, _ in errs), [e for rc, e in errs if rc]
    assert migrate.current_revision(fresh_database_url) == migrate.head_revision()
