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

from app.client import (AsyncClient, BudgetExhausted, Client, DpiclError, InvalidRequest, NotFound, Unavailable,
                        _Endpoints)
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

        with pytest.raises(InvalidRequest) as bad:
            dp.classify(ds["id"], "x", epsilon=-1.0)
        assert bad.value.status == 422 and bad.value.param == "epsilon"
        with pytest.raises(NotFound) as missing:
            dp.get_dataset("ds_missing")
        assert missing.value.status == 404
        # A spent budget is not an outage: BudgetExhausted at once (no retry), with what is left.
        dp.classify(ds["id"], "q2", **params)
        dp.classify(ds["id"], "q3", **params)
        started = time.monotonic()
        with pytest.raises(BudgetExhausted) as spent:
            dp.classify(ds["id"], "q4", **params)
        assert time.monotonic() - started < 5.0
        assert spent.value.status == 429 and spent.value.param == "epsilon" and spent.value.code == "budget_exhausted"
        assert spent.value.epsilon_remaining == pytest.approx(0.0, abs=1e-6)
        assert spent.value.epsilon_spent == pytest.approx(3.0)
        assert not isinstance(spent.value, Unavailable)
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
    """/v1/private/classify: 503 (Retry-After 1), then 503, then 200. /v1/datasets: 503. /v1/private/generate:
    a budget 429. /v1/privacy/convert: 500. Records every request."""

    calls: list[tuple[str, str | None, float]] = []

    def _answer(self):
        n = sum(1 for c in self.calls if c[0] == self.path)
        self.calls.append((self.path, self.headers.get("Idempotency-Key"), time.monotonic()))
        busy = (503, {"error": {"message": "busy", "type": "service_unavailable", "param": None,
                                "code": "model_overloaded"}}, {"Retry-After": "1"})
        if self.path == "/v1/private/generate":
            code, body, extra = 429, {"error": {"message": "privacy budget exhausted", "type": "rate_limit_error",
                                                "param": "epsilon", "code": "budget_exhausted"}}, \
                {"X-DPICL-Epsilon-Remaining": "0.25", "X-DPICL-Epsilon-Spent": "7.75"}
        elif self.path == "/v1/privacy/convert":
            code, body, extra = 500, {"error": {"message": "boom", "type": "api_error", "param": None}}, {}
        elif self.path == "/v1/datasets" or n == 0:
            code, body, extra = busy
        elif n == 1:
            code, body, extra = busy[0], busy[1], {}
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
            with pytest.raises(Unavailable) as once:  # creating a dataset is not deduplicated: never resent
                dp.create_dataset("d", [{"input": "a", "output": "b"}])
            assert once.value.status == 503 and once.value.code == "model_overloaded"
            assert sum(1 for c in _Flaky.calls if c[0] == "/v1/datasets") == 1
            # A spent budget is final: raised at once, typed, never resent.
            with pytest.raises(BudgetExhausted) as spent:
                dp.generate("ds_x", "q")
            assert spent.value.epsilon_remaining == 0.25 and spent.value.epsilon_spent == 7.75
            assert spent.value.param == "epsilon"
            assert sum(1 for c in _Flaky.calls if c[0] == "/v1/private/generate") == 1
            # A 500 is a bug on the server, not load: raised at once, not resent.
            with pytest.raises(DpiclError) as broken:
                dp.convert(rdp=1.0)
            assert broken.value.status == 500 and not isinstance(broken.value, Unavailable)
            assert sum(1 for c in _Flaky.calls if c[0] == "/v1/privacy/convert") == 1
    finally:
        srv.shutdown()
        srv.server_close()


def test_no_answer_is_unavailable_after_bounded_retries():
    import socket

    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    with Client(f"http://127.0.0.1:{port}", max_retries=2, max_wait=0.1) as dp:
        with pytest.raises(Unavailable) as down:
            dp.health()
    assert down.value.status == 0 and "did not answer" in str(down.value)
    assert time.monotonic() - started < 5.0  # 3 tries, waits capped at 0.1 s
    with Client(f"http://127.0.0.1:{port}", max_retries=0) as dp, pytest.raises(Unavailable):
        dp.health()


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
    rec.samples()
    rec.load_sample("assistant_intents", name="n", budget={"epsilon": 1, "delta": 1e-5})
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
