"""Webhooks: the final job JSON, HMAC-signed, delivered to a local receiver, retried with back-off."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app.jobs import webhooks
from tests.jobs.conftest import WEBHOOK_SECRET, submit, wait_for, wait_job


class Receiver:
    """A real HTTP receiver on loopback; answers the scripted statuses in order, then 200."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses = list(statuses)
        self.calls: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.calls.append({"t": time.monotonic(), "headers": dict(self.headers), "body": body})
                status = outer.statuses.pop(0) if outer.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    made = []

    def make(statuses=()):
        r = Receiver(list(statuses))
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


def test_final_job_json_is_signed_and_retried_until_delivered(client, receiver):
    rcv = receiver([500, 503])
    job = submit(client, config={"steps": 2, "step_seconds": 0, "epsilon": 0.3}, claimed_epsilon=1.0,
                 webhook_url=rcv.url)
    assert job["webhook"] == {"url": rcv.url, "status": None, "attempts": 0}
    wait_job(client, job["id"])

    def delivered():
        j = client.get(f"/v1/audits/{job['id']}").json()
        return j if j["webhook"]["status"].startswith("delivered") else None

    final = wait_for(delivered, 20, "webhook delivery")
    assert final["webhook"]["status"] == "delivered (HTTP 200, attempt 3)" and final["webhook"]["attempts"] == 3
    assert len(rcv.calls) == 3
    # Exponential back-off between attempts (0.2 s, then 0.4 s).
    gaps = [b["t"] - a["t"] for a, b in zip(rcv.calls, rcv.calls[1:])]
    assert gaps[0] >= 0.15 and gaps[1] >= 0.35, gaps
    for call in rcv.calls:
        expected = "sha256=" + hmac.new(WEBHOOK_SECRET.encode(), call["body"], hashlib.sha256).hexdigest()
        assert call["headers"]["X-DPICL-Signature"] == expected
        assert webhooks.verify(WEBHOOK_SECRET, call["body"], call["headers"]["X-DPICL-Signature"])
        assert not webhooks.verify("another-secret-entirely", call["body"], call["headers"]["X-DPICL-Signature"])
        body = json.loads(call["body"])
        assert body["id"] == job["id"] and body["status"] == "succeeded" and body["verdict"] == "pass"
        assert body["result"]["epsilon"] == 0.3 and call["headers"]["X-DPICL-Event"] == "audit.job.succeeded"
    assert [c["headers"]["X-DPICL-Delivery-Attempt"] for c in rcv.calls] == ["1", "2", "3"]


def test_failed_and_cancelled_jobs_are_delivered_too(client, receiver):
    rcv = receiver()
    failed = submit(client, config={"steps": 1, "fail_at_step": 0}, webhook_url=rcv.url)
    running = submit(client, config={"steps": 200, "step_seconds": 0.05}, webhook_url=rcv.url)
    wait_job(client, failed["id"])
    wait_job(client, running["id"], statuses=("running",))
    client.post(f"/v1/audits/{running['id']}/cancel")
    wait_job(client, running["id"])
    wait_for(lambda: len(rcv.calls) >= 2, 20, "two deliveries")
    statuses = {json.loads(c["body"])["id"]: json.loads(c["body"])["status"] for c in rcv.calls}
    assert statuses == {failed["id"]: "failed", running["id"]: "cancelled"}


def test_delivery_gives_up_after_max_attempts(fresh_database_url, receiver):
    """A receiver that always fails: the row records the failure (no endless retries).
    (A database of its own: no other runner may deliver this job's webhook.)"""
    from app.jobs import repository as repo
    from app.runtime import Runtime
    from tests.jobs.conftest import job_settings

    rcv = receiver([500] * 10)
    rt = Runtime.create(job_settings(fresh_database_url, webhook_max_attempts=2, webhook_backoff_seconds=0.05))
    try:
        with rt.db.session() as s:
            job, _ = repo.create_job(s, kind="sleep", config={}, claimed_epsilon=None, claimed_delta=None,
                                     webhook_url=rcv.url, idempotency_key=None, request_hash="x", max_attempts=1)
            repo.claim(s, job.id, "w")
            repo.finish(s, job.id, "w", "succeeded", result={})

        def status():
            webhooks.deliver_due(rt)
            with rt.db.session() as s:
                row = repo.get_job(s, job.id, tenant_id=None)
            return row.webhook_status if row.webhook_status.startswith("failed") else None

        assert wait_for(status, 10, "give up") == "failed after 2 attempts (last: HTTP 500)"
        assert len([c for c in rcv.calls if json.loads(c["body"])["id"] == job.id]) == 2
    finally:
        rt.close()


def test_webhook_needs_a_secret_on_the_server(jobs_db):
    from app.jobs import service
    from app.jobs.errors import JobConfigError
    from app.runtime import Runtime
    from tests.jobs.conftest import job_settings

    rt = Runtime.create(job_settings(jobs_db, webhook_secret=None))
    try:
        with pytest.raises(JobConfigError) as exc:
            service.submit(rt, kind_name="sleep", config={}, claimed_epsilon=None, claimed_delta=None,
                           webhook_url="http://127.0.0.1:9/x", idempotency_key=None)
        assert exc.value.param == "webhook_url" and "DPICL_WEBHOOK_SECRET" in exc.value.message
    finally:
        rt.close()
