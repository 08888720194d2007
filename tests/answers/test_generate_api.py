"""POST /v1/private/generate over real HTTP (uvicorn, SQLite and PostgreSQL). Model calls are
kept to one or two tokens; every error case is refused before any model work."""

from __future__ import annotations

import httpx
import pytest

MARK = "ZQX-GEN-5521"  # planted in every exemplar; must never appear in any response


def _dataset(url: str, *, task: str = "generation", epsilon: float = 20.0, adjacency: str | None = None) -> str:
    body = {
        "name": "gen",
        "task": task,
        "template": {"instruction": "Summarize.", "input_prefix": "Text:", "output_prefix": "Summary:"},
        "budget": {"epsilon": epsilon, "delta": 1e-5, **({"adjacency": adjacency} if adjacency else {})},
        "exemplars": [{"input": f"{MARK} Ann meets Bo on day {i}.", "output": f"{MARK} Ann and Bo meet ({i})."}
                      for i in range(6)],
    }
    if task == "classification":
        body["labels"] = ["a", "b"]
        body["exemplars"] = [{"input": f"{MARK} text {i}", "output": "ab"[i % 2]} for i in range(6)]
    r = httpx.post(f"{url}/v1/datasets", json=body)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _post(url: str, **body) -> httpx.Response:
    r = httpx.post(f"{url}/v1/private/generate", json=body, timeout=600)
    assert MARK not in r.text
    return r


def test_private_generation_is_charged_and_internals_only_when_asked(live_server):
    ds = _dataset(live_server)
    req = dict(dataset_id=ds, query="Cy meets Di on Friday.", mechanism="clip_softmax", epsilon=2.0,
               max_tokens=1, params={"prompts": 2}, seed=7)
    r = httpx.post(f"{live_server}/v1/private/generate", json=req, headers={"Idempotency-Key": "g-1"}, timeout=600)
    assert r.status_code == 200, r.text
    assert MARK not in r.text
    b = r.json()
    assert b["object"] == "private.generation" and isinstance(b["text"], str) and "internals" not in b
    assert b["mechanism"] == "clip_softmax" and b["usage"]["completion_tokens"] <= 1
    p = b["privacy"]
    assert p["is_private"] and 0 < p["epsilon"] <= 2.0 and p["adjacency"] == "replace-one"
    assert p["params"]["prompts"] == 2 and p["params"]["calibrated"] is True
    assert b["budget"]["epsilon_spent"] == pytest.approx(p["epsilon"], rel=1e-6)
    assert float(r.headers["X-DPICL-Epsilon-Spent"]) == pytest.approx(p["epsilon"], rel=1e-5)

    # The same Idempotency-Key replays the stored answer (no model work, no second charge);
    # internals come back only when asked.
    r2 = httpx.post(f"{live_server}/v1/private/generate", json={**req, "return_internals": True},
                    headers={"Idempotency-Key": "g-1"}, timeout=600)
    assert r2.status_code == 200, r2.text
    assert MARK not in r2.text and r2.headers.get("Idempotent-Replayed") == "true"
    i = r2.json()["internals"]
    assert i["partitions"] and len(i["steps"]) >= 1 and "token" in i["steps"][0]
    assert r2.json()["text"] == b["text"]
    assert httpx.get(f"{live_server}/v1/datasets/{ds}/budget").json()["charges"] == 1


def test_zero_shot_is_not_charged(live_server):
    ds = _dataset(live_server)
    r = _post(live_server, dataset_id=ds, instruction="Write one word.", mechanism="zero_shot", max_tokens=1)
    assert r.status_code == 200, r.text
    b = r.json()
    assert b["privacy"]["epsilon"] == 0.0 and b["budget"] is None
    assert httpx.get(f"{live_server}/v1/datasets/{ds}/budget").json()["charges"] == 0


@pytest.mark.parametrize("body, status, param", [
    (dict(mechanism="nope"), 422, "mechanism"),
    (dict(mechanism="esa", params={"bogus": 1}), 422, "params.bogus"),
    (dict(mechanism="esa", params={"partitions": 7}), 422, "params.partitions"),
    (dict(mechanism="clip_softmax", params={"temperature": 0.001}), 422, "params.temperature"),
    (dict(mechanism="clip_softmax", params={"public_top_k": -5}), 422, "params.public_top_k"),
    (dict(mechanism="poe", params={"public_top_k": 2.5}), 422, "params.public_top_k"),
    (dict(mechanism="ksa", params={"epsilon": 1.0}), 422, "params.epsilon"),
    (dict(mechanism="mozo", params={"uniform_mix": 2}), 422, "params.uniform_mix"),
    (dict(mechanism="mozo", params={"lambda_max": 0}), 422, "params.lambda_max"),
    (dict(mechanism="mozo", params={"epsilon_per_token": 5.0}), 422, "params.epsilon_per_token"),
    (dict(mechanism="full_context"), 422, "mechanism"),
    (dict(mechanism="zero_shot", epsilon=1.0), 422, "epsilon"),
    (dict(mechanism="esa", max_tokens=0), 422, "max_tokens"),
    (dict(mechanism="esa", epsilon=-1), 422, "epsilon"),
    (dict(mechanism="esa", adjacency="add-remove"), 422, "adjacency"),
    (dict(mechanism="esa", instruction="also this"), 422, "instruction"),
    (dict(mechanism="esa", query=None), 422, "query"),
    (dict(mechanism="esa", epsilon=30.0), 429, "epsilon"),  # over the dataset's budget of 20
    (dict(mechanism="esa", dataset_id="ds_missing"), 404, "dataset_id"),
])
def test_bad_requests_are_refused_naming_the_field(live_server, body, status, param):
    ds = _dataset(live_server)
    req = {"dataset_id": ds, "query": "Cy meets Di.", "epsilon": 1.0, **body}
    if req.get("query") is None:
        req.pop("query")
    if req["mechanism"] in ("zero_shot", "full_context") and "epsilon" not in body:
        req.pop("epsilon")
    r = _post(live_server, **req)
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == param


def test_add_remove_refuses_a_unit_size_that_would_follow_n(live_server):
    """Under add-remove n is private: ESA's default 4 shots per partition does not fit 6 exemplars and is
    refused (the old default, 6 // 6 = 1, would follow n and change every unit for n = 16 vs 15);
    set explicitly it is served as under replace-one."""
    ds = _dataset(live_server, adjacency="add-remove")
    req = {"dataset_id": ds, "query": "Cy meets Di.", "epsilon": 1.0, "mechanism": "esa", "max_tokens": 1}
    r = _post(live_server, **req)
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["param"] == "params.shots_per_partition" and "add-remove" in err["message"]
    assert httpx.get(f"{live_server}/v1/datasets/{ds}/budget").json()["charges"] == 0
    r = _post(live_server, **req, params={"partitions": 3, "shots_per_partition": 2, "candidates": 2})
    assert r.status_code == 200, r.text
    assert r.json()["privacy"]["adjacency"] == "add-remove"


def test_classification_dataset_is_refused(live_server):
    ds = _dataset(live_server, task="classification")
    r = _post(live_server, dataset_id=ds, query="x", mechanism="esa", epsilon=1.0)
    assert r.status_code == 422 and r.json()["error"]["code"] == "wrong_task"


def test_mechanism_listing(live_server):
    r = httpx.get(f"{live_server}/v1/private/generate/mechanisms")
    assert r.status_code == 200
    names = {m["name"] for m in r.json()["data"]}
    assert names == {"esa", "ksa", "clip_softmax", "poe", "mozo", "zero_shot", "full_context"}
    mozo = next(m for m in r.json()["data"] if m["name"] == "mozo")
    assert "uniform_mix" in mozo["params"] and "lambda_max" in mozo["params"]


def test_mozo_over_the_private_endpoint_and_the_chat_endpoint_share_the_ledger(live_server):
    ds = _dataset(live_server)
    r = _post(live_server, dataset_id=ds, query="Cy meets Di on Friday.", mechanism="mozo", epsilon=2.0,
              max_tokens=1, params={"experts": 2}, return_internals=True)
    assert r.status_code == 200, r.text
    b = r.json()
    p = b["privacy"]
    assert b["mechanism"] == "mozo" and p["is_private"] and 0 < p["epsilon"] <= 2.0
    assert p["params"]["bound"].startswith("worst case")
    assert b["budget"]["epsilon_spent"] == pytest.approx(p["epsilon"], rel=1e-6)
    step = b["internals"]["steps"][0]
    assert 0.0 <= step["lambda"] < 1.0 and step["candidates"] >= 2

    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"{live_server}/v1", api_key="unused-in-open-mode", timeout=600)
    resp = client.chat.completions.create(
        model="smollm2-135m-instruct", max_tokens=1,
        messages=[{"role": "user", "content": "Cy meets Di on Friday."}],
        extra_body={"dataset_id": ds, "mechanism": "mozo", "epsilon": 1.0, "dp_params": {"experts": 2}},
    )
    dp = resp.model_extra["dp"]
    assert dp["mechanism"] == "mozo" and 0 < dp["privacy"]["epsilon"] <= 1.0
    spent = httpx.get(f"{live_server}/v1/datasets/{ds}/budget").json()
    assert spent["charges"] == 2
    with pytest.raises(openai.UnprocessableEntityError):
        client.chat.completions.create(model="smollm2-135m-instruct", messages=[{"role": "user", "content": "x"}],
                                       extra_body={"dataset_id": ds, "mechanism": "mozo", "epsilon": 1.0,
                                                   "dp_params": {"uniform_mix": -1}})
    assert httpx.get(f"{live_server}/v1/datasets/{ds}/budget").json()["charges"] == 2
