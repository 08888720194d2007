"""What a running kind sees: ``ctx.progress``, ``ctx.add_artifact``, ``ctx.runtime``."""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from app.jobs import repository as repo
from app.jobs.errors import JobCancelled, JobLost, JobShutdown

if TYPE_CHECKING:
    from app.runtime import Runtime

log = logging.getLogger("dpicl.jobs")

_ARTIFACT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
# Progress writes closer together than this are kept in memory (the heartbeat thread
# and the next write carry them); a cancel flag read by any write is seen at the next progress point.
_MIN_WRITE_INTERVAL = 0.2


class JobContext:
    """Handed to ``JobKind.run``. Not shared between threads other than the job's heartbeat."""

    # The job's claim (set by the executor): kinds that plan power against it read it.
    claimed_epsilon: float | None = None
    claimed_delta: float | None = None

    def __init__(
        self,
        runtime: Runtime,
        *,
        job_id: str,
        kind: str,
        attempt: int,
        worker_id: str,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> None:
        self.runtime = runtime
        self.settings = runtime.settings
        self.job_id = job_id
        self.kind = kind
        self.attempt = attempt
        self.worker_id = worker_id
        self._should_stop = should_stop
        self._cancel = threading.Event()
        self._lost = threading.Event()
        self._last_write = 0.0
        self._message: str | None = None
        self._fraction = 0.0
        self._reported = False
        self._hb_stop = threading.Event()
        self._hb_thread: threading.Thread | None = None

    # -- for kinds

    def progress(self, fraction: float, message: str | None = None) -> None:
        """Report progress (0..1) and a short message. A progress point: raises JobCancelled when
        cancel was requested, JobShutdown when the worker is stopping."""
        f = float(fraction)
        self._fraction = min(1.0, max(0.0, f)) if math.isfinite(f) else self._fraction
        if message is not None:
            self._message = message
        self._reported = True
        now = time.monotonic()
        if now - self._last_write >= _MIN_WRITE_INTERVAL:
            self._last_write = now
            self._write(progress=self._fraction, message=self._message)
        self.checkpoint()

    def checkpoint(self) -> None:
        """A progress point without new progress."""
        if self._lost.is_set():
            raise JobLost(self.job_id)
        if self._cancel.is_set():
            raise JobCancelled(self.job_id)
        if self._should_stop():
            raise JobShutdown(self.job_id)

    def add_artifact(self, name: str, media_type: str, content: bytes) -> None:
        """Store a plot or raw result (PNG, JSON, CSV...) for download; a later one with the same name replaces it."""
        if not _ARTIFACT_NAME.match(name) or ".." in name:
            raise ValueError(f"artifact name {name!r}: use letters, digits, '.', '_' and '-' (at most 200)")
        if not isinstance(content, (bytes, bytearray)):
            raise TypeError("artifact content must be bytes")
        with self.runtime.db.session() as s:
            if not repo.put_artifact(s, self.job_id, self.worker_id, name, media_type, bytes(content)):
                self._lost.set()
                raise JobLost(self.job_id)

    @property
    def cancel_requested(self) -> bool:
        return self._cancel.is_set()

    def request_cancel(self) -> None:
        """Same-process shortcut of a cancel request (the row is flagged as well)."""
        self._cancel.set()

    # -- heartbeat

    def _write(self, progress: float | None = None, message: str | None = None) -> None:
        with self.runtime.db.session() as s:
            state = repo.heartbeat(s, self.job_id, self.worker_id, progress=progress, message=message)
        if not state.owned:
            self._lost.set()
        elif state.cancel_requested:
            self._cancel.set()

    def start_heartbeat(self) -> None:
        interval = self.settings.job_heartbeat_seconds

        def beat() -> None:
            while not self._hb_stop.wait(interval):
                try:
                    # Carries the latest progress too (writes closer than _MIN_WRITE_INTERVAL were skipped).
                    self._write(progress=self._fraction if self._reported else None, message=self._message)
                except Exception:  # a database hiccup: the next beat tries again
                    log.warning("heartbeat of job %s failed", self.job_id, exc_info=True)
                if self._lost.is_set():
                    return

        self._hb_thread = threading.Thread(target=beat, name=f"heartbeat-{self.job_id[-8:]}", daemon=True)
        self._hb_thread.start()

    def stop_heartbeat(self) -> None:
        self._hb_stop.set()
        if self._hb_thread is not None:
            self._hb_thread.join(timeout=30)

    def info(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "kind": self.kind, "attempt": self.attempt, "worker_id": self.worker_id}
