"""A client that closes its connection before release is never charged (issue 19: cancellation on
client disconnect, before the charge). Real server, real SmolLM2, SQLite and PostgreSQL."""

from __future__ import annotations

import json
import re
import socket
import time
from urllib.parse import urlparse

import httpx

from tests.answers.test_gateway_api import PURE, T, _dataset


def _closed_count(url: str) -> float:
    """Requests to /v1/private/classify that ended 499 (client closed), from GET /metrics."""
    text = httpx.get(f"{url}/metrics").text
    pat = re.compile(r'^dpicl_request_seconds_count\{([^}]*)\} ([0-9.e+]+)$', re.M)
    return sum(float(v) for labels, v in pat.findall(text)
               if 'status="499"' in labels and "/v1/private/classify" in labels)


def test_a_request_closed_before_release_is_not_charged(live_server):
    ds = _dataset(live_server, epsilon=5.0)
    before = _closed_count(live_server)
    body = json.dumps({"dataset_id": ds, "query": "Is it going to rain tonight?", **PURE}).encode()
    u = urlparse(live_server)
    with socket.create_connection((u.hostname, u.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/private/classify HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Idempotency-Key: gone-1\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        time.sleep(0.05)  # the server has the whole request; then the client goes away
    deadline = time.monotonic() + T
    while _closed_count(live_server) <= before:  # the server noticed and stopped (or the test times out)
        assert time.monotonic() < deadline, "the closed request was not stopped before release"
        time.sleep(0.2)
    budget = httpx.get(f"{live_server}/v1/datasets/{ds}/budget").json()
    assert budget["charges"] == 0 and budget["epsilon_spent"] == 0.0
    assert httpx.get(f"{live_server}/v1/datasets/{ds}/ledger").json()["data"] == []
    # The same key from a client that stays: computed afresh and charged once.
    r = httpx.post(f"{live_server}/v1/private/classify", timeout=T, content=body,
                   headers={"Idempotency-Key": "gone-1", "Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    assert httpx.get(f"{live_server}/v1/datasets/{ds}/budget").json()["charges"] == 1
