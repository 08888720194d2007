"""Submitting an audit job from a request: the validation and error mapping that ``POST /v1/audits`` and the
/ui form share (below both, so that /ui imports no route module)."""

from __future__ import annotations

from functools import partial
from typing import Any

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from pydantic import AnyHttpUrl, ConfigDict, Field

from app.api.errors import APIError, gate_busy
from app.api.principal import Principal
from app.cpu_gate import GateBusy, run_gated
from app.jobs import registry, service
from app.jobs import repository as repo
from app.jobs.errors import JobError
from app.jsonbody import JSONBody

__all__ = ["AuditCreate", "submit_audit"]


class AuditCreate(JSONBody):
    model_config = ConfigDict(extra="forbid")

    kind: str = Field(min_length=1, max_length=64, description="job kind, e.g. 'epsilon'")
    config: dict[str, Any] = Field(default_factory=dict, description="validated against the kind's schema")
    claimed_epsilon: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    claimed_delta: float | None = Field(default=None, ge=0, lt=1, allow_inf_nan=False)
    webhook_url: AnyHttpUrl | None = Field(default=None, description="receives the final job JSON, HMAC-signed")


async def submit_audit(request: Request, body: AuditCreate, principal: Principal,
                       idempotency_key: str | None = None):
    """Validate and enqueue one audit job; bad input raises the API's 422 naming the field
    (shared by POST /v1/audits and the /ui form, which shows the message next to that field)."""
    tenant_id = principal.tenant_id
    kind = registry.get_kind(body.kind, request.app.state.runtime.settings)
    if kind is not None and kind.spends_budget and not (principal.has("infer") or principal.has("admin")):
        raise APIError(403, f"kind {body.kind!r} spends a dataset's privacy budget: it needs a key with the "
                       "infer or admin scope", param="kind", code="insufficient_scope")
    webhook_url = str(body.webhook_url) if body.webhook_url is not None else None
    runner = service.get_runner(request.app)
    # trials "auto" in a direct audit runs the planner at submit (seconds of CPU): through its gate.
    cfg = body.config
    plans = cfg.get("trials") == "auto" and cfg.get("mode", "direct") == "direct"
    gate = request.app.state.runtime.planner_gate if plans else None
    try:
        sub = await run_in_threadpool(
            service.submit if gate is None else partial(run_gated, gate, service.submit),
            request.app.state.runtime,
            kind_name=body.kind,
            config=body.config,
            claimed_epsilon=body.claimed_epsilon,
            claimed_delta=body.claimed_delta,
            webhook_url=webhook_url,
            idempotency_key=idempotency_key,
            tenant_id=tenant_id,
            enqueue=getattr(runner, "enqueue", None),
        )
    except service.ConfigInvalid as exc:
        param = exc.errors[0][0]
        message = "; ".join(f"{p}: {m}" for p, m in exc.errors[:10])
        raise APIError(422, message, param=param, code="invalid_value") from None
    except JobError as exc:
        param = exc.param or "config"
        if not (param.startswith("config") or param in ("kind", "webhook_url")):
            param = f"config.{param}"
        message = exc.message if exc.message.startswith(param) else f"{param}: {exc.message}"
        raise APIError(getattr(exc, "http_status", 422), message, param=param, code=exc.code) from None
    except GateBusy as exc:
        raise gate_busy(exc) from None
    except repo.QueueFull as exc:
        raise APIError(429, f"this tenant already has {exc.queued} queued jobs (the limit is {exc.limit}, "
                       "DPICL_JOB_MAX_QUEUED_PER_TENANT): retry later", param="kind", code="queue_full",
                       headers={"Retry-After": "10"}) from None
    except repo.IdempotencyConflict as exc:
        raise APIError(
            409,
            f"Idempotency-Key {idempotency_key!r} was already used for job {exc.job_id} with a different request "
            "body; use a new key for a different request",
            param="Idempotency-Key",
            code="idempotency_key_reused",
        ) from None
    if sub.created and runner is not None:
        runner.notify()
    return sub
