"""An upload with more exemplars than DPICL_MAX_EXEMPLARS is refused before any exemplar is validated.

Before: the count came after every exemplar was validated (pydantic, the NUL check, per JSONL line), so 1.5
million tiny exemplars (60 MB, under the 128 MiB upload limit) held a worker ~40 s before the 422 (a red-team
run on the 2-core box, keyed `dpicl serve`). The order is what these tests pin: the last exemplar is invalid, and
the answer must be the count, not that exemplar's error. Real server, SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import time

import httpx

MARKER = "ZQXJ-CANARY-7731"
N = 30_000  # > the default DPICL_MAX_EXEMPLARS (10,000)


def _exemplars() -> list[dict]:
    out: list[dict] = [{"input": f"{MARKER} {i}", "output": "a"} for i in range(N)]
    out[-1] = {"input": f"{MARKER} last", "output": 5}  # invalid: validated first, this was the error
    return out


def test_too_many_exemplars_json_is_refused_before_validation(live_server):
    t0 = time.monotonic()
    r = httpx.post(f"{live_server}/v1/datasets", timeout=120,
                   json={"name": "n", "labels": ["a", "b"], "exemplars": _exemplars()})
    assert r.status_code == 422, r.text[:300]
    err = r.json()["error"]
    assert (err["param"], err["code"]) == ("exemplars", "too_many_exemplars"), err  # before: exemplars.29999.output
    assert MARKER not in r.text and time.monotonic() - t0 < 30


def test_too_many_exemplars_jsonl_is_refused_before_validation(live_server):
    lines = [json.dumps({"name": "n", "labels": ["a", "b"]})] + [json.dumps(e) for e in _exemplars()]
    r = httpx.post(f"{live_server}/v1/datasets", timeout=120, content="\n".join(lines).encode(),
                   headers={"content-type": "application/x-ndjson"})
    assert r.status_code == 422, r.text[:300]
    err = r.json()["error"]
    assert (err["param"], err["code"]) == ("exemplars", "too_many_exemplars"), err
    assert MARKER not in r.text


def test_the_limit_itself_still_registers(live_server):
    r = httpx.post(f"{live_server}/v1/datasets", timeout=120, json={
        "name": "n", "labels": ["a", "b"], "exemplars": [{"input": f"i{i}", "output": "a"} for i in range(10_000)]})
    assert r.status_code == 201 and r.json()["exemplar_count"] == 10_000, r.text[:300]
