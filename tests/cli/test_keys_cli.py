"""`dpicl keys create` says what a new key changes (issue 29, item 2), as a real process on both databases."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import DB_KINDS, make_database_url


@pytest.fixture(params=DB_KINDS)
def db_url(request, tmp_path_factory, pg_databases) -> str:
    from app.store import migrate

    url = make_database_url(request.param, tmp_path_factory, pg_databases)
    migrate.upgrade(url)
    return url


def _keys(url: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, DPICL_DATABASE_URL=url, DPICL_AUTH_MODE="auto")
    return subprocess.run([sys.executable, "-m", "app.cli", "keys", "create", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_keys_create_says_what_changed(db_url):
    from app.store import Database
    from app.store.datasets_repo import create_dataset

    db = Database(db_url)
    try:
        with db.session() as s:  # made while the server was open: tenant "default"
            create_dataset(s, name="tour", task="classification", labels=["a", "b"], template={},
                           exemplars=[("x", "a"), ("y", "b")], tenant_id="default")
            s.commit()
    finally:
        db.dispose()

    first = _keys(db_url, "--tenant", "acme", "--scopes", "infer,audit", "--json")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["tenant"] == "acme"  # stdout stays parseable: the notes go to stderr
    notes = first.stderr
    assert "first key" in notes and "keyed from now on" in notes
    assert "1 dataset(s) belong to tenant 'default'" in notes and "--tenant default" in notes
    assert "no 'admin' scope" in notes

    second = _keys(db_url, "--tenant", "default", "--scopes", "admin")
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines()[1].startswith("dpicl_")
    assert second.stderr == ""  # already keyed, its own tenant's data, admin: nothing changed
