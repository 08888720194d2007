"""The key is checked before the body is read (issue 26): a real `dpicl serve` process, keyed, and a
raw socket declaring a 50 MB JSON body with no key.

Before, FastAPI read and parsed the whole body before the key dependency ran: the 401 came only once
all 50 MB had arrived, and the server's peak memory grew by about twice the body.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from tests.conftest import DB_KINDS, make_database_url
from tests.jobs.conftest import fast_env, start_server

BODY_BYTES = 50 * 1024 * 1024
CHUNK = 1024 * 1024


@pytest.fixture(scope="module", params=DB_KINDS)
def server(request, tmp_path_factory, pg_databases):
    url = make_database_url(request.param, tmp_path_factory, pg_databases)
    log = Path(tmp_path_factory.mktemp("serve")) / "serve.log"
    proc, base = start_server(fast_env(url, DPICL_AUTH_MODE="required", DPICL_JOB_RUNNER="none"), log)
    yield proc, int(base.rsplit(":", 1)[1])
    proc.stop()


def _peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def _head(port: int, length: int, auth: str | None = None) -> bytes:
    lines = ["POST /v1/private/classify HTTP/1.1", f"Host: 127.0.0.1:{port}", "Content-Type: application/json",
             f"Content-Length: {length}"] + ([f"Authorization: {auth}"] if auth else [])
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _body_chunks(total: int):
    """A JSON body of ``total`` bytes: one huge string field."""
    head, tail = b'{"dataset_id": "ds_x", "query": "', b'"}'
    yield head
    left = total - len(head) - len(tail)
    block = b"a" * CHUNK
    while left > 0:
        yield block[:left]
        left -= min(left, CHUNK)
    yield tail


def _status(sock: socket.socket) -> int:
    data = b""
    while b"\r\n" not in data:
        got = sock.recv(4096)
        if not got:
            break
        data += got
    return int(data.split(b" ", 2)[1])


@pytest.mark.parametrize("auth", [None, "Bearer dpicl_nosuch_key"], ids=["no-key", "unknown-key"])
def test_401_comes_before_the_body(server, auth):
    """Only 1 MB of a declared 50 MB body is sent: the 401 must come without waiting for the rest."""
    _, port = server
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(_head(port, BODY_BYTES, auth))
        sent = 0
        for chunk in _body_chunks(BODY_BYTES):
            sock.sendall(chunk)
            sent += len(chunk)
            if sent >= CHUNK:
                break
        try:
            status = _status(sock)  # before: no answer, the server waits for 49 more MB (socket timeout)
        except TimeoutError:
            pytest.fail("no answer within 10 s: the server is waiting for the body before checking the key")
    assert status == 401


def test_a_50_mb_body_without_a_key_costs_the_server_no_memory(server):
    proc, port = server
    pid = proc.p.pid
    with socket.create_connection(("127.0.0.1", port), timeout=10) as warm:  # lazy imports, first-request work
        warm.sendall(_head(port, 2) + b"{}")
        assert _status(warm) == 401
    before = _peak_rss_kib(pid)

    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(_head(port, BODY_BYTES))

        def send_all() -> None:
            try:
                for chunk in _body_chunks(BODY_BYTES):
                    sock.sendall(chunk)
            except OSError:  # the server answered and closed: the rest is never read
                pass

        t = threading.Thread(target=send_all, daemon=True)
        t.start()
        status = _status(sock)
        sock.shutdown(socket.SHUT_RDWR)
        t.join(timeout=30)
    grown_mib = (_peak_rss_kib(pid) - before) / 1024
    assert status == 401
    # Before: +100 MB or more (the body held whole, then parsed). After: the request never buffers it.
    assert grown_mib < 16, f"peak RSS grew by {grown_mib:.1f} MiB"
