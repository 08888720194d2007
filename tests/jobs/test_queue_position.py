"""A queued job says its place in the queue and what it waits for (issue 28)."""

from __future__ import annotations

import pytest

from tests.conftest import running_app
from tests.jobs.conftest import job_settings, submit, wait_job


@pytest.fixture(scope="module")
def client(database_url):
    with running_app(job_settings(database_url), timeout=30) as c:
        yield c


def test_queued_job_reports_its_position_and_what_it_waits_for(client):
    blockers = [submit(client, config={"steps": 400, "step_seconds": 0.05}) for _ in range(2)]  # concurrency 2
    for b in blockers:
        wait_job(client, b["id"], statuses=("running",))
    first, second = (submit(client, config={"steps": 1}) for _ in range(2))
    try:
        j1, j2 = (client.get(f"/v1/audits/{j['id']}").json() for j in (first, second))
        assert j1["status"] == j2["status"] == "queued"
        assert j1["queue"]["position"] == 1 and j2["queue"]["position"] == 2, (j1["queue"], j2["queue"])
        assert j2["queue"]["running"] == 2 and j2["queue"]["queued"] == 2 and j2["queue"]["slots"] == 2
        running = sorted(j2["queue"]["running_jobs"], key=lambda r: r["id"])  # started in the same instant: any order
        assert running == sorted(({"id": b["id"], "kind": "sleep"} for b in blockers), key=lambda r: r["id"])
        named = ", ".join(f"{r['id']} (sleep)" for r in j2["queue"]["running_jobs"])
        assert j2["queue"]["waiting_for"] == f"a free job slot: position 2 of 2 in the queue; all 2 job slot(s) busy: {named}"
    finally:
        for j in (first, second, *blockers):
            client.post(f"/v1/audits/{j['id']}/cancel")
    done = wait_job(client, blockers[0]["id"], statuses=("cancelled", "succeeded"))
    assert "queue" not in client.get(f"/v1/audits/{done['id']}").json() or \
        client.get(f"/v1/audits/{done['id']}").json()["queue"] is None
