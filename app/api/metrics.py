"""``GET /metrics``: Prometheus text format (prometheus_client), for scraping.

What is exported (all names start with ``dpicl_``):

* ``model_forward_tokens_total{model}`` (and ``padded_tokens``, ``reused_tokens``, ``forward_calls``):
  the hf model's own counters (``lm.stats``);
* ``model_queue_depth{model}``, ``model_batch_running{model}``: jobs waiting in / running from each
  in-process model's batch queue (app/llm/scheduler.py), read at scrape time;
* ``model_batch_rows{model}``, ``model_batch_requests{model}``, ``model_batch_tokens{model}``: per
  coalesced batch (a "step" of the scheduler): rows, calls and prompt tokens in it;
  ``model_batch_seconds{model}``, ``model_queue_wait_seconds{model}``; ``model_batch_cpu_seconds_total{model}``:
  the model worker thread's CPU time in its batches (batch seconds minus it: waiting for a core or the GIL);
  ``model_tokens_total{model}`` (``rate()`` of it is tokens/s); ``model_rejected_total{model,reason}``
  (503s: queue_full or deadline);
* ``request_seconds{endpoint,mechanism,status}``: HTTP latency per route template, private mechanism
  ("none" elsewhere) and status code;
* ``budget_charges_total{mechanism}``, ``budget_epsilon_total{mechanism}``: ledger charges made;
* ``answer_stage_seconds{stage}`` and ``answer_stage_cpu_seconds_total{stage}``: a private answer's read,
  work and charge, wall time and the CPU time of the thread that ran it (wall well above CPU: waiting for
  a lock, the GIL, a core or the model thread);
* ``jobs{state}``: background jobs by state, counted in the database at scrape time.

One registry per process (not the global default one), filled by every app built in it.
"""

from __future__ import annotations

import contextvars
import logging
import time
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from app.api.json_route import JSONRoute
from app.api.auth import METRICS_SCOPE, require

log = logging.getLogger(__name__)

REGISTRY = CollectorRegistry(auto_describe=True)
_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
_TOKEN_BUCKETS = (16, 64, 256, 1024, 2048, 4096, 8192, 16384, 32768)
_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)

BATCH_ROWS = Histogram("dpicl_model_batch_rows", "Rows per coalesced model batch", ["model"],
                       buckets=_SIZE_BUCKETS, registry=REGISTRY)
BATCH_REQUESTS = Histogram("dpicl_model_batch_requests", "Model calls coalesced into one batch", ["model"],
                           buckets=_SIZE_BUCKETS, registry=REGISTRY)
BATCH_TOKENS = Histogram("dpicl_model_batch_tokens", "Prompt tokens per coalesced model batch (tokens per step)",
                         ["model"], buckets=_TOKEN_BUCKETS, registry=REGISTRY)
BATCH_SECONDS = Histogram("dpicl_model_batch_seconds", "Seconds per coalesced model batch", ["model"],
                          buckets=_SECONDS, registry=REGISTRY)
BATCH_CPU = Counter("dpicl_model_batch_cpu_seconds", "CPU seconds of the model worker thread in its batches",
                    ["model"], registry=REGISTRY)
QUEUE_WAIT = Histogram("dpicl_model_queue_wait_seconds", "Seconds a model call waited in the batch queue",
                       ["model"], buckets=_SECONDS, registry=REGISTRY)
MODEL_TOKENS = Counter("dpicl_model_tokens", "Prompt tokens run through batched model calls", ["model"],
                       registry=REGISTRY)
REJECTED = Counter("dpicl_model_rejected", "Model calls refused (503): queue_full or deadline", ["model", "reason"],
                   registry=REGISTRY)
REQUEST_SECONDS = Histogram("dpicl_request_seconds", "HTTP request latency", ["endpoint", "mechanism", "status"],
                            buckets=_SECONDS, registry=REGISTRY)
CHARGES = Counter("dpicl_budget_charges", "Privacy budget charges written to the ledger", ["mechanism"],
                  registry=REGISTRY)
STAGE_SECONDS = Histogram("dpicl_answer_stage_seconds", "Wall seconds of a private answer's stage: read (the read "
                          "transaction), work (the mechanism, model passes included), charge (the charge "
                          "transaction)", ["stage"], buckets=_SECONDS, registry=REGISTRY)
STAGE_CPU = Counter("dpicl_answer_stage_cpu_seconds", "CPU seconds of the thread that ran a private answer's stage "
                    "(work: the request thread's, without the model thread's batches)", ["stage"], registry=REGISTRY)
CHARGED_EPSILON = Counter("dpicl_budget_epsilon", "Epsilon charged to the ledger (sum over charges)", ["mechanism"],
                          registry=REGISTRY)


def _on_scheduler_event(model: str, event: str, data: dict[str, Any]) -> None:
    if event == "batch":
        BATCH_ROWS.labels(model).observe(data["rows"])
        BATCH_REQUESTS.labels(model).observe(data["jobs"])
        BATCH_TOKENS.labels(model).observe(data["tokens"])
        BATCH_SECONDS.labels(model).observe(data["seconds"])
        BATCH_CPU.labels(model).inc(data.get("cpu_seconds", 0.0))
        MODEL_TOKENS.labels(model).inc(data["tokens"])
        for w in data["waited_s"]:
            QUEUE_WAIT.labels(model).observe(w)
    elif event == "rejected":
        REJECTED.labels(model, data["reason"]).inc()


class _QueueCollector:
    def collect(self):
        from app.llm.scheduler import SCHEDULERS

        depth = GaugeMetricFamily("dpicl_model_queue_depth", "Model calls waiting in the batch queue", labels=["model"])
        running = GaugeMetricFamily("dpicl_model_batch_running", "Model calls in the running batch", labels=["model"])
        fwd = {k: CounterMetricFamily(f"dpicl_model_{k}", help_, labels=["model"]) for k, help_ in (
            ("forward_tokens", "Real tokens run through the model (prefix work included)"),
            ("padded_tokens", "Positions run through the model, padding included"),
            ("reused_tokens", "Row-tokens served from a shared or cached prefix instead of recomputed"),
            ("forward_calls", "Model forward passes"),
            ("forward_rows", "Rows over all model forward passes"))}
        totals: dict[str, dict[str, float]] = {}  # by model name (two loaded copies of one model: summed)
        for s in list(SCHEDULERS):
            t = totals.setdefault(s.name, {"depth": 0, "running": 0})
            t["depth"] += s.depth
            t["running"] += s.running
            for k, v in (s.model_stats() if s.model_stats else {}).items():
                if k in fwd:
                    t[k] = t.get(k, 0) + v
        for name, t in sorted(totals.items()):
            depth.add_metric([name], t["depth"])
            running.add_metric([name], t["running"])
            for k, fam in fwd.items():
                if k in t:
                    fam.add_metric([name], t[k])
        yield depth
        yield running
        yield from fwd.values()


class _JobCollector:
    """Jobs by state, counted when scraped (the database row is the source of truth)."""

    def __init__(self) -> None:
        self.runtime: Any = None

    def collect(self):
        g = GaugeMetricFamily("dpicl_jobs", "Background jobs by state", labels=["state"])
        rt = self.runtime
        if rt is not None:
            try:
                from sqlalchemy import func, select

                from app.jobs.repository import STATUSES
                from app.store.job_tables import AuditJob

                with rt.db.session() as s:
                    counts = dict(s.execute(select(AuditJob.status, func.count()).group_by(AuditJob.status)).all())
                for state in STATUSES:
                    g.add_metric([state], counts.get(state, 0))
            except Exception:  # no jobs table yet, database down: no job numbers this scrape
                log.debug("metrics: cannot count jobs", exc_info=True)
        yield g


class _ChargeCollector:
    """The answers' charge transactions and the charges in them (group commit, app/budget/combiner.py):
    their ratio is the charges one ledger transaction carried (1.0 sequentially)."""

    def collect(self):
        rt = _JOBS.runtime
        comb = getattr(rt, "charges", None)
        tx = CounterMetricFamily("dpicl_ledger_charge_transactions", "Ledger transactions made for answers' charges")
        req = CounterMetricFamily("dpicl_ledger_charge_requests", "Answers' charges made in those transactions")
        if comb is not None:
            tx.add_metric([], comb.batches)
            req.add_metric([], comb.requests)
        yield tx
        yield req


_JOBS = _JobCollector()
REGISTRY.register(_QueueCollector())
REGISTRY.register(_JOBS)
REGISTRY.register(_ChargeCollector())

# The mechanism of the request being served: the middleware puts a fresh dict here, the private
# routes write into it (a dict, so a write from a worker thread's copied context is still seen).
_LABELS: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar("dpicl_metric_labels", default=None)


def note_mechanism(name: str) -> None:
    labels = _LABELS.get()
    if labels is not None:
        labels["mechanism"] = str(name)


def count_charge(mechanism: str, epsilon: float) -> None:
    CHARGES.labels(mechanism).inc()
    CHARGED_EPSILON.labels(mechanism).inc(max(0.0, float(epsilon or 0.0)))


class MetricsMiddleware:
    """Pure ASGI: time each HTTP request; label it by route template (not the raw path: bounded)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        labels: dict[str, str] = {}
        token = _LABELS.set(labels)
        status = {"code": 500}
        t0 = time.perf_counter()

        async def _send(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, _send)
        finally:
            _LABELS.reset(token)
            route = scope.get("route")
            endpoint = getattr(route, "path", None) or "unmatched"
            if endpoint != "/metrics":
                REQUEST_SECONDS.labels(endpoint, labels.get("mechanism", "none"), str(status["code"])).observe(
                    time.perf_counter() - t0)


router = APIRouter(route_class=JSONRoute)


# Cross-tenant totals: a key with the metrics scope (or admin) once keyed; docs/security.md has a
# Prometheus scrape config.
@router.get("/metrics", include_in_schema=False, dependencies=[Depends(require(METRICS_SCOPE, "admin"))])
async def metrics(request: Request) -> Response:
    _JOBS.runtime = getattr(request.app.state, "runtime", None)
    data = await run_in_threadpool(generate_latest, REGISTRY)
    return Response(data, media_type=CONTENT_TYPE_LATEST)


def _on_answer_event(event: str, data: dict[str, Any]) -> None:
    if event == "mechanism":
        note_mechanism(data["name"])
    elif event == "charge":
        count_charge(data["mechanism"], data["epsilon"])
    elif event == "stage":
        STAGE_SECONDS.labels(data["stage"]).observe(data["seconds"])
        STAGE_CPU.labels(data["stage"]).inc(max(0.0, data["cpu_seconds"]))


def install(app) -> None:
    from app.answers.flow import OBSERVERS as ANSWER_OBSERVERS
    from app.llm.scheduler import OBSERVERS

    if _on_scheduler_event not in OBSERVERS:
        OBSERVERS.append(_on_scheduler_event)
    if _on_answer_event not in ANSWER_OBSERVERS:
        ANSWER_OBSERVERS.append(_on_answer_event)
    app.add_middleware(MetricsMiddleware)
    app.include_router(router)
