"""A bounded gate for CPU-bound request work (the audit planner): at most ``concurrency`` callers
run at once, at most ``queue`` more wait, and anyone beyond that is refused at once with
``GateBusy`` (the API answers 503 + Retry-After). Without it, a burst of ``POST /v1/audits/plan``
requests (seconds of CPU each) holds every thread of the server's pool, and every other route that
needs one waits behind them (docs/security.md, "No input that ties up a worker").

Thread-based on purpose: the planner runs in worker threads, and a waiter blocks only its own
thread, of which there are at most ``queue``.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")


class GateBusy(Exception):
    """The gate is full (``concurrency`` running, ``queue`` waiting) or a waiter ran out of time."""

    def __init__(self, name: str, retry_after: int, message: str) -> None:
        super().__init__(message)
        self.name = name
        self.retry_after = retry_after


class CpuGate:
    def __init__(self, name: str, concurrency: int, queue: int, *, max_wait_seconds: float = 60.0) -> None:
        if concurrency < 1 or queue < 0 or not max_wait_seconds > 0:
            raise ValueError("concurrency >= 1, queue >= 0 and max_wait_seconds > 0 are required")
        self.name = name
        self.concurrency = concurrency
        self.queue = queue
        self.max_wait_seconds = max_wait_seconds
        self._cond = threading.Condition()
        self._running = 0
        self._waiting = 0
        self._mean_seconds = 1.0  # running mean of one holder's time, for Retry-After

    @property
    def running(self) -> int:
        return self._running

    @property
    def waiting(self) -> int:
        return self._waiting

    def _retry_after(self) -> int:
        ahead = self._running + self._waiting
        return max(1, math.ceil(self._mean_seconds * ahead / self.concurrency))

    @contextmanager
    def slot(self) -> Iterator[None]:
        with self._cond:
            if self._running >= self.concurrency:
                if self._waiting >= self.queue:
                    raise GateBusy(self.name, self._retry_after(),
                                   f"the {self.name} is busy ({self._running} running, {self._waiting} waiting): "
                                   "retry after Retry-After seconds")
                self._waiting += 1
                deadline = time.monotonic() + self.max_wait_seconds
                try:
                    while self._running >= self.concurrency:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            raise GateBusy(self.name, self._retry_after(),
                                           f"the {self.name} stayed busy for {self.max_wait_seconds:g} s: retry "
                                           "after Retry-After seconds")
                        self._cond.wait(left)
                finally:
                    self._waiting -= 1
            self._running += 1
        t0 = time.monotonic()
        try:
            yield
        finally:
            spent = time.monotonic() - t0
            with self._cond:
                self._running -= 1
                self._mean_seconds = 0.8 * self._mean_seconds + 0.2 * spent
                self._cond.notify()


def run_gated(gate: CpuGate, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` inside one of the gate's slots (call it from a worker thread)."""
    with gate.slot():
        return fn(*args, **kwargs)
