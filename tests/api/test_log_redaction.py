"""An API key sent where it does not belong (a query string, a path) never reaches the server log.

The server reads keys from the Authorization header only, but uvicorn's access log writes every request
line with its query string: a client that sent ``?api_key=dpicl_..._<secret>`` (a common habit) left the
secret in the log, readable by whoever reads logs (seen: ``"GET /v1/datasets?api_key=dpicl_2350..._mZZB...
HTTP/1.1" 401``). Now the secret part of any key-shaped string in an access-log line is replaced by
``[redacted]``; the prefix, which names the key without opening anything, stays.

A real ``dpicl serve`` process (its own uvicorn logging), keyed, SQLite and PostgreSQL.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import DB_KINDS, full_key, make_database_url, server_settings
from tests.jobs.conftest import fast_env, start_server

FAKE = "dpicl_0123456789ab_FAKESECRETzzQ-x_y9"


@pytest.fixture(scope="module", params=DB_KINDS)
def server(request, tmp_path_factory, pg_databases):
    url = make_database_url(request.param, tmp_path_factory, pg_databases)
    key = full_key(server_settings(url), "logs")
    log = Path(tmp_path_factory.mktemp("serve")) / "serve.log"
    proc, base = start_server(fast_env(url, DPICL_AUTH_MODE="required", DPICL_JOB_RUNNER="none",
                                       DPICL_LOG_LEVEL="debug"), log)
    yield base, key, log
    proc.stop()


def test_a_key_in_the_url_is_not_logged(server):
    base, key, log = server
    secret = key.split("_", 2)[2]
    auth = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=base, timeout=30) as c:
        assert c.get(f"/v1/datasets?api_key={key}").status_code == 401  # a key in the query opens nothing
        assert c.get(f"/v1/datasets?api_key={key}", headers=auth).status_code == 200
        assert c.get("/v1/datasets", params={"key": FAKE, "x": key}, headers=auth).status_code == 200
        assert c.get(f"/v1/datasets/{key}", headers=auth).status_code in (404, 422)
        assert c.get(f"/v1/audits/{FAKE}", headers=auth).status_code in (404, 422)
        assert c.get(f"/ui/login?next=/ui/audits%3Fk%3D{key}").status_code == 200
        assert c.get("/v1/health").status_code == 200  # the last line, to wait for below
    text = ""
    for _ in range(50):
        text = log.read_text(errors="replace")
        if "GET /v1/health" in text:
            break
        time.sleep(0.1)
    lines = [ln for ln in text.splitlines() if "GET /v1/datasets" in ln or "GET /v1/audits/" in ln or "/ui/login" in ln]
    assert len(lines) >= 6, text[-3000:]  # the access log is on: a missing log would not pass this test
    assert secret not in text, [ln for ln in text.splitlines() if secret in ln]  # before: 5 lines
    assert "FAKESECRET" not in text
    prefix = key.split("_", 2)[1]
    assert f"dpicl_{prefix}_[redacted]" in text  # which key it was stays visible
