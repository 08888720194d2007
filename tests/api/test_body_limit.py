"""Bounded bodies (issue 26, item 5): 413 before a body is read, on SQLite and PostgreSQL.

On main before the fix there was no limit: a Content-Length of any size was waited for and read,
and a chunked body was buffered whole (a 200 MB body: +200 MB or more of server memory).
The server runs in this process (tests/conftest.py), so its memory is this process's RSS,
sampled while the body streams; the client side sends lazily, one chunk at a time.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from urllib.parse import urlsplit

import httpx
import pytest

from tests.conftest import running_app, server_settings

MiB = 1 << 20


def _rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def _read_response(sock: socket.socket, timeout: float) -> bytes:
    sock.settimeout(timeout)
    data = b""
    try:
        while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < _content_length(data):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except (TimeoutError, ConnectionError):
        pass
    return data


def _content_length(data: bytes) -> int:
    head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").lower()
    for line in head.split("\r\n"):
        if line.startswith("content-length:"):
            return int(line.split(":", 1)[1])
    return 0


def _send(url: str, path: str, headers: dict[str, str], chunks, *, chunked: bool) -> tuple[int, int, bytes]:
    """POST over a raw socket, stopping as soon as the server answers. Returns (status, body bytes
    sent, response body)."""
    u = urlsplit(url)
    sock = socket.create_connection((u.hostname, u.port), timeout=30)
    hdrs = {"Host": f"{u.hostname}:{u.port}", "Content-Type": "application/json", **headers}
    if chunked:
        hdrs["Transfer-Encoding"] = "chunked"
    sock.sendall((f"POST {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items()) + "\r\n").encode())
    sent = 0
    try:
        for chunk in chunks:
            if select.select([sock], [], [], 0)[0]:
                break  # the server has answered: stop sending
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
            sent += len(chunk)
        else:
            if chunked:
                sock.sendall(b"0\r\n\r\n")
    except (TimeoutError, ConnectionError):
        pass  # the server closed the connection after its answer
    raw = _read_response(sock, timeout=30)
    sock.close()
    status = int(raw.split(b" ", 2)[1]) if raw.startswith(b"HTTP/1.1 ") else 0
    return status, sent, raw.split(b"\r\n\r\n", 1)[-1]


def _zeros(total: int, chunk: int = MiB):
    # A JSON string that never ends: valid as far as it goes. Lazily made, one chunk at a time.
    yield b'{"dataset_id": "ds_x", "query": "'
    for _ in range(total // chunk):
        yield b"x" * chunk


def test_streamed_200mb_body_is_refused_in_bounded_memory(live_server):
    """A 200 MB chunked body to an answer route: 413 after about 1 MiB, server memory flat."""
    peak = [0]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], _rss())
            time.sleep(0.005)

    base = _rss()
    t = threading.Thread(target=sample, daemon=True)
    t.start()
    t0 = time.perf_counter()
    try:
        status, sent, body = _send(live_server, "/v1/private/classify", {}, _zeros(200 * MiB), chunked=True)
    finally:
        stop.set()
        t.join()
    took = time.perf_counter() - t0
    growth = peak[0] - base
    print(f"200 MB chunked body: status {status}, {sent / MiB:.1f} MiB sent before the answer, "
          f"{took:.2f} s, RSS growth {growth / MiB:.1f} MiB")
    assert status == 413, body
    err = json.loads(body)["error"]
    assert err["code"] == "body_too_large" and err["param"] == "body" and "DPICL_MAX_BODY_BYTES" in err["message"]
    assert sent < 64 * MiB  # answered while the body streamed, not after it
    # Buffering the body would grow memory by 200 MB or more; the limit (1 MiB) and socket buffers remain.
    assert growth < 40 * MiB, f"server memory grew {growth / MiB:.1f} MiB"


def test_content_length_over_the_limit_is_refused_before_the_body(live_server):
    """Only the headers are sent: the answer comes without waiting for the 50 MB body."""
    t0 = time.perf_counter()
    status, sent, body = _send(live_server, "/v1/chat/completions", {"Content-Length": str(50 * MiB)}, [],
                               chunked=False)
    assert status == 413, body
    assert sent == 0 and time.perf_counter() - t0 < 10
    # Uploads have their own, larger limit.
    status, _, body = _send(live_server, "/v1/datasets", {"Content-Length": str(200 * MiB)}, [], chunked=False)
    assert status == 413 and b"DPICL_MAX_UPLOAD_BYTES" in body


def test_upload_over_the_answer_limit_is_accepted(live_server):
    """A 2 MiB dataset (over the 1 MiB answer limit, under the upload limit) registers."""
    labels = ["yes", "no"]
    exemplars = [{"input": "w " * 1000 + str(i), "output": labels[i % 2]} for i in range(1100)]
    body = json.dumps({"name": "big", "labels": labels, "exemplars": exemplars}).encode()
    assert len(body) > 2 * MiB
    r = httpx.post(f"{live_server}/v1/datasets", content=body, headers={"content-type": "application/json"},
                   timeout=120)
    assert r.status_code == 201, r.text[:500]


@pytest.fixture(scope="module")
def small_limits(database_url):
    settings = server_settings(database_url, load_models=False, max_body_bytes=4096, max_upload_bytes=16384)
    with running_app(settings, models={}) as c:
        yield c


def test_limits_are_configurable(small_limits):
    c = small_limits
    big = json.dumps({"mechanism": "gaussian", "target_epsilon": 1.0, "pad": "x" * 5000})
    r = c.post("/v1/privacy/calibrate", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413 and "4096 bytes (DPICL_MAX_BODY_BYTES)" in r.json()["error"]["message"]
    # The same body is within the upload limit on the upload route (refused for its content, not size).
    r = c.post("/v1/datasets", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    r = c.post("/v1/datasets", content="x" * 20000, headers={"content-type": "application/json"})
    assert r.status_code == 413 and "DPICL_MAX_UPLOAD_BYTES" in r.json()["error"]["message"]
    # Chunked (no Content-Length): counted as it streams.
    status, _, body = _send(str(c.base_url).rstrip("/"), "/v1/privacy/calibrate", {}, [b"{" + b" " * 1000] * 50,
                            chunked=True)
    assert status == 413, body
    # /ui forms follow the general limit.
    r = c.post("/ui/login", content=b"api_key=" + b"a" * 5000,
               headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.status_code == 413


def test_settings_validation():
    from app.config import SettingsError, load_settings

    with pytest.raises(SettingsError, match="DPICL_MAX_BODY_BYTES"):
        load_settings(max_body_bytes=10)
    assert load_settings().max_body_bytes == MiB and load_settings().max_upload_bytes == 128 * MiB
