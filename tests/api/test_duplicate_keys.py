"""A JSON object that repeats a key is a 422 naming it, on every route (app.api.json_route, app.jsonbody.loads).

Before: json.loads kept the last one, so ``{"epsilon": 1, "epsilon": 100}`` was an answer at epsilon 100 while a
proxy or WAF that reads the first saw epsilon 1. Real server (uvicorn, the bundled models), SQLite and PostgreSQL.
"""

from __future__ import annotations

import httpx
import pytest

T = 60
MARKER = "ZQXJ-CANARY-7731"


def _answers(url: str, routes, raw: bytes):
    """Each JSON route's answer to ``raw``, with a label for assertions (a sample load's 404, whose name is checked
    first, is skipped)."""
    for method, path in routes:
        r = httpx.request(method, f"{url}{path}", content=raw, headers={"content-type": "application/json"}, timeout=T)
        if r.status_code == 404 and path.endswith("/load"):
            continue
        yield f"{method} {path}: {r.status_code} {r.text[:300]}", r


def test_every_json_route_refuses_a_repeated_key(live_server, json_body_routes):
    raw = b'{"epsilon": 1, "query": "q", "epsilon": 100}'
    for where, r in _answers(live_server, json_body_routes, raw):
        assert r.status_code == 422, where  # before: 200, 404 or another field's 422 (the last epsilon won)
        err = r.json()["error"]
        assert (err["param"], err["code"]) == ("epsilon", "duplicate_key"), where
        assert err["message"] == "epsilon: the key appears more than once in a JSON object", where


def test_the_answer_is_not_made_with_the_last_value(live_server):
    # target_epsilon 4 then 400: before, a 200 calibrated for 400 (the first one, which a proxy reads, was dropped)
    good = ('{"mechanism": "clip-softmax", "solve_for": "temperature", "target_epsilon": 4.0, "delta": 1e-5, '
            '"clip": 10.0, "batch_size": 50, "compositions": 2000, "orders": "2-99"')
    ok = httpx.post(f"{live_server}/v1/privacy/calibrate", timeout=T, headers={"content-type": "application/json"},
                    content=(good + "}").encode())
    assert ok.status_code == 200, ok.text
    r = httpx.post(f"{live_server}/v1/privacy/calibrate", timeout=T, headers={"content-type": "application/json"},
                   content=(good + ', "target_epsilon": 400}').encode())
    assert r.status_code == 422 and r.json()["error"]["param"] == "target_epsilon", r.text


def test_nested_keys_are_named_by_their_path_and_exemplar_text_is_not_echoed(live_server):
    raw = ('{"name": "d", "task": "classification", "labels": ["a", "b"], "exemplars": ['
           f'{{"input": "{MARKER} one", "output": "a"}}, {{"input": "{MARKER} two", "output": "b", "output": "a"}}]}}')
    r = httpx.post(f"{live_server}/v1/datasets", content=raw.encode(), timeout=T,
                   headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["param"] == "exemplars.1.output" and MARKER not in r.text
    r = httpx.post(f"{live_server}/v1/audits", timeout=T, headers={"content-type": "application/json"},
                   content=b'{"kind": "sleep", "config": {"steps": 1, "steps": 100000}}')
    assert r.status_code == 422 and r.json()["error"]["param"] == "config.steps", r.text


def test_jsonl_upload_names_line_and_field(live_server):
    lines = ['{"name": "d", "task": "classification", "labels": ["a", "b"]}',
             f'{{"input": "{MARKER}", "output": "a"}}', f'{{"input": "{MARKER}", "input": "x", "output": "b"}}']
    r = httpx.post(f"{live_server}/v1/datasets", content="\n".join(lines).encode(), timeout=T,
                   headers={"content-type": "application/x-ndjson"})
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["param"] == "exemplars.1.input" and err["message"].startswith("line 3: ") and MARKER not in r.text
    lines[0] = '{"name": "d", "task": "classification", "labels": ["a", "b"], "name": "e"}'
    r = httpx.post(f"{live_server}/v1/datasets", content="\n".join(lines[:2]).encode(), timeout=T,
                   headers={"content-type": "application/x-ndjson"})
    assert r.status_code == 422 and r.json()["error"]["param"] == "name", r.text


def test_distinct_keys_and_equal_keys_in_different_objects_still_parse():
    from app.jsonbody import DuplicateKeyError, loads

    assert loads(b'{"a": {"x": 1}, "b": {"x": 2}, "c": [{"x": 1}, {"x": 1}]}') == {
        "a": {"x": 1}, "b": {"x": 2}, "c": [{"x": 1}, {"x": 1}]}
    assert loads(b'\xef\xbb\xbf{"a": 1}') == {"a": 1}  # a UTF-8 byte order mark, as json.loads takes it
    with pytest.raises(DuplicateKeyError) as e:
        loads('[{"x": {"y": 1}}, {"x": 1, "q": {"z": 1, "z": 2}}]')
    assert e.value.param == "1.q.z"


def test_a_router_without_the_route_class_fails_start_up():
    from fastapi import APIRouter

    from app.api.main import _strict_json_bodies

    r = APIRouter()
    r.post("/x")(lambda: None)
    with pytest.raises(RuntimeError, match="route_class=JSONRoute"):
        _strict_json_bodies(r)


# Non-finite numbers: Python's json reads NaN / Infinity / -Infinity (not JSON) and makes 1e999 inf. A free-form
# value kept them: a canary_mia job with simulated votes [NaN, 3] was stored, then its 202 could not be rendered
# (a 500); an audit plan with partitions Infinity was a 500 (OverflowError). Now a 422 naming the value's path.
@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_non_finite_number_is_a_422_naming_it(live_server, json_body_routes, literal):
    raw = f'{{"query": "q", "epsilon": {literal}}}'.encode()
    for where, r in _answers(live_server, json_body_routes, raw):
        assert r.status_code == 422 and r.json()["error"]["param"] == "epsilon", where
    sim = '{"type": "simulated", "params": {"epsilon": 1, "delta": 1e-5, "partitions": %s}%s}'
    cases = [("/v1/audits", '{"kind": "canary_mia", "config": {"target": %s, "trials": 40}}'
              % (sim % ("4", f', "votes_with": [{literal}, 3], "votes_without": [0, 4]')),
              "config.target.votes_with.0"),  # before: 500 after the job was stored
             ("/v1/audits/plan", '{"kind": "canary_mia", "config": {"target": %s}}' % (sim % (literal, "")),
              "config.target.params.partitions")]  # before: 500 (OverflowError)
    for path, body, param in cases:
        r = httpx.post(f"{live_server}{path}", content=body.encode(), headers={"content-type": "application/json"},
                       timeout=T)
        assert r.status_code == 422 and r.json()["error"]["param"] == param, r.text[:300]


def test_finite_numbers_still_parse():
    from app.jsonbody import NonFiniteNumberError, loads

    assert loads('{"a": 1.5, "b": -0.0, "c": 1e-320, "d": 1.7976931348623157e308}')["d"] == 1.7976931348623157e308
    with pytest.raises(NonFiniteNumberError) as e:
        loads('{"c": {"v": [1, 2, Infinity]}}')
    assert e.value.param == "c.v.2"


# An integer over int()'s digit limit (4300 digits): json.loads raises a plain ValueError (not JSONDecodeError), which
# the JSONL upload and the /ui audit form did not catch: a 500 "internal server error". Now a 422 naming its path.
LONG = "9" * 5000


def test_an_integer_too_long_to_read_is_a_422_naming_it_on_every_route(live_server, json_body_routes):
    raw = f'{{"query": "q", "epsilon": -{LONG}}}'.encode()
    for where, r in _answers(live_server, json_body_routes, raw):
        assert r.status_code == 422, where  # before: 422 "body: not valid JSON: it could not be decoded"
        err = r.json()["error"]
        assert (err["param"], err["code"]) == ("epsilon", "invalid_value"), where
        assert err["message"] == "epsilon: a number with more than 4300 digits is not accepted", where
        assert LONG[:50] not in r.text, where


def test_jsonl_upload_names_a_long_integer_by_line_and_field(live_server):
    head = '{"name": "d", "task": "classification", "labels": ["a", "b"]}'
    for lines, param, line in (
            ([head, f'{{"input": "{MARKER}", "output": "a", "extra": [1, {LONG}]}}'], "exemplars.0.extra.1", 2),
            ([head.replace('"d"', f'"d", "epsilon": {LONG}'), f'{{"input": "{MARKER}", "output": "a"}}'],
             "epsilon", 1)):
        r = httpx.post(f"{live_server}/v1/datasets", content="\n".join(lines).encode(), timeout=T,
                       headers={"content-type": "application/x-ndjson"})
        assert r.status_code == 422, r.text[:300]  # before: 500
        err = r.json()["error"]
        assert err["param"] == param and err["message"].startswith(f"line {line}: "), err
        assert MARKER not in r.text and LONG[:50] not in r.text


def test_long_integers_are_located_and_the_limit_itself_still_parses():
    from app.jsonbody import LongIntegerError, loads

    assert loads('{"a": %s}' % ("1" * 4300))["a"] == int("1" * 4300)  # at the limit: read as before
    with pytest.raises(LongIntegerError) as e:
        loads('{"a": [0, {"b": -%s}], "c": 1}' % ("1" * 4301))
    assert e.value.param == "a.1.b"
    with pytest.raises(LongIntegerError) as e:
        loads(LONG)
    assert e.value.param == "body"
