"""A database that stops answering is a 503 ``database_unavailable`` with Retry-After, not a 500, and the
server recovers by itself once the database is back (app/api/errors.py).

Real PostgreSQL: the test's database is closed to new connections and the server's are terminated (what a
restart or a failover does to a pool), then reopened. The error names no statement, parameter or row.
"""

from __future__ import annotations

import pytest

from tests.conftest import PG_ADMIN_URL, SKIP_PG, running_app, server_settings

pytestmark = pytest.mark.skipif(SKIP_PG, reason="DPICL_TEST_SKIP_POSTGRES=1")

SECRET = "patient 4471 was seen for a zz-canary-disorder"


def _admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql)


def test_postgres_going_away_is_a_503_and_the_server_recovers(pg_databases):
    url = pg_databases.create()
    name = url.rsplit("/", 1)[1]
    settings = server_settings(url, auth_mode="open", job_runner="none")
    with running_app(settings, models={}, timeout=30) as c:
        r = c.post("/v1/datasets", json={"name": "notes", "labels": ["a", "b"], "exemplars": [
            {"input": SECRET, "output": "a"}, {"input": "the other one", "output": "b"}]})
        assert r.status_code in (200, 201), r.text
        ds = r.json()["id"]
        _admin(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        try:
            _admin(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'")
            for path in ("/v1/datasets", f"/v1/datasets/{ds}", f"/v1/datasets/{ds}/budget"):
                r = c.get(path)
                assert r.status_code == 503, (path, r.status_code, r.text)
                err = r.json()["error"]
                assert err["code"] == "database_unavailable" and r.headers["Retry-After"] == "1"
                assert "SELECT" not in r.text and SECRET not in r.text and name not in r.text
                r = c.post("/v1/datasets", json={"name": "more", "labels": ["a", "b"], "exemplars": [
                {"input": SECRET, "output": "a"}, {"input": "the other one", "output": "b"}]})
            assert r.status_code == 503 and r.json()["error"]["code"] == "database_unavailable", r.text
            assert SECRET not in r.text
        finally:
            _admin(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        r = c.get(f"/v1/datasets/{ds}")  # the pool reconnects (pre-ping): no restart needed
        assert r.status_code == 200 and r.json()["id"] == ds
        assert [d["id"] for d in c.get("/v1/datasets").json()["data"]] == [ds]  # the refused write left nothing
