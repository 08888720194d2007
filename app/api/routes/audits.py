"""Audit jobs over HTTP: submit (202 + Location), get, list, cancel, artifacts."""

from __future__ import annotations

import logging
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from pydantic import ConfigDict, Field

from app.api.json_route import JSONRoute
from app.jsonbody import JSONBody

from app.api.auth import Principal, require
from app.api.errors import APIError, gate_busy
from app.api.schemas import ArtifactList, AuditJob, AuditJobList, AuditKindList, AuditPlan, JobStatus
from app.cpu_gate import GateBusy, run_gated
from app.jobs import registry, service
from app.jobs import repository as repo
from app.jobs.errors import JobError
from app.jobs.resource import attach_queues, job_resource, job_url, load_resource
from app.runtime import Runtime

from app.api.audit_submit import AuditCreate, submit_audit  # noqa: F401 - shared with the /ui form

log = logging.getLogger("dpicl.api.audits")

router = APIRouter(route_class=JSONRoute, prefix="/v1/audits", tags=["audits"])

# Seconds a client should wait before polling a job that is not finished: 1 s for a new job,
# growing with its age (a tenth of it) up to 30 s, so that hour-long audits are not polled every second.
RETRY_AFTER_MIN, RETRY_AFTER_MAX = 1, 30


def retry_after(resource: dict[str, Any]) -> int:
    from datetime import datetime, timezone

    created = datetime.fromisoformat(resource["created_at"].replace("Z", "+00:00"))
    age = (datetime.now(timezone.utc) - created).total_seconds()
    return int(min(RETRY_AFTER_MAX, max(RETRY_AFTER_MIN, age / 10)))

JobId = Annotated[str, Path(min_length=1, max_length=64)]
_require_auditor = require("audit", "admin")


async def _auditor(request: Request) -> Principal:
    # An async dependency (require() resolves the key on the event loop when the AuthMiddleware has already,
    # or in the threadpool when it must read the database): a sync one always costs a thread hop.
    return await _require_auditor(request)


# Every route needs a key with the "audit" scope (open mode: everyone); jobs belong to the key's tenant.
Auditor = Annotated[Principal, Depends(_auditor)]


def _runtime(request: Request) -> Runtime:
    # Read directly rather than through a sync dependency: each sync dependency costs a thread hop.
    return request.app.state.runtime


def _not_found(job_id: str) -> APIError:
    return APIError(404, f"no audit job with id {job_id!r}", param="job_id", code="job_not_found")


def _job_headers(resource: dict[str, Any]) -> dict[str, str]:
    headers = {"Location": resource["url"]}
    if resource["status"] in ("queued", "running"):
        headers["Retry-After"] = str(retry_after(resource))
    return headers


@router.post("", status_code=202, response_model=AuditJob, summary="Submit an audit job")
async def create_audit(
    body: AuditCreate,
    request: Request,
    who: Auditor,
    idempotency_key: Annotated[
        str | None, Header(alias="Idempotency-Key", min_length=1, max_length=200, pattern=r"^[\x21-\x7e]+$")
    ] = None,
):
    sub = await submit_audit(request, body, who, idempotency_key)
    headers = _job_headers(sub.resource)
    if not sub.created:
        headers["Idempotent-Replayed"] = "true"
    return JSONResponse(sub.resource, status_code=202 if sub.created else 200, headers=headers)


class AuditPlanRequest(JSONBody):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["canary_mia"] = Field(default="canary_mia", description="the planner covers canary_mia audits")
    config: dict[str, Any] = Field(default_factory=dict, description="a canary_mia config (trials are planned)")
    claimed_epsilon: float | None = Field(default=None, gt=0, allow_inf_nan=False,
                                          description="default: the target mechanism's own epsilon")
    seconds_per_trial: float | None = Field(default=None, gt=0, allow_inf_nan=False,
                                            description="measured speed of one trial, for the predicted time")


@router.post("/plan", response_model=AuditPlan, response_model_exclude_unset=True,
             summary="Plan an audit: the design and trials that detect stated alternatives")
async def plan_audit(body: AuditPlanRequest, request: Request, who: Auditor):
    """For a canary_mia config and a claim: per candidate design (partitions; black-box bound or
    white-box noise conformance) the trials that detect each of ``config.power.alternatives`` with
    probability >= ``config.power.min_detection``, the predicted model calls and time. Nothing runs."""
    cfg = {**body.config, "trials": 40} if body.config.get("trials") == "auto" else body.config
    try:
        kind, model = service.validate_config(_runtime(request).settings, body.kind, cfg)
        embedder = None
        if getattr(model, "task", None) == "generation":  # the design model measures the signal texts with it
            try:
                embedder = _runtime(request).get_model(model.target.embedder, "embedder")
            except KeyError:
                embedder = None
        return await run_in_threadpool(run_gated, _runtime(request).planner_gate, kind.plan, model,
                                       body.claimed_epsilon, body.seconds_per_trial, embedder)
    except GateBusy as exc:
        raise gate_busy(exc) from None
    except service.ConfigInvalid as exc:
        raise APIError(422, "; ".join(f"{p}: {m}" for p, m in exc.errors[:10]), param=exc.errors[0][0],
                       code="invalid_value") from None
    except JobError as exc:
        param = exc.param if (exc.param or "").startswith("config") else f"config.{exc.param or ''}".rstrip(".")
        raise APIError(422, f"{param}: {exc.message}", param=param, code=exc.code) from None


@router.get("/kinds", response_model=AuditKindList, response_model_exclude_unset=True,
            summary="Job kinds this server accepts, with their config schemas")
def list_kinds(request: Request, who: Auditor):
    kinds = registry.available_kinds(_runtime(request).settings)
    return {
        "object": "list",
        "data": [
            {
                "object": "audit.kind",
                "name": name,
                "description": k.description,
                "config_schema": k.config_model.model_json_schema(),
            }
            for name, k in kinds.items()
        ],
    }


@router.get("", response_model=AuditJobList, response_model_exclude_unset=True,
            summary="List audit jobs (newest first)",
            description="Each job as `GET /v1/audits/{id}` answers it, without `config` (bounded pages: a config may "
                        "be megabytes); `GET /v1/audits/{id}` shows it, inline texts summarised.")
def list_audits(
    request: Request,
    who: Auditor,
    kind: Annotated[str | None, Query(max_length=64)] = None,
    status: Annotated[JobStatus | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    after: Annotated[str | None, Query(max_length=64, description="id of the last job of the previous page")] = None,
):
    with _runtime(request).db.session() as s:
        try:
            jobs, has_more = repo.list_jobs(
                s, tenant_id=who.tenant_id, kind=kind, status=status, limit=limit, after=after, with_config=False
            )
        except KeyError:
            raise APIError(404, f"after: no audit job with id {after!r}", param="after", code="job_not_found") from None
        index = repo.artifact_index(s, [j.id for j in jobs])
        data = [job_resource(j, index[j.id], with_config=False) for j in jobs]  # GET one job for its config
        attach_queues(s, data, who.tenant_id, service.job_slots(_runtime(request)))
    return {
        "object": "list",
        "data": data,
        "has_more": has_more,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
    }


@router.get("/{job_id}", response_model=AuditJob, summary="An audit job: status, progress, result, verdict")
def get_audit(job_id: JobId, request: Request, who: Auditor):
    rt = _runtime(request)
    with rt.db.session() as s:
        resource = load_resource(s, job_id, who.tenant_id, service.job_slots(rt), rt.settings)
    if resource is None:
        raise _not_found(job_id)
    return JSONResponse(resource, headers=_job_headers(resource))


@router.post("/{job_id}/cancel", response_model=AuditJob,
             summary="Cancel a job (a running one stops at its next progress point)")
def cancel_audit(job_id: JobId, request: Request, who: Auditor):
    resource = service.cancel(_runtime(request), job_id, who.tenant_id)
    if resource is None:
        raise _not_found(job_id)
    if resource["status"] in ("succeeded", "failed"):
        raise APIError(
            409, f"job {job_id} already {resource['status']}; there is nothing to cancel", code="job_finished"
        )
    runner = service.get_runner(request.app)
    if runner is not None and resource["status"] == "running":
        runner.cancel_local(job_id)
    return JSONResponse(resource, headers=_job_headers(resource))


@router.get("/{job_id}/artifacts", response_model=ArtifactList, response_model_exclude_unset=True,
            summary="A job's artifacts")
def list_artifacts(job_id: JobId, request: Request, who: Auditor):
    with _runtime(request).db.session() as s:
        if repo.get_job(s, job_id, who.tenant_id) is None:
            raise _not_found(job_id)
        items = repo.artifact_index(s, [job_id])[job_id]
    base = job_url(job_id)
    return {"object": "list", "data": [dict(a, url=f"{base}/artifacts/{a['name']}") for a in items]}


ARTIFACT_BYTES = {"description": "The artifact's bytes, with its media type (image/png, application/json, text/csv...)",
                  "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}}}


@router.get("/{job_id}/artifacts/{name}", summary="Download one artifact (PNG, JSON, CSV...)", response_class=Response,
            responses={200: ARTIFACT_BYTES})
def get_artifact(job_id: JobId, name: Annotated[str, Path(max_length=200)], request: Request, who: Auditor):
    with _runtime(request).db.session() as s:
        if repo.get_job(s, job_id, who.tenant_id) is None:
            raise _not_found(job_id)
        art = repo.get_artifact(s, job_id, name)
        if art is None:
            raise APIError(404, f"job {job_id} has no artifact named {name!r}", param="name", code="artifact_not_found")
        content, media_type = art.content, art.media_type
    return Response(
        content=content,
        media_type=media_type,
        headers={"Content-Disposition": f'attachment; filename="{name}"', "Cache-Control": "private, max-age=3600"},
    )

