"""mozo's data-aware defaults over real HTTP (issue 29, item 6; SQLite and PostgreSQL, the bundled SmolLM2):
a default call runs what the dataset allows and reports it in ``privacy.params``, charged as what ran; a set
too small for a usable default is a 422 naming ``params.experts``, before any charge."""

from __future__ import annotations

import re

import httpx
import pytest

from app.icl.samples import load_sample

SAMPLE = load_sample("gen_dialogsum")
MEASURED = {"experts": 60, "group_size": 4, "lambda_mode": "per_expert", "private_tokens": 16}


def _dataset(url: str, n: int, epsilon: float = 20.0) -> str:
    body = {"name": f"dlg-{n}", "task": "generation", "template": SAMPLE.template,
            "budget": {"epsilon": epsilon, "delta": 1e-5},
            "exemplars": [{"input": a, "output": b} for a, b in SAMPLE.exemplars[:n]]}
    r = httpx.post(f"{url}/v1/datasets", json=body, timeout=60)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _forecast(url: str, ds: str, **q) -> httpx.Response:
    return httpx.get(f"{url}/v1/datasets/{ds}/budget/forecast", params={"mechanism": "mozo", **q}, timeout=60)


def _no_exemplar_text(text: str) -> None:
    for a, b in SAMPLE.exemplars[:8]:
        assert a not in text and b not in text


def test_the_loaded_sample_defaults_to_the_measured_setting(live_server):
    r = httpx.post(f"{live_server}/v1/samples/gen_dialogsum/load",
                   json={"name": "dialogues", "budget": {"epsilon": 20.0, "delta": 1e-5}}, timeout=60)
    assert r.status_code == 201, r.text
    ds = r.json()["id"]
    default = _forecast(live_server, ds, epsilon=2, max_tokens=32)
    explicit = _forecast(live_server, ds, epsilon=2, max_tokens=32, **MEASURED)
    assert default.status_code == 200 and explicit.status_code == 200, (default.text, explicit.text)
    # the default call is charged exactly as the measured best written out (60 x 4, per_expert, 16 private steps)
    assert default.json()["per_answer"] == explicit.json()["per_answer"]
    other = _forecast(live_server, ds, epsilon=2, max_tokens=32, experts=32, group_size=1, private_tokens=32)
    assert other.json()["per_answer"]["epsilon"] != default.json()["per_answer"]["epsilon"]  # really differs
    # eps 1: no size of this set is usable by default -> a 422 that says what to change
    low = _forecast(live_server, ds, epsilon=1, max_tokens=32)
    assert low.status_code == 422, low.text
    err = low.json()["error"]
    assert err["param"] == "params.experts" and "raise epsilon" in err["message"]


def test_a_default_call_with_the_real_model_reports_and_charges_what_ran(live_server):
    # 8 exemplars of the sample: 8 // 4 = 2 four-shot experts; at eps 8 over 1 token their margin is usable
    ds = _dataset(live_server, 8)
    r = httpx.post(f"{live_server}/v1/private/generate", timeout=600, json={
        "dataset_id": ds, "query": SAMPLE.example_queries[0], "mechanism": "mozo", "epsilon": 8.0,
        "max_tokens": 1})
    assert r.status_code == 200, r.text
    _no_exemplar_text(r.text)
    b = r.json()
    p = b["privacy"]["params"]
    assert {k: p[k] for k in MEASURED} == {"experts": 2, "group_size": 4, "lambda_mode": "per_expert",
                                           "private_tokens": 1}
    assert b["usage"]["completion_tokens"] == 1
    explicit = _forecast(live_server, ds, epsilon=8, max_tokens=1, experts=2, group_size=4,
                         lambda_mode="per_expert", private_tokens=1).json()["per_answer"]
    assert b["privacy"]["epsilon"] == pytest.approx(explicit["epsilon"], rel=1e-12)
    budget = httpx.get(f"{live_server}/v1/datasets/{ds}/budget").json()
    assert budget["charges"] == 1 and budget["epsilon_spent"] == pytest.approx(b["privacy"]["epsilon"], rel=1e-9)


def test_too_small_a_set_is_refused_naming_the_field_before_any_charge(live_server):
    ds = _dataset(live_server, 12)
    r = httpx.post(f"{live_server}/v1/private/generate", timeout=600, json={
        "dataset_id": ds, "query": SAMPLE.example_queries[0], "mechanism": "mozo", "epsilon": 2.0})
    assert r.status_code == 422, r.text
    _no_exemplar_text(r.text)
    err = r.json()["error"]
    assert err["param"] == "params.experts"
    need = re.search(r"add exemplars \(at least (\d+) at this budget\)", err["message"])
    assert "12 exemplars" in err["message"] and need and int(need.group(1)) >= 156  # 156 at delta 1e-5
    assert httpx.get(f"{live_server}/v1/datasets/{ds}/budget").json()["charges"] == 0
