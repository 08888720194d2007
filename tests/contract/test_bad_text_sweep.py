"""Every operation in the OpenAPI document refuses a NUL / lone surrogate with the same 422, on both
databases (issue 26, item 4): the document is walked, so a new route or parameter is covered.

Schemathesis can generate a NUL (``allow-x00``) but rarely does in a bounded run, and it never
sends a lone surrogate (its strings are UTF-8); this sweep sends them on purpose: each path and
query parameter in turn (on main before the fix: a 500 on PostgreSQL for ``dataset_id``,
``job_id``, ``after``, ``kind``), and a JSON body whose one field holds the bad text (the same
``invalid_text`` code on every body route shows each one validates through ``JSONBody``).
"""

from __future__ import annotations

import json
from urllib.parse import quote

import httpx
import pytest

BAD = {"nul": "a\u0000b", "surrogate": "a\ud800b"}


def _operations(base: str):
    doc = httpx.get(f"{base}/openapi.json", timeout=30).json()
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            yield method, path, op


def _url(path: str, params: list[dict], target: str | None, bad: str) -> tuple[str, dict]:
    filled = path
    query: dict[str, str] = {}
    for p in params:
        value = bad if p["name"] == target else "x"
        if p["in"] == "path":
            filled = filled.replace("{" + p["name"] + "}", quote(value, safe=""))
        elif p["in"] == "query" and p["name"] == target:
            query[p["name"]] = value
    return filled, query


def test_every_path_and_query_parameter(live_server):
    checked = 0
    for method, path, op in _operations(live_server):
        params = [p for p in op.get("parameters", []) if p["in"] in ("path", "query")]
        for target in params:
            # Only a NUL survives percent-decoding (invalid UTF-8 becomes U+FFFD).
            url, query = _url(path, params, target["name"], BAD["nul"])
            r = httpx.request(method.upper(), f"{live_server}{url}", params=query, timeout=60)
            assert r.status_code == 422, (method, path, target["name"], r.status_code, r.text)
            err = r.json()["error"]
            assert (err["param"], err["code"]) == (target["name"], "invalid_text"), (method, path, err)
            checked += 1
    assert checked >= 25  # every id and query parameter of the document


@pytest.mark.parametrize("kind", sorted(BAD))
def test_every_json_body(live_server, kind):
    checked = 0
    for method, path, op in _operations(live_server):
        if "application/json" not in op.get("requestBody", {}).get("content", {}):
            continue
        params = [p for p in op.get("parameters", []) if p["in"] == "path"]
        url, _ = _url(path, params, None, "")
        body = json.dumps({"probe": [{"deep": BAD[kind]}]})  # ASCII escapes: \u0000, \ud800
        r = httpx.request(method.upper(), f"{live_server}{url}", content=body,
                          headers={"content-type": "application/json"}, timeout=60)
        assert r.status_code == 422, (method, path, r.status_code, r.text)
        err = r.json()["error"]
        assert (err["param"], err["code"]) == ("probe.0.deep", "invalid_text"), (method, path, err)
        checked += 1
    assert checked >= 10
