"""A batch scheduler in front of one in-process model: concurrent calls coalesced into batched forwards.

Without it, the ``hf`` backend serialises forward passes with one lock per model,
so N concurrent answers cost N forwards of a few rows each (issue 19: 16 clients
were 0.70x sequential). With it, each scoring call (``next_token_logprobs``,
``continuation_logprobs``) becomes a *job* in a bounded FIFO queue; one worker
thread per model takes the oldest job and every queued job that can share its
batch, up to ``max_batch_tokens`` row tokens, and runs them as one call of the
model's batched path. That path already computes a batch's common token prefix
once and right-pads the suffixes with exact position ids and masks (kv.py), so
each row's numbers equal its one-at-a-time numbers up to float32 rounding, and
a tenant's shared prompt header is computed once for all its requests' rows.

Fair sharing: the queue is FIFO *per submitter* and round robin *between*
submitters (an audit job submits as ``job:<id>``, :func:`~app.llm.tenancy.submitter_scope`;
any other caller, e.g. a live answer's request thread, as its thread). A batch
is led by the oldest job of the submitter served least recently and filled with
the first queued job of each submitter before anyone's second (same batch key,
token budget and cost rule as before). So a job of another submitter waits for
at most one batch per submitter with work queued, however many calls one
submitter (a synthesis, a flood of threads) has queued; with one submitter,
or one job per submitter, the order is plain FIFO, as before
(tests/llm/test_scheduler.py, ``test_round_robin_*``).

The batching is continuous in the sense that matters on a busy server: the
worker never idles while jobs wait and never waits for a batch to fill
(``max_wait_ms`` 0 by default): jobs that arrive while a batch runs form the
next batch. Decode steps of concurrent ``DecodeSession``\\ s are jobs too
(``submit_step``): the worker takes every queued step of the same batch key at
once and hands them to the model's step runner, which merges those it judges
worth merging into one forward pass (their KV caches left-padded to a common
length, ``step_merge.run_steps``) and runs the others one by one. A session joins
the running batch simply by queueing its next step; it leaves by not queueing
one. Steps are background work (never refused, never dropped at a deadline): a
generation that has started (and may have been charged) runs to its end.

Jobs can share a batch when they are the same kind of call, with the same
continuations (for continuation scoring), and, with ``isolate_tenants`` (the
default), of the same tenant (app/llm/tenancy.py); a scoring job of more than
``merge_job_tokens`` row tokens runs alone (the cost rule, :meth:`BatchScheduler._merges`). Why tenants do not share a
batch by default: docs/models.md#batching-and-tenants.

Back-pressure applies to interactive work, i.e. calls made inside a
``deadline_scope`` (the API sets one around every answer): the queue holds at
most ``max_queue`` such jobs and one that does not fit raises :class:`Overloaded`
at once (the API answers 503 with ``Retry-After``, before any budget is
charged); a job still queued at its deadline is dropped and its caller gets
:class:`DeadlineExceeded`; a job already running is waited for (a forward pass
cannot be interrupted). Background work (audit jobs, the CLI, library use: no
deadline scope) is queued and batched the same way but never refused: it has
no client waiting to retry, and failing a long audit for a burst of traffic
would be worse than waiting.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .errors import LLMError
from .tenancy import current_deadline, current_submitter, current_tenant, spend_work, tenant_scope

log = logging.getLogger(__name__)


class Overloaded(LLMError):
    """The model's queue is full: try again after ``retry_after`` seconds (no work was done)."""

    def __init__(self, message: str, *, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


class DeadlineExceeded(Overloaded, TimeoutError):
    """The job waited in the queue past its deadline and was dropped (no work was done)."""


DEFAULT_BATCH_TOKENS = 4096


@dataclass(frozen=True)
class SchedulerOptions:
    enabled: bool = True
    # Row tokens (prompt tokens of every row) per coalesced batch. None: the model's default (hf:
    # 4096 on CPU, from the device's memory on CUDA, app/llm/budget.py; others 4096).
    max_batch_tokens: int | None = None
    max_wait_ms: float = 0.0  # how long the oldest job may wait for company; 0: never wait
    max_queue: int = 64  # interactive jobs queued per model before Overloaded
    isolate_tenants: bool = True
    # The cost rule for scoring jobs: a job of more row tokens than this is compute-bound and runs in a
    # batch of its own (see _merges). 0: no limit. None: the model's default (hf: 512 on CPU, 0 elsewhere).
    merge_job_tokens: int | None = None

    @classmethod
    def from_options(cls, opts: dict[str, Any]) -> SchedulerOptions:
        o = dict(opts.get("scheduler") or {})
        unknown = set(o) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"options.scheduler: unknown keys {sorted(unknown)}")
        out = cls(**o)
        if (out.max_batch_tokens is not None and out.max_batch_tokens < 1) or out.max_queue < 1 or out.max_wait_ms < 0:
            raise ValueError("options.scheduler: max_batch_tokens and max_queue must be >= 1, max_wait_ms >= 0")
        if out.merge_job_tokens is not None and (isinstance(out.merge_job_tokens, bool)
                                                 or not isinstance(out.merge_job_tokens, int)
                                                 or out.merge_job_tokens < 0):
            raise ValueError("options.scheduler: merge_job_tokens must be an integer >= 0")
        return out


@dataclass(eq=False)
class _Job:
    key: Hashable  # jobs with equal keys may share a batch
    rows: list[list[int]]
    tenant: str | None
    deadline: float | None  # None: background work, never dropped
    submitter: Hashable = None  # whose turn it is in the round robin (see module doc)
    enqueued: float = field(default_factory=time.monotonic)
    done: threading.Event = field(default_factory=threading.Event)
    state: str = "queued"  # queued, running, done, dropped
    result: Any = None
    error: BaseException | None = None
    payload: Any = None  # a decode step's KV batch (step jobs only)

    @property
    def tokens(self) -> int:
        return sum(len(r) for r in self.rows)


# (model name, event, numbers) callbacks: the API's /metrics installs one (app/api/metrics.py).
# Events: "batch" {jobs, rows, tokens, seconds, cpu_seconds (the worker thread's), waited_s (list)}, "rejected" {reason}.
OBSERVERS: list[Callable[[str, str, dict[str, Any]], None]] = []
SCHEDULERS: weakref.WeakSet[BatchScheduler] = weakref.WeakSet()


def _notify(model: str, event: str, data: dict[str, Any]) -> None:
    for fn in list(OBSERVERS):
        try:
            fn(model, event, data)
        except Exception:  # a metrics bug must not fail model work
            log.exception("scheduler observer failed")


def _submitter() -> Hashable:
    """Whose turn a new job takes: the submitter scope (an audit job), else the calling thread."""
    sub = current_submitter()
    return ("submitter", sub) if sub is not None else ("thread", threading.get_ident())


class BatchScheduler:
    """One worker thread and one bounded queue for one model (see module doc).

    ``run(key, rows) -> array`` computes a batch: ``rows`` are the token rows of
    every job in it, concatenated; the answer's first axis follows the rows.
    """

    def __init__(self, name: str, run: Callable[[Hashable, list[list[int]]], np.ndarray], opts: SchedulerOptions,
                 *, model_stats: Callable[[], dict[str, int]] | None = None,
                 run_steps: Callable[[list[tuple[Any, list[int]]]], list[Any]] | None = None):
        self.name = name
        if opts.max_batch_tokens is None:
            opts = replace(opts, max_batch_tokens=DEFAULT_BATCH_TOKENS)
        self.max_batch_tokens: int = int(opts.max_batch_tokens or DEFAULT_BATCH_TOKENS)
        self.model_stats = model_stats  # the model's own counters (hf: ForwardStats), for /metrics
        self.opts = opts
        self._run = run
        # Decode steps: ``run_steps([(payload, tokens), ...]) -> [result, ...]``, one result per step.
        self._run_steps = run_steps
        self._queue: deque[_Job] = deque()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._busy = 0.0  # EWMA of seconds per batch, for Retry-After
        self.running = 0  # jobs in the batch being computed
        self._turn = 0  # batches taken so far
        self._served: dict[Hashable, int] = {}  # submitter -> turn it last had a job in a batch
        self.stats = {"jobs": 0, "batches": 0, "rows": 0, "tokens": 0, "rejected": 0, "expired": 0}
        SCHEDULERS.add(self)

    @property
    def depth(self) -> int:
        """Jobs waiting (not the running batch)."""
        return len(self._queue)

    def _interactive_depth(self) -> int:  # under _cond: submit and the worker change the queue under it
        return sum(1 for j in self._queue if j.deadline is not None)

    def retry_after(self) -> int:
        """Seconds after which a refused caller may expect room: the queue's batches at the recent pace."""
        per_batch = self._busy or 1.0
        return int(min(60, max(1, round(per_batch * max(1, len(self._queue)) / 4))))

    # ------------------------------------------------------------ callers

    def admit(self) -> None:
        """Raise :class:`Overloaded` when a new interactive job would not fit (for work that does not
        queue, e.g. decoding; a no-op outside a deadline scope)."""
        if not self.opts.enabled or current_deadline() is None:
            return
        # Counted under the lock: iterating the queue while a submitter appends to it or the worker takes a
        # batch raised "deque mutated during iteration", a 500 for about one fresh server in four under
        # 16-64 concurrent answers (issue 27's serving benchmark, CPU and GPU alike).
        with self._cond:
            full = self._interactive_depth() >= self.opts.max_queue
        if full:
            self._reject("queue_full")

    def _reject(self, reason: str) -> None:
        self.stats["rejected"] += 1
        _notify(self.name, "rejected", {"reason": reason})
        ra = self.retry_after()
        if reason == "deadline":
            raise DeadlineExceeded(f"model {self.name!r}: the request waited past its deadline in the model queue; "
                                   f"retry after {ra} s", retry_after=ra)
        raise Overloaded(f"model {self.name!r} is overloaded ({self.opts.max_queue} requests queued); "
                         f"retry after {ra} s", retry_after=ra)

    def submit(self, key: Hashable, rows: Sequence[Sequence[int]]) -> np.ndarray:
        """Queue ``rows`` under ``key``, wait for the batch that carries them, return their part of its answer."""
        row_lists = [list(r) for r in rows]
        spend_work(sum(len(r) for r in row_lists), f"{len(row_lists)} prompt rows")  # before any work
        if not self.opts.enabled or not row_lists or threading.current_thread() is self._thread:
            return self._run(key, row_lists)
        deadline = current_deadline()
        if deadline is not None and deadline <= time.monotonic():
            self._reject("deadline")
        job = _Job(key=key, rows=row_lists, tenant=current_tenant(), deadline=deadline, submitter=_submitter())
        with self._cond:
            if self._closed:
                raise LLMError(f"model {self.name!r} is closed")
            if deadline is not None and self._interactive_depth() >= self.opts.max_queue:
                self._reject("queue_full")
            self._queue.append(job)
            self._ensure_worker()
            self._cond.notify_all()
        if not job.done.wait(None if deadline is None else max(0.0, deadline - time.monotonic())):
            with self._cond:
                if job.state == "queued":
                    self._queue.remove(job)
                    job.state = "dropped"
            if job.state == "dropped":
                self.stats["expired"] += 1
                self._reject("deadline")
            job.done.wait()  # running: a forward pass is not interrupted
        if job.error is not None:
            raise job.error
        return job.result

    def submit_step(self, payload: Any, tokens: Sequence[int]) -> Any:
        """Queue one decode step (``payload``: the session's KV batch, ``tokens``: one per row) and
        wait for it. Steps of the same tenant queued together reach the model's step runner together.
        Background work: never refused for a full queue, never dropped at a deadline."""
        if self._run_steps is None:
            raise LLMError(f"model {self.name!r} has no decode step runner")
        toks = [int(t) for t in tokens]
        if not self.opts.enabled or threading.current_thread() is self._thread:
            out = self._run_steps([(payload, toks)])[0]
            if isinstance(out, BaseException):
                raise out
            return out
        job = _Job(key=("step",), rows=[[t] for t in toks], tenant=current_tenant(), deadline=None,
                   payload=payload, submitter=_submitter())
        with self._cond:
            if self._closed:
                raise LLMError(f"model {self.name!r} is closed")
            self._queue.append(job)
            self._ensure_worker()
            self._cond.notify_all()
        job.done.wait()
        if job.error is not None:
            raise job.error
        return job.result

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # ------------------------------------------------------------- worker

    def _ensure_worker(self) -> None:  # under _cond
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, name=f"dpicl-batch-{self.name}", daemon=True)
            self._thread.start()

    def _batch_key(self, job: _Job) -> Hashable:
        return (job.key, job.tenant) if self.opts.isolate_tenants else job.key

    def _merges(self, job: _Job) -> bool:
        """The cost rule: whether a scoring job may share a batch with others. On a CPU a forward pass
        is compute-bound: merging saves a pass's fixed cost (~50 ms for SmolLM2-135M, mostly reading the
        weights) per job and stage, while a job of 512 prompt tokens already costs ~1.4 s of arithmetic
        that merging does not reduce; the bigger chunks of a merged batch cost more in KV-cache copies
        and padding than the saved passes (three ``rnm`` 8 x 4 answers merged ran 5-8% slower than one
        after the other; docs/models.md, "The batch scheduler"). So a job over ``merge_job_tokens`` runs
        alone, exactly as it would with no concurrent traffic."""
        limit = self.opts.merge_job_tokens or 0
        return limit <= 0 or job.tokens <= limit

    def _fair_order(self) -> list[_Job]:
        """Under _cond: the queued jobs in the order of service (module doc, "Fair sharing"): each
        submitter's k-th queued job before anyone's (k+1)-th, among k-th jobs the submitter served least
        recently first (never served: first of all), then queue order. With one job per submitter this
        is the queue order."""
        nth: dict[Hashable, int] = {}
        ranked = []
        for pos, job in enumerate(self._queue):
            k = nth.get(job.submitter, 0)
            nth[job.submitter] = k + 1
            ranked.append((k, self._served.get(job.submitter, -1), pos, job))
        ranked.sort(key=lambda t: t[:3])
        return [t[3] for t in ranked]

    def _mark_served(self, batch: list[_Job]) -> None:
        """Under _cond: record this batch's turn for its submitters (bounded: forget idle ones)."""
        self._turn += 1
        for job in batch:
            self._served[job.submitter] = self._turn
        if len(self._served) > 1024:
            queued = {j.submitter for j in self._queue}
            self._served = {s: t for s, t in self._served.items() if s in queued or t == self._turn}

    def _take(self) -> list[_Job] | None:
        """Under _cond: the first job in the order of service (:meth:`_fair_order`) and every queued job
        that may share its batch, in that order, within the token budget and the cost rule
        (:meth:`_merges`); a job left out keeps its place in the queue."""
        while not self._queue:
            if self._closed:
                return None
            self._cond.wait()
        if self.opts.max_wait_ms > 0:
            until = self._queue[0].enqueued + self.opts.max_wait_ms / 1000
            while (time.monotonic() < until and not self._closed
                   and sum(j.tokens for j in self._queue) < self.max_batch_tokens):
                self._cond.wait(max(0.0, until - time.monotonic()))
        order = self._fair_order()
        first = order[0]
        key = self._batch_key(first)
        batch: list[_Job] = [first]
        tokens = first.tokens
        steps = first.key == ("step",)  # the step runner groups steps by its own cost rule
        if steps or self._merges(first):
            for job in order[1:]:
                if self._batch_key(job) != key or not (steps or self._merges(job)):
                    continue
                if not steps and tokens + job.tokens > self.max_batch_tokens:
                    break
                batch.append(job)
                tokens += job.tokens
        for job in batch:
            self._queue.remove(job)
            job.state = "running"
        self._mark_served(batch)
        self.running = len(batch)
        return batch

    def _loop(self) -> None:
        while True:
            with self._cond:
                batch = self._take()
            if batch is None:
                return
            now = time.monotonic()
            live = []
            for job in batch:
                if job.deadline is not None and job.deadline <= now:  # its caller is about to give up (or has): do not compute it
                    job.state = "dropped"
                    self.stats["expired"] += 1
                    job.error = DeadlineExceeded(
                        f"model {self.name!r}: the request waited past its deadline in the model queue",
                        retry_after=self.retry_after())
                    job.done.set()
                else:
                    live.append(job)
            if live:
                self._execute(live, now)
            self.running = 0

    def _execute(self, batch: list[_Job], started: float) -> None:
        rows = [r for job in batch for r in job.rows]
        tenants = {job.tenant for job in batch}
        # One tenant: its own prefix-cache scope. Several (isolate_tenants off): a scope of this batch
        # alone, so no tenant's cached prefix serves or perturbs another's rows.
        scope = batch[0].tenant if len(tenants) == 1 else f"\x00batch-{id(batch)}-{started}"
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            with tenant_scope(scope):
                if batch[0].key == ("step",):
                    assert self._run_steps is not None
                    outs = self._run_steps([(job.payload, [r[0] for r in job.rows]) for job in batch])
                else:
                    out = self._run(batch[0].key, rows)
        except BaseException as exc:  # noqa: BLE001 - handed to the callers
            if batch[0].key == ("step",):  # the runner reports a step's own failure in its result; this is not one
                for job in batch:
                    job.error = exc
                    job.state = "done"
                    job.done.set()
                return
            if len(batch) > 1:  # one job's bad input must not fail its neighbours: run each alone
                for job in batch:
                    self._execute([job], started)
                return
            batch[0].error = exc
            batch[0].state = "done"
            batch[0].done.set()
            return
        seconds = time.perf_counter() - t0
        cpu_seconds = time.thread_time() - c0  # this worker thread's CPU: seconds minus waits (GIL, cores)
        self._busy = seconds if not self._busy else 0.8 * self._busy + 0.2 * seconds
        i = 0
        for b, job in enumerate(batch):
            if batch[0].key == ("step",):
                if isinstance(outs[b], BaseException):
                    job.error = outs[b]
                else:
                    job.result = outs[b]
            else:
                job.result = out[i:i + len(job.rows)] if len(batch) == 1 else out[i:i + len(job.rows)].copy()
            i += len(job.rows)
            job.state = "done"
            job.done.set()
        n_tokens = sum(len(r) for r in rows)
        self.stats["jobs"] += len(batch)
        self.stats["batches"] += 1
        self.stats["rows"] += len(rows)
        self.stats["tokens"] += n_tokens
        _notify(self.name, "batch", {"jobs": len(batch), "rows": len(rows), "tokens": n_tokens, "seconds": seconds,
                                     "cpu_seconds": cpu_seconds, "waited_s": [started - j.enqueued for j in batch]})
