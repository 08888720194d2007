"""NUL and lone surrogates are a 422 naming the field, on SQLite and PostgreSQL (issue 26, item 4).

On main before the fix: PostgreSQL answered each NUL with a 500 (SQLite stored it), and a lone
surrogate in a JSONL upload was a 500 on both (UnicodeEncodeError in the dataset repository).
Bodies are sent as ``json.dumps`` (ASCII escapes ``\\u0000``, ``\\ud800``), as a client would.
"""

from __future__ import annotations

import json

import httpx
import pytest

from app.badtext import BadTextError, check_text

NUL, SURROGATE = "\u0000", "\ud800"
MARKER = "ZQX-BADTEXT-5521"


def _dataset(**over):
    body = {"name": "bad-bytes", "task": "classification", "labels": ["yes", "no"],
            "exemplars": [{"input": f"{MARKER} {i}", "output": ["yes", "no"][i % 2]} for i in range(4)]}
    body.update(over)
    return body


def _post(url: str, body, ctype: str = "application/json") -> httpx.Response:
    raw = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return httpx.post(url, content=raw.encode() if isinstance(raw, str) else raw, headers={"content-type": ctype},
                      timeout=60)


def _refused(r: httpx.Response, param: str, *, line: int | None = None) -> None:
    assert r.status_code == 422, (r.status_code, r.text)
    err = r.json()["error"]
    assert err["param"] == param, err
    assert err["code"] == "invalid_text", err
    assert err["message"].startswith(f"line {line}: " if line else f"{param}: "), err
    assert MARKER not in r.text  # the refused text is never echoed


def _ds_with(**over):
    body = _dataset()
    body.update(over)
    return body


@pytest.mark.parametrize("bad", [NUL, SURROGATE], ids=["nul", "surrogate"])
@pytest.mark.parametrize(
    "make, param",
    [
        (lambda b: _ds_with(name=f"a{b}b"), "name"),
        (lambda b: _ds_with(labels=["yes", f"n{b}o"]), "labels.1"),
        (lambda b: _ds_with(exemplars=[{"input": f"{MARKER}{b}", "output": "yes"}]), "exemplars.0.input"),
        (lambda b: _ds_with(exemplars=[{"input": "x", "output": "yes"}, {"input": "y", "output": f"no{b}"}]),
         "exemplars.1.output"),
        (lambda b: _ds_with(template={"instruction": f"Classify{b}"}), "template.instruction"),
    ],
    ids=["name", "label", "input", "output", "template"],
)
def test_dataset_json_body(live_server, make, param, bad):
    _refused(_post(f"{live_server}/v1/datasets", make(bad)), param)


@pytest.mark.parametrize("bad", [NUL, SURROGATE], ids=["nul", "surrogate"])
def test_dataset_jsonl_names_line_and_field(live_server, bad):
    body = _dataset()
    meta = {k: v for k, v in body.items() if k != "exemplars"}
    rows = [dict(e) for e in body["exemplars"]]
    rows[2]["input"] += bad
    # A blank line counts: the bad exemplar (index 2) is on line 5.
    text = "\n".join([json.dumps(meta), json.dumps(rows[0]), "", json.dumps(rows[1]), json.dumps(rows[2]),
                      json.dumps(rows[3])])
    _refused(_post(f"{live_server}/v1/datasets", text, "application/x-ndjson"), "exemplars.2.input", line=5)
    meta_bad = dict(meta, name=f"x{bad}")
    text = "\n".join([json.dumps(meta_bad)] + [json.dumps(e) for e in rows[:2]])
    _refused(_post(f"{live_server}/v1/datasets", text, "application/x-ndjson"), "name", line=1)


def test_jsonl_lines_end_at_newline_only(live_server):
    # U+2028 and U+0085 are legal raw inside a JSON string; str.splitlines() used to split there.
    body = _dataset()
    meta = {k: v for k, v in body.items() if k != "exemplars"}
    rows = [dict(e, input=e["input"] + " a\u2028b\x85c") for e in body["exemplars"]]
    text = "\n".join([json.dumps(meta, ensure_ascii=False)] + [json.dumps(e, ensure_ascii=False) for e in rows])
    r = _post(f"{live_server}/v1/datasets", text.encode("utf-8"), "application/x-ndjson")
    assert r.status_code == 201, r.text
    assert r.json()["exemplar_count"] == 4


@pytest.mark.parametrize("bad", [NUL, SURROGATE], ids=["nul", "surrogate"])
@pytest.mark.parametrize(
    "path, make, param",
    [
        ("/v1/private/classify", lambda b: {"dataset_id": f"ds_x{b}", "query": "q"}, "dataset_id"),
        ("/v1/private/classify", lambda b: {"dataset_id": "ds_x", "query": f"q{b}"}, "query"),
        ("/v1/audits", lambda b: {"kind": "synthesize", "config": {"dataset_id": f"ds_{b}"}}, "config.dataset_id"),
        ("/v1/audits", lambda b: {"kind": f"sleep{b}", "config": {}}, "kind"),
        # a free-form config: a bad key is named by its parent
        ("/v1/audits", lambda b: {"kind": "sleep", "config": {f"k{b}": 1}}, "config"),
        ("/v1/privacy/calibrate", lambda b: {"mechanism": f"gaussian{b}", "target_epsilon": 1.0}, "mechanism"),
    ],
    ids=["classify-dataset_id", "classify-query", "synthesize-dataset_id", "audit-kind", "config-key", "privacy"],
)
def test_other_bodies(live_server, path, make, param, bad):
    _refused(_post(f"{live_server}{path}", make(bad)), param)


@pytest.mark.parametrize(
    "path, param",
    [
        ("/v1/datasets/ds_x%00", "dataset_id"),
        ("/v1/datasets/ds_x%00/budget", "dataset_id"),
        ("/v1/datasets/ds_x%00/ledger", "dataset_id"),
        ("/v1/audits/job%00", "job_id"),
        ("/v1/audits?after=job_%00", "after"),
        ("/v1/audits?kind=%00", "kind"),
        ("/v1/datasets?limit=1&offset=%00", "offset"),
        ("/v1/models/m%00", "model_id"),
        ("/ui/datasets/ds_x%00", "dataset_id"),
        ("/no/such/route%00", "path"),
        ("/v1/audits?a%00=1", "query"),
    ],
)
def test_paths_and_queries(live_server, path, param):
    _refused(httpx.get(f"{live_server}{path}"), param)


def test_path_on_write_routes(live_server):
    _refused(httpx.delete(f"{live_server}/v1/datasets/ds_x%00"), "dataset_id")
    _refused(httpx.put(f"{live_server}/v1/datasets/ds_x%00/budget", json={"epsilon": 1.0}), "dataset_id")


def test_ui_form_field(live_server):
    r = httpx.post(f"{live_server}/ui/login", content=b"api_key=dp_%00&csrf_token=x",
                   headers={"content-type": "application/x-www-form-urlencoded"})
    _refused(r, "api_key")


def test_clean_text_still_accepted(live_server):
    # Non-ASCII text, valid surrogate pairs (an emoji, escaped) and escaped backslashes pass.
    body = _dataset(name="caf\u00e9 \U0001F600 \\u0000 literal")
    r = _post(f"{live_server}/v1/datasets", body)
    assert r.status_code == 201, r.text
    assert r.json()["name"] == body["name"]


def test_check_text_walks_everything():
    check_text({"a": ["x", {"b": "y"}], "c": 1, "d": None})
    with pytest.raises(BadTextError) as e:
        check_text({"a": ["x", {"b": f"y{NUL}"}], "z": f"{NUL}"})
    assert e.value.param == "a.1.b"  # the first in document order
    with pytest.raises(BadTextError) as e:
        check_text([[["ok", SURROGATE]]])
    assert e.value.param == "0.0.1"
    deep: list = []
    cur = deep
    for _ in range(3000):  # deeper than the interpreter's recursion limit
        nxt: list = []
        cur.append(nxt)
        cur = nxt
    cur.append(NUL)
    with pytest.raises(BadTextError):
        check_text(deep)


def test_deep_nesting_is_not_a_500(live_server):
    deep = "[" * 100_000 + "]" * 100_000  # past json's recursion limit
    r = _post(f"{live_server}/v1/datasets", deep)
    assert r.status_code == 422 and r.json()["error"]["param"] == "body", r.text
    meta = json.dumps({k: v for k, v in _dataset().items() if k != "exemplars"})
    r = _post(f"{live_server}/v1/datasets", meta + "\n" + deep, "application/x-ndjson")
    assert r.status_code == 422 and r.json()["error"]["param"] == "exemplars.0", r.text
    r = _post(f"{live_server}/v1/privacy/calibrate", deep)  # a 400 before tests/api/test_unparseable_body.py
    assert r.status_code == 422 and r.json()["error"]["param"] == "body", r.text
