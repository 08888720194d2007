"""The audited gateway's answer is untrusted input (app/audit/gateway.py): an endless body and a body
dripped a byte at a time both end the call within bounds, through a real HTTP server."""

from __future__ import annotations

import gzip
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app.audit import gateway
from app.audit.gateway import RetryPolicy, TargetError, TargetUnavailableError, gateway_client, gateway_post


class _Handler(BaseHTTPRequestHandler):
    mode = "ok"

    def log_message(self, *a):
        pass

    def _head(self, **headers):
        self.send_response(200)
        self.send_header("content-type", "application/json")
        for k, v in headers.items():
            self.send_header(k.replace("_", "-"), str(v))
        self.end_headers()

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        if self.mode == "ok":
            data = json.dumps({"id": "ds_1"}).encode()
            self._head(content_length=len(data))
            self.wfile.write(data)
        elif self.mode == "huge":
            self._head()
            try:
                for _ in range(64):  # 64 MiB, never a complete JSON document
                    self.wfile.write(b"[" * 2**20)
            except (BrokenPipeError, ConnectionResetError):
                pass
        elif self.mode == "bomb":  # 32 MiB of zeros, gzipped to ~32 KiB
            data = gzip.compress(b"0" * 32 * 2**20)
            self._head(content_encoding="gzip", content_length=len(data))
            self.wfile.write(data)
        elif self.mode == "drip":
            self._head()
            try:
                for _ in range(200):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.05)
            except (BrokenPipeError, ConnectionResetError):
                pass


@pytest.fixture
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _client(srv, timeout=5.0):
    return gateway_client(f"http://127.0.0.1:{srv.server_address[1]}", None, timeout)


def test_a_normal_answer_is_read(server):
    _Handler.mode = "ok"
    with _client(server) as c:
        assert gateway_post(c, "/v1/datasets", {}, "register", expect=("id",)) == {"id": "ds_1"}


@pytest.mark.parametrize("mode", ["huge", "bomb"])
def test_an_oversized_answer_is_a_target_error_without_reading_it_all(server, mode):
    _Handler.mode = mode
    t0 = time.monotonic()
    with _client(server) as c, pytest.raises(TargetError, match="more than") as info:
        gateway_post(c, "/v1/private/classify", {}, "classify", RetryPolicy(attempts=3, backoff_seconds=0.01))
    assert not isinstance(info.value, TargetUnavailableError)  # not retried: a broken gateway
    assert time.monotonic() - t0 < 20


def test_a_dripped_answer_times_out_within_the_deadline(server, monkeypatch):
    _Handler.mode = "drip"  # a byte every 50 ms: each read well within the 0.5 s timeout, 10 s in all
    monkeypatch.setattr(gateway, "READ_DEADLINE_FACTOR", 2.0)  # 1 s for the whole answer
    t0 = time.monotonic()
    with _client(server, timeout=0.5) as c, pytest.raises(TargetUnavailableError, match="still arriving"):
        gateway_post(c, "/v1/private/classify", {}, "classify", RetryPolicy(attempts=1))
    assert time.monotonic() - t0 < 5
