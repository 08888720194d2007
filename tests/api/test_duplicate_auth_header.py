"""A request with more than one Authorization header is refused (401), whatever the keys.

Before, the server used the first header and ignored the rest: ``Authorization: Bearer <A>`` then
``Authorization: Bearer <B>`` acted as tenant A, while a proxy or log in front that reads the last header
(many do) would have attributed the request to B. One request, one key. A real ``dpicl serve``, keyed,
SQLite and PostgreSQL; raw sockets (HTTP clients merge repeated headers).
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tests.conftest import DB_KINDS, full_key, make_database_url, server_settings
from tests.jobs.conftest import fast_env, start_server


@pytest.fixture(scope="module", params=DB_KINDS)
def server(request, tmp_path_factory, pg_databases):
    url = make_database_url(request.param, tmp_path_factory, pg_databases)
    settings = server_settings(url)
    ka, kb = full_key(settings, "ta"), full_key(settings, "tb")
    log = Path(tmp_path_factory.mktemp("serve")) / "serve.log"
    proc, base = start_server(fast_env(url, DPICL_AUTH_MODE="required", DPICL_JOB_RUNNER="none"), log)
    yield int(base.rsplit(":", 1)[1]), ka, kb
    proc.stop()


def _get(port: int, path: str, auths: list[str]) -> tuple[int, dict]:
    head = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: close"]
    head += [f"Authorization: {a}" for a in auths]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    status = int(data.split(b" ", 2)[1])
    body = data.split(b"\r\n\r\n", 1)[1]
    try:
        return status, json.loads(body)
    except ValueError:
        return status, {}


@pytest.mark.parametrize("order", ["a-b", "b-a", "a-a", "a-junk", "junk-a"])
def test_two_authorization_headers_are_refused(server, order):
    port, ka, kb = server
    keys = {"a": ka, "b": kb, "junk": "dpicl_000000000000_junk"}
    auths = [f"Bearer {keys[k]}" for k in order.split("-")]
    status, body = _get(port, "/v1/datasets", auths)
    assert status == 401, (status, body)  # before: 200 as the first header's tenant (a-b, b-a, a-a, a-junk)
    assert body["error"]["code"] == "invalid_api_key", body
    assert "one Authorization header" in body["error"]["message"], body


def test_one_header_still_works(server):
    port, ka, _ = server
    status, body = _get(port, "/v1/datasets", [f"Bearer {ka}"])
    assert status == 200, body
