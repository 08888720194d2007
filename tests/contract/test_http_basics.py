"""HTTP contract basics over a real server on both databases: bounded integers (422 naming the
field, never a 500 from the database) and a complete ``Allow`` header on every 405."""

import httpx
import pytest

HUGE = "70093691027845025789640704"  # the offset schema fuzzing found: overflowed SQLite's INTEGER


@pytest.mark.parametrize("path", ["/v1/datasets", "/v1/datasets/ds_none/ledger"])
@pytest.mark.parametrize("value", [HUGE, str(2**31), "-1"])
def test_offset_out_of_range_is_422_naming_offset(live_server, path, value):
    r = httpx.get(f"{live_server}{path}", params={"offset": value})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["param"] == "offset"


def test_largest_offset_is_served(live_server):
    r = httpx.get(f"{live_server}/v1/datasets", params={"offset": 2**31 - 1})
    assert r.status_code == 200, r.text
    assert r.json()["data"] == [] and r.json()["offset"] == 2**31 - 1


@pytest.mark.parametrize("body_path,field", [("/v1/private/classify", "seed"), ("/v1/private/generate", "seed")])
def test_seed_beyond_json_safe_integers_is_422(live_server, body_path, field):
    r = httpx.post(f"{live_server}{body_path}", json={"dataset_id": "ds_x", "query": "q", field: 2**53})
    assert r.status_code == 422 and r.json()["error"]["param"] == field, r.text


@pytest.mark.parametrize("method,path,allowed", [
    ("PUT", "/v1/datasets", {"GET", "POST"}),            # two routes share the path
    ("PATCH", "/v1/audits", {"GET", "POST"}),
    ("POST", "/v1/datasets/ds_x", {"GET", "DELETE", "PATCH"}),
    ("GET", "/v1/private/classify", {"POST"}),
    ("DELETE", "/v1/health", {"GET"}),
])
def test_405_lists_every_allowed_method(live_server, method, path, allowed):
    r = httpx.request(method, f"{live_server}{path}")
    assert r.status_code == 405, r.text
    got = {m.strip() for m in r.headers["allow"].split(",")}
    assert allowed <= got and method not in got
    assert got - allowed <= {"HEAD"}  # where a route serves HEAD beside GET
    assert r.json()["error"]["code"] == "method_not_allowed"
