"""Job service: submission, cancellation, and the runner that starts with the server.

``install(app)`` (called by ``create_app``) adds a start-up hook that starts the
runner chosen by ``DPICL_JOB_RUNNER``:

- ``inprocess``: threads in this server claim and run jobs (embedded SQLite default);
- ``procrastinate``: this server defers each job to procrastinate; ``dpicl worker``
  processes run them (PostgreSQL default);
- ``none``: this server queues rows only (something else runs them).
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from app.jobs import config_view, egress, registry, secrets
from app.jobs import repository as repo
from app.jobs.errors import JobConfigError, JobError
from app.jobs.resource import job_resource, load_resource
from app.store.base import DEFAULT_TENANT

if TYPE_CHECKING:
    from app.config import Settings
    from app.runtime import Runtime

log = logging.getLogger("dpicl.jobs")


def runner_mode(settings: Settings) -> str:
    mode = settings.job_runner
    if mode == "auto":
        return "inprocess" if settings.is_sqlite else "procrastinate"
    if mode == "procrastinate" and settings.is_sqlite:
        raise RuntimeError(
            "DPICL_JOB_RUNNER=procrastinate needs PostgreSQL (DPICL_DATABASE_URL=postgresql://...); "
            "with SQLite use inprocess (or auto)"
        )
    return mode


def request_hash(kind: str, config: dict[str, Any], claimed_epsilon, claimed_delta, webhook_url) -> str:
    body = {
        "kind": kind,
        "config": config,
        "claimed_epsilon": claimed_epsilon,
        "claimed_delta": claimed_delta,
        "webhook_url": webhook_url,
    }
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


class UnknownKind(JobError):
    code = "unknown_kind"


@dataclass
class ConfigInvalid(Exception):
    """The config failed the kind's schema: one entry per field, ``param`` = ``config.<field>``."""

    errors: list[tuple[str, str]]


def validate_config(settings: Settings, kind_name: str, config: dict[str, Any]) -> tuple[registry.JobKind, BaseModel]:
    kind = registry.get_kind(kind_name, settings)
    if kind is None:
        names = sorted(registry.available_kinds(settings))
        raise UnknownKind(f"unknown audit kind {kind_name!r}; available kinds: {', '.join(names) or 'none'}", param="kind")
    try:
        model = kind.config_model.model_validate(config)
    except ValidationError as exc:
        errs = []
        for e in exc.errors():
            loc = ".".join(str(p) for p in e.get("loc", ()))
            errs.append((f"config.{loc}" if loc else "config", e.get("msg", "invalid value")))
        raise ConfigInvalid(errs) from None
    kind.check(model, settings)
    secrets.check(model, settings)
    return kind, model


@dataclass
class Submitted:
    resource: dict[str, Any]
    created: bool
    job_id: str


def submit(
    runtime: Runtime,
    *,
    kind_name: str,
    config: dict[str, Any],
    claimed_epsilon: float | None,
    claimed_delta: float | None,
    webhook_url: str | None,
    idempotency_key: str | None,
    tenant_id: str = DEFAULT_TENANT,
    enqueue=None,
) -> Submitted:
    """Validate and insert a queued job (blocking: call it from a thread). Raises UnknownKind,
    ConfigInvalid, JobConfigError, repo.IdempotencyConflict, repo.QueueFull."""
    settings = runtime.settings
    summarised = config_view.summarised_field(kind_name, config)
    if summarised is not None:
        raise JobConfigError("holds the summary of an inline text ({\"omitted\": \"inline text\", ...}), not the "
                             "text: responses never carry inline texts, put the text back", param=f"config.{summarised}")
    kind, model = validate_config(settings, kind_name, config)
    kind.admit(runtime, tenant_id, model)
    if webhook_url and not settings.webhook_secret:
        raise JobConfigError(
            "webhook_url needs a signing secret on the server: set DPICL_WEBHOOK_SECRET (16+ characters)",
            param="webhook_url",
        )
    if webhook_url:
        try:
            egress.check_url(webhook_url, settings)
        except egress.EgressRefused as exc:
            raise JobConfigError(str(exc), param="webhook_url") from None
    # The stored hash and config hold no plain key: an HMAC in the hash, the encrypted key in the config.
    digest = request_hash(kind_name, secrets.hash_view(config, settings), claimed_epsilon, claimed_delta, webhook_url)
    secrets.seal(model, settings)
    with runtime.db.session() as s:
        job, created = repo.create_job(
            s,
            kind=kind_name,
            config=model.model_dump(mode="json"),
            claimed_epsilon=claimed_epsilon,
            claimed_delta=claimed_delta,
            webhook_url=webhook_url,
            idempotency_key=idempotency_key,
            request_hash=digest,
            max_attempts=settings.job_max_attempts,
            tenant_id=tenant_id,
            enqueue=enqueue,
            max_queued=settings.job_max_queued_per_tenant,
        )
        if created:
            resource = job_resource(job, [], settings)
        else:
            resource = load_resource(s, job.id, tenant_id, job_slots(runtime), settings)
    return Submitted(resource=resource, created=created, job_id=job.id)


def cancel(runtime: Runtime, job_id: str, tenant_id: str = DEFAULT_TENANT) -> dict[str, Any] | None:
    with runtime.db.session() as s:
        job = repo.request_cancel(s, job_id, tenant_id)
        if job is None:
            return None
        return load_resource(s, job_id, tenant_id, job_slots(runtime), runtime.settings)


def job_slots(runtime: Runtime) -> int | None:
    """Jobs this server runs at a time (its in-process runner's slots); None where workers run them."""
    return runtime.settings.job_concurrency if runtime.extras.get("job_runner") == "inprocess" else None


def get_runner(app) -> Any:
    return getattr(app.state, "job_runner", None)


def install(app) -> None:
    async def start_jobs(app, rt: Runtime) -> None:
        mode = runner_mode(rt.settings)
        runner = None
        if mode == "inprocess":
            from app.jobs.runner import InProcessRunner

            runner = InProcessRunner(rt)
            runner.start()
        elif mode == "procrastinate":
            from app.jobs.pg_transport import ProcrastinateTransport

            runner = ProcrastinateTransport(rt)
            await runner.start()
        app.state.job_runner = runner
        rt.extras["job_runner"] = mode
        log.info("audit jobs: runner %s; kinds %s", mode, sorted(registry.available_kinds(rt.settings)))

    async def stop_jobs(app, rt: Runtime) -> None:
        runner = getattr(app.state, "job_runner", None)
        app.state.job_runner = None
        if runner is None:
            return
        if runner.name == "inprocess":
            from fastapi.concurrency import run_in_threadpool

            await run_in_threadpool(runner.stop)
        else:
            await runner.stop()

    app.state.job_runner = None
    app.state.startup_hooks.append(start_jobs)
    app.state.shutdown_hooks.append(stop_jobs)
