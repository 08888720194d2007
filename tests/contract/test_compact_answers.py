"""Compact private answers: ``privacy`` carries epsilon, delta, adjacency, mechanism, parameters and
the noise with its scale; the RDP curve only with ``?include=accounting`` and on the ledger entry.
Real model (SmolLM2) and real HTTP on both databases."""

from __future__ import annotations

import json

import httpx
import pytest

from app.answers.presentation import compact_privacy, noise_of

T = 180
LABELS = ["sports", "weather"]
EXEMPLARS = [
    ("The striker scored twice in the final minutes.", "sports"),
    ("Heavy rain is expected across the coast tonight.", "weather"),
    ("The goalkeeper saved a penalty in extra time.", "sports"),
    ("Sunny skies and mild temperatures all weekend.", "weather"),
]
GAUSS = {"mechanism": "rnm", "epsilon": 1.0, "delta": 1e-5, "partitions": 2, "shots_per_partition": 2}


def _dataset(url: str) -> str:
    r = httpx.post(f"{url}/v1/datasets", json={
        "name": "compact", "labels": LABELS, "budget": {"epsilon": 50.0, "delta": 1e-5},
        "exemplars": [{"input": i, "output": o} for i, o in EXEMPLARS]})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def test_private_answer_is_compact_and_the_curve_is_on_request_and_in_the_ledger(live_server):
    ds = _dataset(live_server)
    req = {"dataset_id": ds, "query": "Thunderstorms this afternoon.", **GAUSS}
    r = httpx.post(f"{live_server}/v1/private/classify", json=req, timeout=T)
    assert r.status_code == 200, r.text
    p = r.json()["privacy"]
    assert "orders" not in p and "rdp" not in p
    assert p["epsilon"] == pytest.approx(1.0) and p["delta"] == 1e-5
    assert p["adjacency"] == "replace-one" and p["mechanism"] == "rnm-gaussian"
    # The scale in ``noise`` is the mechanism's own calibrated sigma, not a copy of some default.
    assert p["noise"] == {"distribution": "gaussian", "parameter": "sigma", "scale": p["params"]["sigma"]}
    assert p["noise"]["scale"] > 1.0
    assert r.json()["budget"]["epsilon_spent"] == pytest.approx(1.0)
    assert len(r.content) < 1500, len(r.content)  # was several KB with ~100 orders and values

    full = httpx.post(f"{live_server}/v1/private/classify", params={"include": "accounting"},
                      json={**req, "query": "Goal in the last minute."}, timeout=T)
    assert full.status_code == 200, full.text
    fp = full.json()["privacy"]
    assert len(fp["orders"]) == len(fp["rdp"]) > 50
    assert fp["noise"] == p["noise"]  # the same mechanism, same calibration

    bad = httpx.post(f"{live_server}/v1/private/classify", params={"include": "curve"}, json=req, timeout=T)
    assert bad.status_code == 422 and bad.json()["error"]["param"] == "include"

    ledger = httpx.get(f"{live_server}/v1/datasets/{ds}/ledger").json()["data"]
    assert len(ledger) == 2
    for e in ledger:
        acc = e["accounting"]
        assert len(acc["orders"]) == len(acc["rdp"]) > 50
        # Gaussian RDP is linear in the order: rdp(a) = a * Delta^2 / (2 sigma^2) (Mironov 2017, Prop. 7).
        ratio = [r_ / a for a, r_ in zip(acc["orders"], acc["rdp"])]
        assert max(ratio) == pytest.approx(min(ratio), rel=1e-9)


def test_idempotent_replay_is_compact_too(live_server):
    ds = _dataset(live_server)
    req = {"dataset_id": ds, "query": "Rain tomorrow?", **GAUSS}
    h = {"Idempotency-Key": "compact-1"}
    a = httpx.post(f"{live_server}/v1/private/classify", json=req, headers=h, timeout=T)
    b = httpx.post(f"{live_server}/v1/private/classify", json=req, headers=h, params={"include": "accounting"},
                   timeout=T)
    assert a.status_code == b.status_code == 200
    assert b.headers.get("idempotent-replayed") == "true"
    assert "rdp" not in a.json()["privacy"] and len(b.json()["privacy"]["rdp"]) > 50
    assert a.json()["label"] == b.json()["label"]


def test_openai_dp_extension_is_compact(live_server):
    ds = _dataset(live_server)
    body = {"model": "smollm2-135m-instruct", "messages": [{"role": "user", "content": "Snow tonight."}],
            "dataset_id": ds, **GAUSS}
    r = httpx.post(f"{live_server}/v1/chat/completions", json=body, timeout=T)
    assert r.status_code == 200, r.text
    dp = r.json()["dp"]
    assert "rdp" not in dp["privacy"] and "orders" not in dp["privacy"]
    assert dp["privacy"]["noise"]["distribution"] == "gaussian"
    assert len(json.dumps(dp)) < 1200
    full = httpx.post(f"{live_server}/v1/chat/completions", params={"include": "accounting"}, json=body, timeout=T)
    assert len(full.json()["dp"]["privacy"]["rdp"]) > 50


def _gen_cost(name: str, **params):
    from app.mechanisms.gen_common import GenerationRequest
    from app.mechanisms.generation import get_generation_mechanism

    ex = [(f"question {i}", f"answer {i}") for i in range(16)]
    req = GenerationRequest.build(ex, "q", epsilon=2.0, delta=1e-6, adjacency="replace-one", max_tokens=8,
                                  template={}, params=params)
    return get_generation_mechanism(name).cost(req)


@pytest.mark.parametrize("name,dist,parameter,key", [
    ("esa", "gaussian", "sigma", "sigma"),
    ("clip_softmax", "exponential-mechanism", "temperature", "temperature"),
    ("poe", "exponential-mechanism", "temperature", None),
    ("ksa", "gumbel", "b", "gumbel_scale"),
])
def test_noise_block_of_every_generation_mechanism(name, dist, parameter, key):
    cost = _gen_cost(name)
    n = noise_of(cost)
    assert n["distribution"] == dist and n["parameter"] == parameter
    if key:
        assert n["scale"] == cost["params"][key]
    else:  # PoE samples softmax(lambda * U): the temperature is 1 / lambda
        assert n["scale"] == pytest.approx(1.0 / cost["params"]["inverse_temperature"])
    c = compact_privacy(cost)
    assert "orders" not in c and "rdp" not in c and "rdp_without_ptr_delta" not in c["params"]
    assert compact_privacy(cost, include_accounting=True)["params"] == cost["params"]


def test_non_private_answer_has_no_noise():
    assert noise_of(_gen_cost("zero_shot")) is None
