"""The Python client (app/client) against a real server (real SmolLM2, SQLite and PostgreSQL), its
retry policy against a flaky front, and its paths and fields against the live OpenAPI schema."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from app.client import AsyncClient, Client, DpiclError, _Endpoints
from tests.answers.test_gateway_api import EXEMPLARS, LABELS, PURE

T = 180


def test_datasets_answers_budget_and_errors(live_server):
    with Client(live_server, timeout=T) as dp:
        ds = dp.create_dataset("sdk", [{"input": i, "output": o} for i, o in EXEMPLARS], labels=LABELS,
                               budget={"epsilon": 3.0, "delta": 1e-5})
        assert dp.get_dataset(ds["id"])["id"] == ds["id"]
        params = {k: v for k, v in PURE.items() if k != "mechanism"}
        a = dp.classify(ds["id"], "Snow is falling in the mountains.", idempotency_key="sdk-q1", **params)
        assert a["label"] in LABELS
        b = dp.classify(ds["id"], "Snow is falling in the mountains.", idempotency_key="sdk-q1", **params)
        assert b["label"] == a["label"] and dp.last_response.headers.get("Idempotent-Replayed") == "true"
        budget = dp.budget(ds["id"])
        assert budget["charges"] == 1 and budget["epsilon_spent"] == pytest.approx(1.0, rel=1e-4)  # Laplace: 1 by basic, 0.99999 by PLD
        assert len([e for e in dp.ledger(ds["id"])["data"] if e["status"] == "charged"]) == 1

        with pytest.raises(DpiclError) as bad:
            dp.classify(ds["id"], "x", epsilon=-1.0)
        assert bad.value.status == 422 and bad.value.param == "epsilon"
        with pytest.raises(DpiclError) as missing:
            dp.get_dataset("ds_missing")
        assert missing.value.status == 404
        # 429 is retried only up to the deadline: an exhausted budget stays an error, not a hang.
        dp.classify(ds["id"], "q2", **params)
        dp.classify(ds["id"], "q3", **params)
        short = Client(live_server, timeout=T, deadline=time.monotonic() + 2.0)
        with short, pytest.raises(DpiclError) as spent:
            short.classify(ds["id"], "q4", **params)
        assert spent.value.status in (0, 429)
        assert dp.budget(ds["id"])["charges"] == 3


def test_async_client_answers_concurrently(live_server):
    async def go():
        async with AsyncClient(live_server, timeout=T) as dp:
            ds = await dp.create_dataset("sdk-async", [{"input": i, "output": o} for i, o in EXEMPLARS],
                                         labels=LABELS, budget={"epsilon": 2.0, "delta": 1e-5})
            params = {k: v for k, v in PURE.items() if k != "mechanism"}
            outs = await asyncio.gather(*[dp.classify(ds["id"], f"Is it raining? {i}", **params) for i in range(2)])
            return outs, await dp.budget(ds["id"])

    outs, budget = asyncio.run(go())
    assert all(o["label"] in LABELS for o in outs)
    assert budget["charges"] == 2 and budget["epsilon_remaining"] == pytest.approx(0.0, abs=1e-4)


class _Flaky(BaseHTTPRequestHandler):
    """429 (Retry-After 1), then 503, then 200; records every request."""

    calls: list[tuple[str, str | None, float]] = []

    def _answer(self):
        n = sum(1 for c in self.calls if c[0] == self.path)
        self.calls.append((self.path, self.headers.get("Idempotency-Key"), time.monotonic()))
        if n == 0:
            code, body, extra = 429, {"error": {"message": "slow down", "type": "rate_limit_error", "param": None}}, \
                {"Retry-After": "1"}
        elif n == 1:
            code, body, extra = 503, {"error": {"message": "busy", "type": "api_error", "param": None}}, {}
        else:
            code, body, extra = 200, {"ok": True}, {}
        raw = json.dumps(body).encode()
        self.send_response(code)
        for k, v in extra.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._answer()

    def log_message(self, *a):
        pass


def test_retries_only_what_the_server_deduplicates():
    _Flaky.calls = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with Client(f"http://127.0.0.1:{srv.server_address[1]}") as dp:
            assert dp.classify("ds_x", "q") == {"ok": True}
            keyed = [c for c in _Flaky.calls if c[0] == "/v1/private/classify"]
            assert len(keyed) == 3 and keyed[1][2] - keyed[0][2] >= 0.9  # honoured Retry-After
            assert len({c[1] for c in keyed}) == 1 and keyed[0][1]  # one Idempotency-Key on every resend
            with pytest.raises(DpiclError) as once:  # creating a dataset is not deduplicated: never resent
                dp.create_dataset("d", [{"input": "a", "output": "b"}])
            assert once.value.status == 429
            assert sum(1 for c in _Flaky.calls if c[0] == "/v1/datasets") == 1
    finally:
        srv.shutdown()
        srv.server_close()


class _Recorder(_Endpoints):
    """Calls every endpoint method, recording (method, path, body) instead of sending."""

    def __init__(self):
        self.seen: list[tuple[str, str, object]] = []

    def _call(self, req):
        self.seen.append((req.method, req.path, req.json))


def test_paths_and_fields_match_the_live_openapi(live_server):
    spec = httpx.get(f"{live_server}/openapi.json").json()

    def deref(s: dict) -> dict:
        while "$ref" in s:
            node = spec
            for part in s["$ref"].lstrip("#/").split("/"):
                node = node[part]
            s = node
        return s

    rec = _Recorder()
    rec.health()
    rec.models()
    rec.mechanisms()
    rec.audit_kinds()
    rec.create_dataset("n", [{"input": "a", "output": "b"}], labels=["b"], budget={"epsilon": 1, "delta": 1e-5})
    rec.list_datasets(limit=1)
    rec.get_dataset("ds_1")
    rec.delete_dataset("ds_1")
    rec.budget("ds_1")
    rec.set_budget("ds_1", epsilon=1, delta=1e-5)
    rec.ledger("ds_1")
    rec.budget_forecast("ds_1", mechanism="rnm", epsilon=1.0)
    rec.classify("ds_1", "q", epsilon=1.0, partitions=2, shots_per_partition=1)
    rec.generate("ds_1", "q", epsilon=1.0, max_tokens=4)
    rec.calibrate()
    rec.convert()
    rec.submit_audit("canary_mia", {}, claimed_epsilon=1.0)
    rec.plan_audit(config={})
    rec.get_audit("j")
    rec.list_audits()
    rec.cancel_audit("j")
    rec.artifacts("j")
    rec.artifact("j", "a.png")
    assert len(rec.seen) == len([m for m in dir(_Endpoints) if not m.startswith("_")])  # every method exercised

    routes = []
    for path, ops in spec["paths"].items():
        rx = re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", path) + "$")
        routes += [(m.upper(), rx, op) for m, op in ops.items()]
    for method, path, body in rec.seen:
        ops = [op for m, rx, op in routes if m == method and rx.match(path)]
        assert ops, f"{method} {path} is not in /openapi.json"
        schema = ((ops[0].get("requestBody") or {}).get("content") or {}).get("application/json", {}).get("schema")
        if isinstance(body, dict) and schema is not None:
            props = deref(schema).get("properties")
            if props is not None:
                assert set(body) <= set(props), f"{method} {path}: fields {set(body) - set(props)} not in the schema"
