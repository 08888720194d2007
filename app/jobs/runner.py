"""The in-process runner (embedded mode): threads inside ``dpicl serve``.

A dispatcher thread claims queued rows (up to ``job_concurrency`` at a time) and
hands them to executor threads; it also runs the reaper and, in a thread of its
own, webhook deliveries. Nothing here touches the event loop: the API only calls
:meth:`notify` (set an event) after it commits a new row.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from app.jobs import registry, webhooks
from app.jobs import repository as repo
from app.jobs.context import JobContext
from app.jobs.executor import execute_job, new_worker_id

if TYPE_CHECKING:
    from app.runtime import Runtime

log = logging.getLogger("dpicl.jobs.runner")


# A job thread that runs pure Python holds the GIL; every other thread (the event loop, the request
# threads) waits up to the interpreter's switch interval (5 ms by default) each time it wants the GIL
# back, and a submission wants it back after every socket/SQLite call and thread hop. The in-process
# runner lowers the interval while it runs (process-wide; restored on stop). 0 keeps Python's default.
SWITCH_INTERVAL_ENV = "DPICL_JOB_SWITCH_INTERVAL_MS"
DEFAULT_SWITCH_INTERVAL_MS = 1.0


def switch_interval_seconds() -> float | None:
    raw = os.environ.get(SWITCH_INTERVAL_ENV, "").strip()
    ms = float(raw) if raw else DEFAULT_SWITCH_INTERVAL_MS
    return ms / 1e3 if ms > 0 else None


_switch_lock = threading.Lock()
_switch_users = 0
_switch_saved: float | None = None


def _lower_switch_interval() -> None:
    global _switch_users, _switch_saved
    interval = switch_interval_seconds()
    with _switch_lock:
        _switch_users += 1
        if interval is not None and interval < sys.getswitchinterval():
            if _switch_saved is None:
                _switch_saved = sys.getswitchinterval()
            sys.setswitchinterval(interval)


def _restore_switch_interval() -> None:
    global _switch_users, _switch_saved
    with _switch_lock:
        _switch_users -= 1
        if _switch_users == 0 and _switch_saved is not None:
            sys.setswitchinterval(_switch_saved)
            _switch_saved = None


def maintenance_interval(settings) -> float:
    """How often the reaper looks for stalled jobs: a few times per stall period."""
    return max(0.05, min(settings.job_stall_seconds / 4, settings.job_heartbeat_seconds, 10.0))


class InProcessRunner:
    name = "inprocess"

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.settings = runtime.settings
        self.worker_id = new_worker_id("server")
        self.concurrency = self.settings.job_concurrency
        self._wake = threading.Event()
        self._hook_wake = threading.Event()
        self._stopping = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="dpicl-job")
        self._running: dict[str, JobContext | None] = {}
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._lowered_switch = False

    # -- lifecycle

    def start(self) -> None:
        registry.all_kinds()  # import every kind now, not in the first job's heartbeat window
        _lower_switch_interval()
        self._lowered_switch = True
        for target, name in ((self._dispatch_loop, "dpicl-jobs-dispatch"), (self._webhook_loop, "dpicl-jobs-webhooks")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)
        log.info("in-process job runner %s started (concurrency %d)", self.worker_id, self.concurrency)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop claiming; running jobs stop at their next progress point and go back to the queue."""
        self._stopping.set()
        self._wake.set()
        self._hook_wake.set()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(timeout=max(0.1, deadline - time.monotonic()))
        self._pool.shutdown(wait=False, cancel_futures=True)
        while self._running and time.monotonic() < deadline:
            time.sleep(0.05)
        with self._lock:  # a job finishing now pops its id: never iterate the dict outside the lock
            still = sorted(self._running)
        if still:
            log.warning("jobs still running at shutdown: %s (the reaper will retry them)", still)
        if self._lowered_switch:
            self._lowered_switch = False
            _restore_switch_interval()

    def notify(self) -> None:
        self._wake.set()

    def cancel_local(self, job_id: str) -> None:
        """A cancel request for a job running here takes effect at its next progress point without a DB round trip."""
        with self._lock:
            ctx = self._running.get(job_id)
        if ctx is not None:
            ctx.request_cancel()

    def status(self) -> dict:
        with self._lock:
            return {"runner": self.name, "worker_id": self.worker_id, "running": sorted(self._running)}

    # -- threads

    def _dispatch_loop(self) -> None:
        db = self.runtime.db
        next_maintenance = 0.0
        while not self._stopping.is_set():
            try:
                now = time.monotonic()
                if now >= next_maintenance:
                    with db.session() as s:
                        report = repo.reap_stalled(s, self.settings.job_stall_seconds)
                    if report:
                        log.warning("reaper: requeued %s, failed %s, cancelled %s",
                                    report.requeued, report.failed, report.cancelled)
                        if report.failed or report.cancelled:
                            self._hook_wake.set()
                    next_maintenance = now + maintenance_interval(self.settings)
                while len(self._running) < self.concurrency and not self._stopping.is_set():
                    with db.session() as s:
                        job_id = repo.claim_next(s, self.worker_id)
                    if job_id is None:
                        break
                    with self._lock:
                        self._running[job_id] = None
                    self._pool.submit(self._run, job_id)
            except Exception:
                log.exception("job dispatcher error (retrying)")
            timeout = min(self.settings.job_poll_seconds, maintenance_interval(self.settings))
            self._wake.wait(timeout)
            self._wake.clear()

    def _run(self, job_id: str) -> None:
        def on_context(ctx: JobContext | None) -> None:
            with self._lock:
                if job_id in self._running:
                    self._running[job_id] = ctx

        try:
            execute_job(
                self.runtime, job_id, self.worker_id, should_stop=self._stopping.is_set, on_context=on_context
            )
        except Exception:
            log.exception("job %s: runner error (the reaper will retry it)", job_id)
        finally:
            with self._lock:
                self._running.pop(job_id, None)
            self._hook_wake.set()
            self._wake.set()

    def _webhook_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                webhooks.deliver_due(self.runtime)
            except Exception:
                log.exception("webhook delivery error (retrying)")
            self._hook_wake.wait(min(self.settings.job_poll_seconds, 1.0))
            self._hook_wake.clear()
