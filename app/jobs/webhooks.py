"""Webhook delivery: the final job JSON, POSTed to ``webhook_url`` once a job ends.

Signed: ``X-DPICL-Signature: sha256=<hex HMAC-SHA256 of the raw body>`` with
``DPICL_WEBHOOK_SECRET``. Durable: the row records the delivery (``webhook_status``,
``webhook_attempts``, ``webhook_next_at``), so retries with exponential back-off
survive restarts and any runner (server or worker) may deliver. A receiver
answering 2xx ends the retries; anything else, or no answer within
``webhook_timeout_seconds``, is retried up to ``webhook_max_attempts`` times.

Egress policy (app/jobs/egress.py): the URL is checked again before each attempt,
and the connection resolves the host once, refuses non-public addresses unless
the settings allow them, and connects to the vetted address; redirects are not
followed. A refusal fails the delivery at once (no retries), with the reason.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from datetime import timedelta
from typing import TYPE_CHECKING

import httpx

from app.jobs import egress
from app.jobs import repository as repo
from app.jobs import webhook_repo
from app.jobs.resource import load_resource
from app.store.base import utcnow

if TYPE_CHECKING:
    from app.runtime import Runtime

log = logging.getLogger("dpicl.jobs.webhooks")

SIGNATURE_HEADER = "X-DPICL-Signature"
MAX_BACKOFF_SECONDS = 3600.0


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(secret: str, body: bytes, header: str | None) -> bool:
    """For receivers: constant-time check of the signature header."""
    return header is not None and hmac.compare_digest(sign(secret, body), header)


def deliver_due(runtime: Runtime, *, client: httpx.Client | None = None, limit: int = 20) -> int:
    """Make one delivery attempt for every webhook that is due; returns how many were attempted.

    ``client`` replaces the delivery client (tests only: the egress policy's address
    checks live in the default client's transport, see :func:`egress.client`)."""
    settings = runtime.settings
    timeout = settings.webhook_timeout_seconds
    with runtime.db.session() as s:
        due = webhook_repo.due_webhooks(s, limit)
    if not due:
        return 0
    own = client is None
    client = client or egress.client(settings)
    done = 0
    try:
        for job_id, attempts in due:
            with runtime.db.session() as s:
                if not webhook_repo.lease_webhook(s, job_id, attempts, lease_seconds=timeout + 30):
                    continue  # another runner took this attempt
                body_obj = load_resource(s, job_id, tenant_id=None, settings=settings)
                url = repo.get_job(s, job_id, tenant_id=None).webhook_url if body_obj else None
            if body_obj is None or not url:
                continue
            done += 1
            _attempt(runtime, client, job_id, url, body_obj, attempts + 1)
    finally:
        if own:
            client.close()
    return done


def _attempt(runtime: Runtime, client: httpx.Client, job_id: str, url: str, body_obj: dict, n: int) -> None:
    settings = runtime.settings
    body_obj = dict(body_obj, webhook=dict(body_obj.get("webhook") or {}, status="delivering", attempts=n))
    body = json.dumps(body_obj, separators=(",", ":"), sort_keys=True).encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": f"dpicl/{runtime.version}",
        "X-DPICL-Event": f"audit.job.{body_obj['status']}",
        "X-DPICL-Job-Id": job_id,
        "X-DPICL-Delivery-Attempt": str(n),
    }
    if settings.webhook_secret:
        headers[SIGNATURE_HEADER] = sign(settings.webhook_secret, body)
    refused = None
    try:
        egress.check_url(url, settings)  # the settings may have changed since the job was submitted
        r = client.post(url, content=body, headers=headers)
        ok, reason = 200 <= r.status_code < 300, f"HTTP {r.status_code}"
    except egress.EgressRefused as exc:
        ok, refused = False, exc.reason
    except httpx.HTTPError as exc:
        ok, reason = False, f"{type(exc).__name__}: {exc}"[:120]
    with runtime.db.session() as s:
        if refused is not None:
            status = f"failed: refused by the egress policy ({refused})"
            webhook_repo.record_webhook(s, job_id, attempts=n, status=status[:200], next_at=None)
            log.warning("webhook of job %s refused by the egress policy: %s", job_id, refused)
        elif ok:
            webhook_repo.record_webhook(s, job_id, attempts=n, status=f"delivered ({reason}, attempt {n})", next_at=None)
            log.info("webhook of job %s delivered (%s, attempt %d)", job_id, reason, n)
        elif n >= settings.webhook_max_attempts:
            webhook_repo.record_webhook(s, job_id, attempts=n, status=f"failed after {n} attempts (last: {reason})", next_at=None)
            log.warning("webhook of job %s failed for good after %d attempts: %s", job_id, n, reason)
        else:
            delay = min(settings.webhook_backoff_seconds * 2 ** (n - 1), MAX_BACKOFF_SECONDS)
            webhook_repo.record_webhook(
                s, job_id, attempts=n, status=f"retrying (attempt {n}: {reason})",
                next_at=utcnow() + timedelta(seconds=delay),
            )
            log.info("webhook of job %s: attempt %d failed (%s); next in %.1f s", job_id, n, reason, delay)
