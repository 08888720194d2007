"""A real ``dpicl serve`` in a subprocess for the audit benchmarks: open mode, SQLite in a fresh temporary
folder (its log beside it), a free port; returned once ``/v1/health`` answers 200 (models loaded)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_dpicl(name: str, env: dict[str, str], wait_s: float = 300.0) -> tuple[subprocess.Popen, str]:
    """``dpicl serve`` with ``env`` over the defaults above; (process, base URL). SystemExit naming the log
    when it is not healthy within ``wait_s``."""
    tmp = Path(tempfile.mkdtemp(prefix=f"dpicl-{name}-"))
    port = free_port()
    full = {**os.environ, "DPICL_DATABASE_URL": f"sqlite:///{tmp}/bench.db", "DPICL_AUTH_MODE": "open",
            "DPICL_PORT": str(port), **env}
    log = open(tmp / "server.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve"], cwd=ROOT, env=full, stdout=log,
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    if not wait_healthy(proc, url, wait_s):
        raise SystemExit(f"dpicl serve ({name}) did not become healthy: {tmp / 'server.log'}")
    return proc, url


def wait_healthy(proc: subprocess.Popen, url: str, wait_s: float = 300.0) -> bool:
    """True once ``url``'s ``/v1/health`` answers 200; False (the process killed) when it exits or
    ``wait_s`` passes first."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"{url}/v1/health", timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    return False


def stop(*procs: subprocess.Popen) -> None:
    for proc in procs:
        proc.terminate()
        proc.wait(30)
