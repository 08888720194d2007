"""The audit planner's gate (app/cpu_gate.py): a burst of plans cannot hold every worker thread.

``POST /v1/audits/plan`` (and ``POST /v1/audits`` with trials "auto", which plans at submit) is seconds
of CPU per request; at most ``plan_concurrency`` run, ``plan_queue`` more wait, the rest get 503
``planner_busy`` with Retry-After at once, and other routes keep answering. Real HTTP server, both DBs.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from app.cpu_gate import CpuGate, GateBusy
from tests.conftest import LiveServer, free_port, server_settings

# --- the gate alone --------------------------------------------------------------------------


def _hold(gate: CpuGate, entered: threading.Event, release: threading.Event, errors: list) -> None:
    try:
        with gate.slot():
            entered.set()
            release.wait(10)
    except GateBusy as exc:  # pragma: no cover - reported by the test
        errors.append(exc)


def test_the_gate_runs_at_most_concurrency_queues_at_most_queue_and_refuses_the_rest():
    gate = CpuGate("planner", concurrency=2, queue=1)
    release = threading.Event()
    errors: list = []
    holders = [threading.Event() for _ in range(3)]
    threads = [threading.Thread(target=_hold, args=(gate, e, release, errors)) for e in holders]
    threads[0].start()
    threads[1].start()
    assert holders[0].wait(5) and holders[1].wait(5)
    assert gate.running == 2 and gate.waiting == 0
    threads[2].start()  # the third waits: the queue has room for one
    deadline = time.monotonic() + 5
    while gate.waiting != 1 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert gate.waiting == 1 and not holders[2].is_set()
    with pytest.raises(GateBusy) as busy:  # running 2 + waiting 1: the fourth is refused at once
        with gate.slot():
            pass
    assert busy.value.retry_after >= 1
    release.set()
    for t in threads:
        t.join(5)
    assert holders[2].is_set() and not errors  # the waiter ran once a slot was free
    assert gate.running == 0 and gate.waiting == 0
    with gate.slot():  # and the gate is usable again
        assert gate.running == 1


def test_a_waiter_gives_up_after_max_wait_and_leaves_the_queue():
    gate = CpuGate("planner", concurrency=1, queue=1, max_wait_seconds=0.2)
    release, entered, errors = threading.Event(), threading.Event(), []
    t = threading.Thread(target=_hold, args=(gate, entered, release, errors))
    t.start()
    assert entered.wait(5)
    t0 = time.monotonic()
    with pytest.raises(GateBusy, match="stayed busy"):
        with gate.slot():
            pass
    assert 0.15 < time.monotonic() - t0 < 5
    assert gate.waiting == 0
    release.set()
    t.join(5)


def test_an_exception_inside_the_slot_frees_it():
    gate = CpuGate("planner", concurrency=1, queue=0)
    with pytest.raises(RuntimeError):
        with gate.slot():
            raise RuntimeError("boom")
    assert gate.running == 0
    with gate.slot():
        pass


@pytest.mark.parametrize("bad", [dict(concurrency=0, queue=0), dict(concurrency=1, queue=-1)])
def test_the_gate_refuses_a_nonsense_size(bad):
    with pytest.raises(ValueError):
        CpuGate("planner", **bad)


# --- over HTTP -------------------------------------------------------------------------------


@pytest.fixture()
def gated_server(fresh_database_url):
    from app.api.main import create_app
    from app.runtime import Runtime

    settings = server_settings(fresh_database_url, job_runner="none", load_models=False,
                               plan_concurrency=1, plan_queue=1)
    rt = Runtime.create(settings, models={})
    srv = LiveServer(create_app(settings, runtime=rt), free_port())
    srv.start()
    try:
        yield rt, srv.url
    finally:
        srv.stop()
        rt.close()


PLAN = {"config": {"target": {"type": "simulated"}}}


def test_a_full_planner_answers_503_with_retry_after_and_other_routes_keep_answering(gated_server):
    rt, url = gated_server
    gate = rt.planner_gate
    with httpx.Client(base_url=url, timeout=60) as c:
        assert c.post("/v1/audits/plan", json=PLAN).status_code == 200  # the plan itself works
        release, entered, errors = threading.Event(), threading.Event(), []
        holder = threading.Thread(target=_hold, args=(gate, entered, release, errors))
        holder.start()
        assert entered.wait(5)
        waiting: dict = {}
        waiter = threading.Thread(target=lambda: waiting.update(r=httpx.post(url + "/v1/audits/plan", json=PLAN,
                                                                               timeout=60)))
        waiter.start()  # takes the one queue place
        deadline = time.monotonic() + 10
        while gate.waiting != 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert gate.waiting == 1
        r = c.post("/v1/audits/plan", json=PLAN)
        assert r.status_code == 503, r.text
        err = r.json()["error"]
        assert err["code"] == "planner_busy" and err["type"] == "service_unavailable"
        assert int(r.headers["Retry-After"]) >= 1
        # a direct audit with trials "auto" plans at submit: refused the same way, and no job is made
        r = c.post("/v1/audits", json={"kind": "canary_mia", "config": {**PLAN["config"], "trials": "auto"}})
        assert r.status_code == 503 and r.json()["error"]["code"] == "planner_busy", r.text
        assert c.get("/v1/audits").json()["data"] == []
        # routes that do not plan are not held up
        assert c.get("/v1/health").status_code == 200
        r = c.post("/v1/audits", json={"kind": "canary_mia", "config": {**PLAN["config"], "trials": 40}})
        assert r.status_code == 202, r.text
        release.set()
        holder.join(10)
        waiter.join(60)
        assert waiting["r"].status_code == 200 and not errors  # the queued plan ran once the slot was free
        assert c.post("/v1/audits/plan", json=PLAN).status_code == 200
        assert gate.running == 0 and gate.waiting == 0
