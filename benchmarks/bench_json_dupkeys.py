"""What refusing repeated JSON keys costs (app.jsonbody.loads, app.api.json_route.JSONRoute).

    PYTHONPATH=. python benchmarks/bench_json_dupkeys.py

Two measurements in one process, each against its own baseline:

* parse only: ``json.loads`` vs ``app.jsonbody.loads`` on a typical private-answer body (650 bytes) and on a
  1 MB dataset upload (10,000 exemplars);
* one request through FastAPI (ASGI called directly, no sockets): the same pydantic body model behind a plain
  ``APIRoute`` and behind ``JSONRoute``, interleaved, median of rounds.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any

import asyncio
import json
import statistics
import time

from fastapi import APIRouter, FastAPI
from pydantic import BaseModel

from app.api.json_route import JSONRoute
from app.jsonbody import loads

ANSWER = json.dumps({"dataset_id": "ds_0123456789abcdef0123456789abcdef", "query": "What is the sentiment of this "
                     "movie review? The plot was thin but the acting carried it. " * 4, "mechanism": "rnm",
                     "epsilon": 1.0, "delta": 1e-5, "partitions": 8, "shots": 4, "model": "smollm2-135m",
                     "max_tokens": 16, "seed": None, "return_internals": False}).encode()
UPLOAD = json.dumps({"name": "x", "task": "classification", "labels": ["a", "b"],
                     "exemplars": [{"input": "some private text here " * 4, "output": "a"} for _ in range(10_000)]
                     }).encode()


def per_call(fn: Callable[[], Any], n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n


class Answer(BaseModel):
    dataset_id: str
    query: str
    mechanism: str
    epsilon: float
    delta: float
    partitions: int
    shots: int
    model: str
    max_tokens: int
    seed: int | None = None
    return_internals: bool = False


def app_with(route_class: type[JSONRoute] | None) -> FastAPI:
    r = APIRouter(route_class=route_class) if route_class else APIRouter()

    @r.post("/v1/private/classify")
    async def classify(body: Answer) -> dict[str, float]:
        return {"ok": body.epsilon}

    app = FastAPI()
    app.include_router(r)
    return app


async def one_request(app: FastAPI) -> None:
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/v1/private/classify", "raw_path": b"/v1/private/classify", "root_path": "", "query_string": b"",
             "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(ANSWER)).encode())],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": ANSWER, "more_body": False}

    async def send(msg: MutableMapping[str, Any]) -> None:
        if msg["type"] == "http.response.start":
            assert msg["status"] == 200, msg

    await app(scope, receive, send)


async def requests(app: FastAPI, n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        await one_request(app)
    return (time.perf_counter() - t) / n


def main() -> None:
    for name, raw, n in (("answer body", ANSWER, 100_000), ("1 MB upload", UPLOAD, 20)):
        base = min(per_call(lambda: json.loads(raw), n) for _ in range(3))
        strict = min(per_call(lambda: loads(raw), n) for _ in range(3))
        print(f"parse {name} ({len(raw):,} B): json.loads {base * 1e6:.1f} us, app.jsonbody.loads {strict * 1e6:.1f} us,"
              f" ratio {strict / base:.2f}, +{(strict - base) * 1e6:.1f} us")
    plain, checked = app_with(None), app_with(JSONRoute)
    asyncio.run(requests(plain, 500))
    asyncio.run(requests(checked, 500))
    a, b = [], []
    for _ in range(15):
        a.append(asyncio.run(requests(plain, 2000)))
        b.append(asyncio.run(requests(checked, 2000)))
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"request (FastAPI, ASGI direct): APIRoute {ma * 1e6:.1f} us, JSONRoute {mb * 1e6:.1f} us, "
          f"ratio {mb / ma:.3f}, +{(mb - ma) * 1e6:.1f} us")


if __name__ == "__main__":
    main()
