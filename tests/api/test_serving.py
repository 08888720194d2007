"""Back-pressure and metrics over real HTTP (LiveServer, the real SmolLM2): a full model queue answers
503 with Retry-After and charges nothing; GET /metrics speaks Prometheus text."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace

import httpx
import pytest

T = 180
LABELS = ["sports", "weather"]
EXEMPLARS = [
    ("The striker scored twice in the final minutes of the match.", "sports"),
    ("Heavy rain and strong winds are expected across the coast tonight.", "weather"),
    ("The goalkeeper saved a penalty in extra time.", "sports"),
    ("Sunny skies and mild temperatures all weekend.", "weather"),
]
PURE = {"mechanism": "rnm", "epsilon": 1.0, "partitions": 2, "shots_per_partition": 1, "params": {"noise": "laplace"}}


def _dataset(url: str) -> str:
    body = {"name": "serving", "labels": LABELS, "budget": {"epsilon": 10.0, "delta": 1e-5},
            "exemplars": [{"input": i, "output": o} for i, o in EXEMPLARS]}
    r = httpx.post(f"{url}/v1/datasets", json=body)
    assert r.status_code == 201, r.text
    return r.json()["id"]


@pytest.fixture
def small_queue(lm):
    old = lm.scheduler.opts
    lm.scheduler.opts = replace(old, max_queue=1)
    yield lm.scheduler
    lm.scheduler.opts = old


def _wait(cond, what, timeout=60.0):
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < timeout, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_full_model_queue_is_503_with_retry_after_and_no_charge(live_server, lm, small_queue):
    ds = _dataset(live_server)
    req = {"dataset_id": ds, "query": "Is it raining?", **PURE}
    results: dict[str, httpx.Response] = {}

    def post(name):
        results[name] = httpx.post(f"{live_server}/v1/private/classify", json={**req, "query": f"{name}?"}, timeout=T)

    with lm._lock:  # the model is busy: the first answer's batch blocks on it, the second waits in the queue
        a = threading.Thread(target=post, args=("a",))
        a.start()
        _wait(lambda: small_queue.running == 1, "the first answer's batch to start")
        b = threading.Thread(target=post, args=("b",))
        b.start()
        _wait(lambda: small_queue.depth == 1, "the second answer to queue")
        t0 = time.monotonic()
        c = httpx.post(f"{live_server}/v1/private/classify", json={**req, "query": "c?"}, timeout=T)
        assert time.monotonic() - t0 < 5  # refused at once, not after a timeout
        assert c.status_code == 503, c.text
        assert int(c.headers["Retry-After"]) >= 1
        assert c.json()["error"]["code"] == "model_overloaded"
        budget = httpx.get(f"{live_server}/v1/datasets/{ds}/budget").json()
        assert budget["charges"] == 0  # nothing charged while the model is blocked, the 503 included
    a.join(T), b.join(T)
    assert results["a"].status_code == 200 and results["b"].status_code == 200
    ledger = httpx.get(f"{live_server}/v1/datasets/{ds}/ledger").json()["data"]
    assert len(ledger) == 2  # a and b; the refused request left no entry of any status
    assert httpx.get(f"{live_server}/v1/datasets/{ds}/budget").json()["charges"] == 2

    text = httpx.get(f"{live_server}/metrics").text
    assert f'dpicl_model_rejected_total{{model="{lm.name}",reason="queue_full"}}' in text


def test_metrics_endpoint_in_prometheus_format(live_server, lm):
    from prometheus_client.parser import text_string_to_metric_families

    ds = _dataset(live_server)

    async def go():
        async with httpx.AsyncClient(timeout=T) as c:
            return await asyncio.gather(*[
                c.post(f"{live_server}/v1/private/classify", json={"dataset_id": ds, "query": f"Rain {i}?", **PURE})
                for i in range(4)])

    assert [r.status_code for r in asyncio.run(go())] == [200] * 4
    r = httpx.get(f"{live_server}/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    fams = {f.name: f for f in text_string_to_metric_families(r.text)}
    for name in ("dpicl_model_queue_depth", "dpicl_model_batch_rows", "dpicl_model_batch_tokens",
                 "dpicl_model_tokens", "dpicl_request_seconds", "dpicl_budget_charges", "dpicl_jobs"):
        assert name in fams, name

    def value(fam, sample, **labels):
        return sum(s.value for s in fams[fam].samples
                   if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()))

    assert value("dpicl_request_seconds", "dpicl_request_seconds_count",
                 endpoint="/v1/private/classify", mechanism="rnm", status="200") >= 4
    assert value("dpicl_budget_charges", "dpicl_budget_charges_total", mechanism="rnm") >= 4
    assert value("dpicl_model_batch_rows", "dpicl_model_batch_rows_count", model=lm.name) >= 1
    # the model thread's CPU in its batches: some, and never more than the batches' wall time
    cpu = value("dpicl_model_batch_cpu_seconds", "dpicl_model_batch_cpu_seconds_total", model=lm.name)
    assert 0 < cpu <= value("dpicl_model_batch_seconds", "dpicl_model_batch_seconds_sum", model=lm.name) + 1e-3
    assert value("dpicl_model_tokens", "dpicl_model_tokens_total", model=lm.name) > 0
    # each answer's read, work and charge: one observation per charged answer, CPU never above wall
    for stage in ("read", "work", "charge"):
        assert value("dpicl_answer_stage_seconds", "dpicl_answer_stage_seconds_count", stage=stage) >= 4, stage
        wall = value("dpicl_answer_stage_seconds", "dpicl_answer_stage_seconds_sum", stage=stage)
        cpu = value("dpicl_answer_stage_cpu_seconds", "dpicl_answer_stage_cpu_seconds_total", stage=stage)
        assert 0 < cpu <= wall + 1e-3, (stage, cpu, wall)
    assert {s.labels["state"] for s in fams["dpicl_jobs"].samples} >= {"queued", "running", "succeeded"}
    # group commit: every charged answer went through a ledger transaction, several may share one
    txns = value("dpicl_ledger_charge_transactions", "dpicl_ledger_charge_transactions_total")
    charged = value("dpicl_ledger_charge_requests", "dpicl_ledger_charge_requests_total")
    assert 1 <= txns <= charged and charged >= 4
    assert value("dpicl_model_queue_depth", "dpicl_model_queue_depth", model=lm.name) == 0
