"""SIGTERM stops ``dpicl serve`` within its graceful timeout even when every worker thread is busy
(issue 26, item 1): uvicorn's ``timeout_graceful_shutdown`` is DPICL_SHUTDOWN_TIMEOUT_SECONDS; the
requests still in flight are cancelled and their (daemon) worker threads end with the process.
Without the timeout uvicorn waits for every busy request to finish, however long that takes."""

from __future__ import annotations

import signal
import threading
import time

import httpx

from tests.jobs.conftest import fast_env, start_server

GRACE = 1.0
# About a second of CPU each (a clip-softmax calibration on a 100k-order grid), 40 at once: the
# thread pool is full and the work left is far longer than GRACE.
HEAVY = dict(mechanism="clip-softmax", solve_for="temperature", target_epsilon=1.0, delta=1e-5, clip=1.0,
             batch_size=10, compositions=1000, orders="2-100000")


def test_sigterm_stops_a_busy_server_within_its_graceful_timeout(tmp_path):
    env = fast_env(f"sqlite:///{tmp_path}/t.db", DPICL_SHUTDOWN_TIMEOUT_SECONDS=GRACE)
    proc, url = start_server(env, tmp_path / "serve.log")
    statuses: list[object] = []

    def ask() -> None:
        try:
            statuses.append(httpx.post(f"{url}/v1/privacy/calibrate", json=HEAVY, timeout=120).status_code)
        except httpx.HTTPError as exc:  # cut off by the shutdown: expected
            statuses.append(type(exc).__name__)

    threads = [threading.Thread(target=ask, daemon=True) for _ in range(40)]
    try:
        for t in threads:
            t.start()
        time.sleep(1.0)  # the requests are in flight
        assert proc.p.poll() is None
        t0 = time.monotonic()
        proc.p.send_signal(signal.SIGTERM)
        proc.p.wait(timeout=60)
        took = time.monotonic() - t0
        assert took < GRACE + 4.0, f"SIGTERM took {took:.1f} s with a {GRACE} s graceful timeout\n{proc.output()}"
        assert "timeout graceful shutdown exceeded" in proc.output() or len(statuses) == 40
    finally:
        proc.stop()
