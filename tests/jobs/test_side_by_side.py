"""Audits side by side (issue 28, item 4): by default a runner takes several jobs at once, so a short
audit never waits for a slot behind a long one; ``DPICL_JOB_CONCURRENCY=1`` still runs them one at a
time, and the queued job says which slots it waits for (API and /ui). Real runners, both databases."""

from __future__ import annotations

import html
from datetime import datetime

import httpx
import pytest

from app.config import auto_job_concurrency, load_settings
from tests.conftest import DB_KINDS, running_app
from tests.jobs.conftest import fast_env, job_settings, start_server, submit, wait_for, wait_job

LONG = {"steps": 80, "step_seconds": 0.05}  # ~4 s
SHORT = {"steps": 2, "step_seconds": 0.01}


def _t(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def test_auto_concurrency_follows_the_cores_within_2_to_4(monkeypatch):
    assert [auto_job_concurrency(n) for n in (1, 2, 3, 4, 8, 64)] == [2, 2, 3, 4, 4, 4]
    monkeypatch.delenv("DPICL_JOB_CONCURRENCY", raising=False)
    assert load_settings().job_concurrency == auto_job_concurrency() >= 2
    monkeypatch.setenv("DPICL_JOB_CONCURRENCY", "auto")
    assert load_settings().job_concurrency == auto_job_concurrency()
    monkeypatch.setenv("DPICL_JOB_CONCURRENCY", "1")
    assert load_settings().job_concurrency == 1  # one at a time is still allowed
    from app.config import SettingsError

    for bad in ("0", "65", "many"):
        monkeypatch.setenv("DPICL_JOB_CONCURRENCY", bad)
        with pytest.raises(SettingsError, match="DPICL_JOB_CONCURRENCY"):
            load_settings()


def test_by_default_a_short_job_finishes_while_a_long_one_runs(fresh_database_url):
    settings = job_settings(fresh_database_url, job_concurrency="auto")  # the default, not the tests' fixed 2
    assert settings.job_concurrency == auto_job_concurrency() >= 2
    with running_app(settings, timeout=30) as c:
        long = submit(c, config=LONG)
        wait_job(c, long["id"], statuses=("running",))
        short = submit(c, config=SHORT)
        done = wait_job(c, short["id"], timeout=30)
        assert done["status"] == "succeeded"
        assert c.get(f"/v1/audits/{long['id']}").json()["status"] == "running"  # it did not wait for the long one
        long_done = wait_job(c, long["id"], timeout=60)
        assert long_done["status"] == "succeeded"
        assert _t(done["finished_at"]) < _t(long_done["finished_at"])
        assert _t(done["started_at"]) < _t(long_done["finished_at"])


def test_concurrency_1_runs_one_job_at_a_time_and_says_which_slot_it_waits_for(fresh_database_url):
    with running_app(job_settings(fresh_database_url, job_concurrency=1), timeout=30) as c:
        long = submit(c, config=LONG)
        wait_job(c, long["id"], statuses=("running",))
        short = submit(c, config=SHORT)
        q = c.get(f"/v1/audits/{short['id']}").json()
        assert q["status"] == "queued", q["status"]
        queue = q["queue"]
        assert queue["position"] == 1 and queue["queued"] == 1 and queue["slots"] == 1 and queue["running"] == 1
        assert queue["running_jobs"] == [{"id": long["id"], "kind": "sleep"}]
        assert queue["waiting_for"] == (f"a free job slot: position 1 of 1 in the queue; all 1 job slot(s) busy: "
                                        f"{long['id']} (sleep)")
        # the listings say the same: the API's and the /ui list
        listed = {j["id"]: j for j in c.get("/v1/audits", params={"status": "queued"}).json()["data"]}
        assert listed[short["id"]]["queue"] == queue
        page = c.get("/ui/audits")
        assert page.status_code == 200 and html.escape(queue["waiting_for"]) in page.text
        long_done = wait_job(c, long["id"], timeout=60)
        done = wait_job(c, short["id"], timeout=30)
        assert long_done["status"] == done["status"] == "succeeded"
        assert _t(done["started_at"]) >= _t(long_done["finished_at"])  # it waited for the slot


@pytest.mark.skipif("postgres" not in DB_KINDS, reason="PostgreSQL skipped (DPICL_TEST_SKIP_POSTGRES=1)")
def test_dpicl_worker_takes_its_default_concurrency(pg_databases, tmp_path):
    """`dpicl worker` without -c runs DPICL_JOB_CONCURRENCY (auto) jobs at a time."""
    from tests.jobs.conftest import Proc

    url = pg_databases.create()
    env = fast_env(url)
    env.pop("DPICL_JOB_CONCURRENCY", None)
    log = tmp_path / "procs.log"
    procs: list = []
    try:
        procs.append(Proc(["worker", "--name", "w-auto"], env, log))
        srv, base = start_server(env, log)
        procs.append(srv)
        with httpx.Client(base_url=base, timeout=10) as c:
            assert c.get("/v1/health").json()["extras"]["job_runner"] == "procrastinate"
            long = submit(c, config=LONG)
            wait_job(c, long["id"], statuses=("running",), timeout=60)
            short = submit(c, config=SHORT)
            q = c.get(f"/v1/audits/{short['id']}").json()
            if q["status"] == "queued":  # workers' slots are not known to the server
                assert q["queue"]["slots"] is None and "running on the workers" in q["queue"]["waiting_for"]
            done = wait_job(c, short["id"], timeout=30)
            assert done["status"] == "succeeded"
            assert c.get(f"/v1/audits/{long['id']}").json()["status"] == "running"
            assert wait_job(c, long["id"], timeout=60)["status"] == "succeeded"
        wait_for(lambda: f"(concurrency {auto_job_concurrency()})" in log.read_text(errors="replace"), 5,
                 "the worker's start-up line")
    except BaseException:
        print(log.read_text(errors="replace")[-4000:])
        raise
    finally:
        for p in procs:
            p.stop()
