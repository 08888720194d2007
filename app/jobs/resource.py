"""The job resource: the JSON that ``GET /v1/audits/{id}`` answers and webhooks deliver.

Its ``config`` is :func:`app.jobs.config_view.public_config` of the stored one (credentials
redacted, inline texts summarised); a listing's items carry no config (``with_config=False``)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from app.jobs.config_view import public_config
from app.store.job_tables import AuditJob

if TYPE_CHECKING:
    from app.config import Settings

API_PREFIX = "/v1/audits"


def _time(t: datetime | None) -> str | None:
    return t.isoformat().replace("+00:00", "Z") if t is not None else None


def job_url(job_id: str) -> str:
    return f"{API_PREFIX}/{job_id}"


def job_resource(job: AuditJob, artifacts: list[dict[str, Any]], settings: Settings | None = None, *,
                 with_config: bool = True) -> dict[str, Any]:
    """``settings``: the server's (its DPICL_SECRETS_KEY keys the summaries' digests); ``with_config=False``
    leaves the config out (a listing: it never reads the column, which list_jobs may not have loaded)."""
    url = job_url(job.id)
    return {
        "id": job.id,
        "object": "audit.job",
        "url": url,
        "kind": job.kind,
        "status": job.status,
        "progress": {"fraction": round(float(job.progress or 0.0), 6), "message": job.progress_message},
        # credentials of audited targets and inline texts (exemplars, canary texts...) are never returned
        **({"config": public_config(job.kind, job.config, settings)} if with_config else {}),
        "claimed_epsilon": job.claimed_epsilon,
        "claimed_delta": job.claimed_delta,
        "verdict": job.verdict,
        "verdict_reason": (job.result or {}).get("verdict_reason") if isinstance(job.result, dict) else None,
        "result": job.result,
        "error": {"message": job.error, "code": job.error_code} if job.error else None,
        "cancel_requested": bool(job.cancel_requested),
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "created_at": _time(job.created_at),
        "started_at": _time(job.started_at),
        "finished_at": _time(job.finished_at),
        "heartbeat_at": _time(job.heartbeat_at),
        "artifacts": [dict(a, url=f"{url}/artifacts/{a['name']}") for a in artifacts],
        "webhook": (
            {"url": job.webhook_url, "status": job.webhook_status, "attempts": job.webhook_attempts}
            if job.webhook_url
            else None
        ),
    }


def load_resource(session, job_id: str, tenant_id: str | None = "default",
                  slots: int | None = None, settings: Settings | None = None) -> dict[str, Any] | None:
    """The job resource; a queued job's has ``queue``: its position and what it waits for (app/jobs/queue.py;
    ``slots``: the jobs this server's runner takes at a time, None where workers run them)."""
    from app.jobs import queue
    from app.jobs import repository as repo

    job = repo.get_job(session, job_id, tenant_id)
    if job is None:
        return None
    out = job_resource(job, repo.artifact_index(session, [job.id])[job.id], settings)
    if job.status == "queued":
        out["queue"] = queue.queue_of(session, job, slots)
    return out


def attach_queues(session, resources: list[dict[str, Any]], tenant_id: str, slots: int | None = None) -> None:
    """Add ``queue`` to the queued jobs of a listing (one look at the queue for the whole page)."""
    from app.jobs import queue

    if not any(r["status"] == "queued" for r in resources):
        return
    view = queue.load_view(session)
    for r in resources:
        pos = view.position(r["id"]) if r["status"] == "queued" else None
        if pos is not None:
            r["queue"] = queue.describe(pos, len(view.queued), view.running, tenant_id, slots)


# What a listing shows of each config (/ui's target column: app/ui/views.py::describe_target): these top-level
# keys, read by the database (JSON paths), so that a page never loads whole configs.
LIST_CONFIG_KEYS = ("target", "mechanism", "models")


def attach_config_heads(session, resources: list[dict[str, Any]], settings: Settings | None = None) -> None:
    """Give each listed resource a ``config`` of :data:`LIST_CONFIG_KEYS` only (public_config of them)."""
    from sqlalchemy import select

    if not resources:
        return
    cols = [AuditJob.config[k] for k in LIST_CONFIG_KEYS]
    rows = session.execute(select(AuditJob.id, *cols).where(AuditJob.id.in_([r["id"] for r in resources])))
    heads = {row[0]: {k: v for k, v in zip(LIST_CONFIG_KEYS, row[1:]) if v is not None} for row in rows}
    for r in resources:
        r["config"] = public_config(r["kind"], heads.get(r["id"], {}), settings)
