"""Runs one claimed job: the same code under the in-process runner and procrastinate workers."""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from app.jobs import registry
from app.jobs import repository as repo
from app.jobs.context import JobContext
from app.jobs.errors import (
    JobCancelled,
    JobError,
    JobLost,
    JobShutdown,
    RetryableJobError,
)
from app.llm.tenancy import submitter_scope, tenant_scope

if TYPE_CHECKING:
    from app.runtime import Runtime

log = logging.getLogger("dpicl.jobs")


def new_worker_id(prefix: str = "runner") -> str:
    """Unique per runner: host, process and a random suffix (shown in the reaper's messages)."""
    return f"{prefix}@{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def _json_clean(value: Any) -> Any:
    """Results are stored as JSON: numpy scalars become numbers, non-finite floats become strings."""
    if isinstance(value, dict):
        return {str(k): _json_clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_clean(v) for v in value]
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return _json_clean(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return "inf" if value > 0 else ("-inf" if value < 0 else "nan")
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"the job's result holds a {type(value).__name__}, which is not JSON")


def _config_error_message(exc: ValidationError) -> str:
    parts = []
    for e in exc.errors()[:5]:
        loc = ".".join(str(p) for p in e.get("loc", ()))
        parts.append(f"config.{loc}: {e.get('msg', 'invalid')}" if loc else f"config: {e.get('msg', 'invalid')}")
    return "; ".join(parts)


def execute_job(
    runtime: Runtime,
    job_id: str,
    worker_id: str,
    *,
    should_stop: Callable[[], bool] = lambda: False,
    on_context: Callable[[JobContext | None], None] | None = None,
) -> str:
    """Run a job this worker has claimed until it ends; returns the row's status afterwards
    (``queued`` when handed back to the queue, ``lost`` when another worker owns it now)."""
    settings = runtime.settings
    with runtime.db.session() as s:
        job = repo.get_job(s, job_id, tenant_id=None)
        if job is None or job.status != "running" or job.worker_id != worker_id:
            return "lost"
        kind_name, raw_config, attempt = job.kind, job.config, job.attempts
        job_tenant = job.tenant_id
        claimed_epsilon, claimed_delta = job.claimed_epsilon, job.claimed_delta
        max_attempts = job.max_attempts

    def fail(message: str, code: str) -> str:
        with runtime.db.session() as s:
            repo.finish(s, job_id, worker_id, "failed", error=message, error_code=code, progress_message="failed")
        return "failed"

    def _crash(exc: BaseException) -> str:
        log.error("job %s (%s) crashed", job_id, kind_name, exc_info=exc)
        # The exception's type only: its text may quote what the job was working on (exemplar text).
        return fail(
            f"Internal error while running the {kind_name} job: {type(exc).__name__}. "
            "This is a bug in dpicl or its environment, not in your config; resubmitting may help "
            "if the cause was transient, otherwise report it with the job id.",
            "internal_error",
        )

    # Heartbeat from the first moment: looking up the kind and validating may take a while on a busy machine.
    ctx = JobContext(runtime, job_id=job_id, kind=kind_name, attempt=attempt, worker_id=worker_id, should_stop=should_stop)
    ctx.claimed_epsilon, ctx.claimed_delta = claimed_epsilon, claimed_delta
    ctx.start_heartbeat()
    kind = registry.get_kind(kind_name, settings)
    if kind is None:
        ctx.stop_heartbeat()
        return fail(
            f"This worker cannot run jobs of kind {kind_name!r} (it offers {sorted(registry.available_kinds(settings))}). "
            "Run the job on a worker that has this kind installed (and, for test-only kinds, DPICL_JOB_TEST_KINDS=true).",
            "unknown_kind",
        )
    try:
        config = kind.config_model.model_validate(raw_config)
    except ValidationError as exc:
        ctx.stop_heartbeat()
        return fail(f"The stored config is no longer valid for kind {kind_name!r}: {_config_error_message(exc)}", "invalid_config")
    except JobError as exc:
        ctx.stop_heartbeat()
        return fail(f"The stored config is no longer valid for kind {kind_name!r}: {exc.message}", "invalid_config")

    if on_context:
        on_context(ctx)
    log.info("job %s (%s) attempt %d started on %s", job_id, kind_name, attempt, worker_id)
    try:
        try:
            ctx.checkpoint()
            # The model scheduler takes turns between jobs (and live answers): this job's calls are one
            # submitter however many it queues (app/llm/scheduler.py, "Fair sharing"). Its model work is
            # its tenant's, as a live answer's is: its cached prompt prefixes (its exemplars) and batch rows
            # never meet another tenant's (app/llm/tenancy.py).
            with submitter_scope(f"job:{job_id}"), tenant_scope(job_tenant):
                result = kind.run(ctx, config)
            if not isinstance(result, dict):
                raise TypeError(f"kind {kind_name!r} returned a {type(result).__name__}, not a dict")
            result = _json_clean(result)
            verdict = kind.verdict(result, claimed_epsilon, claimed_delta)
        finally:
            ctx.stop_heartbeat()
            if on_context:
                on_context(None)
    except JobCancelled:
        with runtime.db.session() as s:
            repo.finish(s, job_id, worker_id, "cancelled", progress_message="cancelled while running")
        log.info("job %s cancelled", job_id)
        return "cancelled"
    except JobShutdown:
        with runtime.db.session() as s:
            repo.release(s, job_id, worker_id, f"handed back to the queue: worker {worker_id} is stopping")
        log.info("job %s handed back to the queue (worker stopping)", job_id)
        return "queued"
    except JobLost:
        log.warning("job %s was taken from worker %s (missed heartbeats); dropping this attempt", job_id, worker_id)
        return "lost"
    except RetryableJobError as exc:
        if attempt < max_attempts:
            with runtime.db.session() as s:
                repo.requeue(s, job_id, worker_id, f"attempt {attempt} failed ({exc.message}); queued again")
            return "queued"
        return fail(f"{exc.message} (after {attempt} attempts)", exc.code)
    except JobError as exc:
        msg = f"{exc.param}: {exc.message}" if exc.param and not exc.message.startswith(exc.param) else exc.message
        return fail(msg, exc.code)
    except ValueError as exc:
        if not hasattr(exc, "param"):
            return _crash(exc)
        # The library layers raise ValueError subclasses naming the field (e.g. PrivacyInputError.param).
        param = getattr(exc, "param", None)
        message = getattr(exc, "message", None) or str(exc)
        text = f"config.{param}: {message}" if param else f"invalid input: {message}"
        return fail(f"The job's config cannot be computed: {text}. Fix the config and resubmit.", "invalid_config")
    except Exception as exc:
        return _crash(exc)

    artifacts = [("result.json", "application/json", json.dumps(result, indent=2, sort_keys=True).encode())]
    with runtime.db.session() as s:
        ok = repo.finish(
            s, job_id, worker_id, "succeeded", result=result, verdict=verdict, progress_message="done", artifacts=artifacts
        )
    if not ok:
        log.warning("job %s finished on %s but another worker owns it now; result dropped", job_id, worker_id)
        return "lost"
    log.info("job %s succeeded (verdict %s)", job_id, verdict)
    return "succeeded"
