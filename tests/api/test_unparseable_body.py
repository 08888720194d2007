"""A body that is not JSON is a 422 naming ``body`` on every route, and its text is never echoed.

Before: what FastAPI could not decode came back three ways. A ``json.JSONDecodeError`` (a raw control
character in a string, trailing bytes, a truncated body) was a 422 whose ``param`` was the character
offset (``"param": "65"``, message ``"65: JSON decode error"``); bytes that are not UTF-8, a gzip body and
nesting past the interpreter's recursion limit were a 400 with ``param: null`` ("There was an error
parsing the body"); a JSON body sent as ``text/plain`` was a 422 with ``param: null``. The dataset
upload route, which parses its own body, already answered 422 ``body: not valid JSON``; now every route
does. Real server (uvicorn, the bundled models), SQLite and PostgreSQL.
"""

from __future__ import annotations

import gzip

import httpx
import pytest

MARKER = "CANARY-7f3a-UNPARSED"

BODIES = {
    "control-char": (f'{{"query": "{MARKER} \x01"}}'.encode(), "application/json", {}),
    "raw-nul": (f'{{"query": "{MARKER} \x00"}}'.encode(), "application/json", {}),
    "trailing": (f'{{"query": "{MARKER}"}} and more'.encode(), "application/json", {}),
    "truncated": (f'{{"query": "{MARKER}", "epsilon": '.encode(), "application/json", {}),
    "not-utf8": (f'{{"query": "{MARKER} '.encode() + b"\xff\xfe\xfa" + b'"}', "application/json", {}),
    "deep": (b"[" * 100_000 + b"]" * 100_000, "application/json", {}),
    "deep-object": (b'{"a": ' * 50_000 + b"1" + b"}" * 50_000, "application/json", {}),
    "gzip": (gzip.compress(f'{{"query": "{MARKER}"}}'.encode()), "application/json", {"content-encoding": "gzip"}),
    "text-plain": (f'{{"query": "{MARKER}"}}'.encode(), "text/plain", {}),
}



@pytest.mark.parametrize("case", list(BODIES))
def test_unparseable_body_is_a_422_naming_body(live_server, json_body_routes, case):
    raw, ctype, extra = BODIES[case]
    messages: set[str] = set()
    for method, path in json_body_routes:
        r = httpx.request(method, f"{live_server}{path}", content=raw, headers={"content-type": ctype, **extra},
                          timeout=60)
        where = f"{method} {path} {case}: {r.status_code} {r.text[:300]}"
        if r.status_code == 404 and path.endswith("/load"):  # the sample name is checked first: fine
            continue
        if case == "text-plain" and r.status_code == 415:  # the upload route names the content type
            assert r.json()["error"]["param"] == "content-type" and MARKER not in r.text, where
            continue
        assert r.status_code == 422, where  # before: 400 (not-utf8, deep, gzip) or 422 with param "65"
        err = r.json()["error"]
        assert err["param"] == "body", where  # before: the character offset, or null
        assert err["message"].startswith("body: "), where
        assert err["type"] == "invalid_request_error", where
        assert MARKER not in r.text, where  # the body's text is never echoed
        messages.add(err["message"])
    # the same bytes get the same reason everywhere (before: the upload route said only "body: not valid JSON")
    assert len(messages) == 1 or case == "text-plain", messages


def test_valid_json_still_accepted(live_server):
    r = httpx.post(f"{live_server}/v1/privacy/convert", content=b'\xef\xbb\xbf{"rho": 0.1, "delta": 1e-5}',
                   headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == 200, r.text  # a UTF-8 byte order mark is still fine
    r = httpx.post(f"{live_server}/v1/privacy/convert", content=b'{"rho": 0.1, "delta": 1e-5, "count": 2}',
                   headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == 200 and r.json()["count"] == 2, r.text


@pytest.mark.parametrize("path, body", [
    ("/v1/private/classify", {"dataset_id": "ds_nosuch", "query": "a" * 20_001}),
    ("/v1/private/classify", {"dataset_id": "ds_nosuch", "query": ""}),
    ("/v1/private/classify", {"dataset_id": "ds_nosuch", "query": 5}),
    ("/v1/private/generate", {"dataset_id": "ds_nosuch", "query": "a" * 20_001}),
], ids=["classify-long", "classify-empty", "classify-number", "generate-long"])
def test_a_field_named_query_is_named(live_server, path, body):
    """FastAPI's error location is ("body", "query"): only its first element is the location. Before, every
    element equal to "body", "query", "path" or "header" was dropped, so the field ``query`` was never named
    (``param: null``): the most common field of the private answers."""
    r = httpx.post(f"{live_server}{path}", json=body, timeout=60)
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["param"] == "query", err
    assert err["message"].startswith("query: "), err
