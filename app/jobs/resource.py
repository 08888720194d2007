"""The job resource: the JSON that ``GET /v1/audits/{id}`` answers and webhooks deliver."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from app.jobs.secrets import redact
from app.store.job_tables import AuditJob

API_PREFIX = "/v1/audits"


def _time(t: datetime | None) -> str | None:
    return t.isoformat().replace("+00:00", "Z") if t is not None else None


def job_url(job_id: str) -> str:
    return f"{API_PREFIX}/{job_id}"


def job_resource(job: AuditJob, artifacts: list[dict[str, Any]]) -> dict[str, Any]:
    url = job_url(job.id)
    return {
        "id": job.id,
        "object": "audit.job",
        "url": url,
        "kind": job.kind,
        "status": job.status,
        "progress": {"fraction": round(float(job.progress or 0.0), 6), "message": job.progress_message},
        "config": redact(job.config),  # credentials of audited targets are never returned
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
                  slots: int | None = None) -> dict[str, Any] | None:
    """The job resource; a queued job's has ``queue``: its position and what it waits for (app/jobs/queue.py;
    ``slots``: the jobs this server's runner takes at a time, None where workers run them)."""
    from app.jobs import queue
    from app.jobs import repository as repo

    job = repo.get_job(session, job_id, tenant_id)
    if job is None:
        return None
    out = job_resource(job, repo.artifact_index(session, [job.id])[job.id])
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
