"""Shared by the ledger's tests: a migrated database of each kind (``db``)."""

from __future__ import annotations

import pytest

from app.store import Database


@pytest.fixture
def db(database_url):
    d = Database(database_url)
    yield d
    d.dispose()
