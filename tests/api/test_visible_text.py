"""Labels and dataset names must hold visible text: only whitespace, zero-width or other format (Cf) and control
(Cc) characters is a 422 naming the field (app.badtext.has_visible, app.jsonbody.VisibleText).

Before: str.strip() keeps U+200B, U+FEFF, U+2060, so a label "\\u200b" registered (a class nobody can see or type),
"yes" and "yes\\u200b" were two classes splitting one label's votes, and a dataset named "\\u200b\\u200c" was
accepted. Real server, SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import re

import httpx
import pytest

T = 60
INVISIBLE = ["\u200b", " \ufeff\u2060 ", "\u200c\u200d", "\u00ad", "\u202e", "\x01\u200b"]


def _upload(base: str, **meta) -> httpx.Response:
    body = {"name": "n", "labels": ["a", "b"], "exemplars": [{"input": "i", "output": "a"}], **meta}
    return httpx.post(f"{base}/v1/datasets", json=body, timeout=T)


@pytest.mark.parametrize("text", INVISIBLE)
def test_an_invisible_label_or_name_is_a_422_naming_it(live_server, text):
    r = _upload(live_server, labels=["a", text])
    assert r.status_code == 422 and r.json()["error"]["param"] == "labels.1", r.text
    assert "visible text" in r.json()["error"]["message"]
    r = _upload(live_server, name=text)
    assert r.status_code == 422 and r.json()["error"]["param"] == "name", r.text
    meta = json.dumps({"name": text, "labels": ["a", "b"]})
    r = httpx.post(f"{live_server}/v1/datasets", content=f'{meta}\n{{"input": "i", "output": "a"}}'.encode(),
                   headers={"content-type": "application/x-ndjson"}, timeout=T)
    assert r.status_code == 422 and r.json()["error"]["param"] == "name", r.text
    r = httpx.post(f"{live_server}/v1/samples/support_intents/load", json={"name": text}, timeout=T)
    assert r.status_code == 422 and r.json()["error"]["param"] == "name", r.text


def test_a_label_equal_to_another_but_a_zero_width_character_is_a_duplicate(live_server):
    r = _upload(live_server, labels=["yes", "yes\u200b", "no"])
    assert r.status_code == 422 and r.json()["error"]["param"] == "labels", r.text
    assert "unique" in r.json()["error"]["message"]


def test_synthesize_refuses_an_invisible_name_at_submit(live_server):
    r = httpx.post(f"{live_server}/v1/audits", timeout=T, json={
        "kind": "synthesize", "config": {"dataset_id": "ds_nosuch", "epsilon": 1, "delta": 1e-5, "shots_per_label": 1,
                   "name": "\u200b"}})
    assert r.status_code == 422 and r.json()["error"]["param"] == "config.name", r.text


def test_visible_text_with_invisible_characters_inside_is_kept(live_server):
    r = _upload(live_server, name="caf\u00e9 \u200b set", labels=["pos\u00adtive", "ne\u200dgative"],
                exemplars=[{"input": "i", "output": "ne\u200dgative"}])
    assert r.status_code == 201, r.text
    assert r.json()["labels"] == ["pos\u00adtive", "ne\u200dgative"]


def test_the_openapi_pattern_says_the_same(live_server):
    from app.badtext import has_visible

    doc = httpx.get(f"{live_server}/openapi.json", timeout=T).text
    pattern = next(p for p in re.findall(r'"pattern":\s*"((?:[^"\\]|\\.)*)"', doc) if "u200b" in p)
    rx = re.compile(json.loads(f'"{pattern}"'))
    for text in INVISIBLE + ["a", " x ", "\u200bx", "\u00e9"]:
        assert (rx.search(text) is not None) == has_visible(text), repr(text)
