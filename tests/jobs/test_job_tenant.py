"""An audit job's model work runs in its tenant's scope, as a live answer's does: its cached prompt
prefixes (its exemplars) and batch rows never meet another tenant's (app/llm/tenancy.py). Before, jobs ran
outside any scope, so jobs of different tenants shared one prefix cache and one batch scope."""

from __future__ import annotations

from tests.conftest import running_app
from tests.jobs.conftest import job_settings, submit, wait_job


def test_a_jobs_model_work_is_its_tenants(fresh_database_url):
    with running_app(job_settings(fresh_database_url, auth_mode="open"), timeout=30) as c:
        job = wait_job(c, submit(c, config={"steps": 1, "step_seconds": 0.01})["id"])
    assert job["status"] == "succeeded", job
    assert job["result"]["model_tenant"] == "default"  # open mode: every caller is tenant "default"
