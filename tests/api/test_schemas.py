"""app/api/schemas.py: the request enumerations come from the registries, and every route's
response schema in the OpenAPI document matches what the route answers."""

from __future__ import annotations

import httpx
import pytest
from pydantic import ValidationError

from app.api import schemas
from app.api.errors import validation_error


def test_enumerations_are_the_registries_names():
    from app.mechanisms import mechanism_names
    from app.mechanisms.generation import GENERATION_MECHANISMS
    from app.privacy.adjacency import Adjacency

    assert set(schemas.CLASSIFY_MECHANISMS) == set(mechanism_names())
    assert len(schemas.CLASSIFY_MECHANISMS) == len(mechanism_names())
    assert set(schemas.GENERATE_MECHANISMS) == set(GENERATION_MECHANISMS)
    assert set(schemas.CHAT_MECHANISMS) == set(mechanism_names()) | set(GENERATION_MECHANISMS)
    assert set(schemas.ADJACENCIES) == {a.value for a in Adjacency}


def _param(model, body: dict) -> tuple[str | None, str | None]:
    with pytest.raises(ValidationError) as exc:
        model.model_validate(body)
    err = validation_error(list(exc.value.errors()))
    return err.param, err.code


@pytest.mark.parametrize("route", ["classify", "generate", "chat"])
def test_unknown_mechanism_or_adjacency_is_422_naming_the_field(route):
    from app.api.routes.openai_compat import ChatCompletionRequest
    from app.api.routes.private import ClassifyRequest
    from app.api.routes.private_generate import GenerateRequest

    model, base = {
        "classify": (ClassifyRequest, {"dataset_id": "ds", "query": "q"}),
        "generate": (GenerateRequest, {"dataset_id": "ds", "query": "q"}),
        "chat": (ChatCompletionRequest, {"dataset_id": "ds", "messages": [{"role": "user", "content": "q"}]}),
    }[route]
    assert _param(model, {**base, "mechanism": "nope"}) == ("mechanism", "invalid_value")
    assert _param(model, {**base, "mechanism": 3}) == ("mechanism", "invalid_value")
    assert _param(model, {**base, "adjacency": "sideways"}) == ("adjacency", "invalid_value")


def test_spellings_the_registries_accept_are_canonicalised():
    from app.api.routes.openai_compat import ChatCompletionRequest
    from app.api.routes.private import ClassifyRequest
    from app.api.routes.private_generate import GenerateRequest

    q = {"dataset_id": "ds", "query": "q"}
    c = ClassifyRequest.model_validate({**q, "mechanism": "RNM", "adjacency": "add_remove"})
    assert (c.mechanism, c.adjacency) == ("rnm", "add-remove")
    assert ClassifyRequest.model_validate({**q, "mechanism": "private-voting"}).mechanism == "rnm"
    g = GenerateRequest.model_validate({"dataset_id": "ds", "query": "q", "mechanism": "clip-softmax",
                                        "adjacency": "Replace-One"})
    assert (g.mechanism, g.adjacency) == ("clip_softmax", "replace-one")
    chat = {"dataset_id": "ds", "messages": [{"role": "user", "content": "q"}]}
    assert ChatCompletionRequest.model_validate({**chat, "mechanism": "clip-softmax"}).mechanism == "clip_softmax"
    assert ChatCompletionRequest.model_validate({**chat, "mechanism": "zero-shot"}).mechanism == "zero_shot"
    assert ChatCompletionRequest.model_validate(chat).mechanism is None


def test_every_operation_declares_its_success_body():
    from app.api.main import create_app
    from tests.conftest import server_settings

    doc = create_app(server_settings("sqlite:///unused.db")).openapi()
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            ok = {c: r for c, r in op["responses"].items() if c.startswith("2")}
            assert ok, (method, path)
            for code, resp in ok.items():
                content = resp.get("content", {})
                schema = next(iter(content.values()), {}).get("schema")
                assert schema, (method, path, code)
    health = doc["paths"]["/v1/health"]["get"]["responses"]["503"]
    assert health["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Health"}
    replay = doc["paths"]["/v1/audits"]["post"]["responses"]["200"]
    assert replay["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/AuditJob"}


def _check(model, r: httpx.Response) -> dict:
    assert r.status_code in (200, 201, 202), r.text
    body = r.json()
    model.model_validate(body)
    return body


def test_live_answers_match_their_response_schemas(live_server):
    """The routes that return a Response (FastAPI does not validate those) against their models."""
    url = live_server
    labels = {"name": "s", "labels": ["pos", "neg"], "budget": {"epsilon": 50.0, "delta": 1e-5},
              "exemplars": [{"input": f"text {i}", "output": ["pos", "neg"][i % 2]} for i in range(8)]}
    ds = _check(schemas.DatasetObject, httpx.post(f"{url}/v1/datasets", json=labels))["id"]
    q = {"dataset_id": ds, "query": "fine", "epsilon": 1.0, "partitions": 2, "shots_per_partition": 1}
    _check(schemas.ClassificationAnswer, httpx.post(f"{url}/v1/private/classify", json={**q, "seed": 1}, timeout=600))
    _check(schemas.ClassificationAnswer, httpx.post(f"{url}/v1/private/classify", json=q, timeout=600))
    again = _check(schemas.ClassificationAnswer, httpx.post(f"{url}/v1/private/classify", json=q, timeout=600))
    assert again["reused"] is True and again["reuse"]
    _check(schemas.ClassificationAnswer, httpx.post(f"{url}/v1/private/classify", json={**q, "seed": 2},
                                                    params={"include": "accounting"}, timeout=600))
    zero = {"dataset_id": ds, "query": "fine", "mechanism": "zero_shot"}
    assert _check(schemas.ClassificationAnswer,
                  httpx.post(f"{url}/v1/private/classify", json=zero, timeout=600))["budget"] is None
    chat = {"dataset_id": ds, "messages": [{"role": "user", "content": "fine"}], "epsilon": 1.0, "partitions": 2,
            "shots_per_partition": 1, "seed": 3}
    _check(schemas.ChatCompletion, httpx.post(f"{url}/v1/chat/completions", json=chat, timeout=600))
    ledger = _check(schemas.LedgerList, httpx.get(f"{url}/v1/datasets/{ds}/ledger"))
    assert ledger["data"] and ledger["data"][0]["accounting"]
    fc = _check(schemas.BudgetForecast, httpx.get(f"{url}/v1/datasets/{ds}/budget/forecast",
                                                 params={"epsilon": 1, "partitions": 2}))
    assert "answers" not in fc and "note" not in fc  # optional keys stay out, none is added as null
    fc = _check(schemas.BudgetForecast, httpx.get(f"{url}/v1/datasets/{ds}/budget/forecast",
                                                 params={"answers": 10, "partitions": 2}))
    assert fc["answers"] == 10 and "note" not in fc

    gen = {"name": "g", "task": "generation", "budget": {"epsilon": 50.0, "delta": 1e-5},
           "exemplars": [{"input": f"Ann meets Bo on day {i}.", "output": f"Ann and Bo meet ({i})."} for i in range(6)]}
    gds = _check(schemas.DatasetObject, httpx.post(f"{url}/v1/datasets", json=gen))["id"]
    g = {"dataset_id": gds, "query": "Cy meets Di.", "mechanism": "clip_softmax", "epsilon": 2.0, "max_tokens": 1,
         "params": {"prompts": 2}, "seed": 4, "return_internals": True}
    _check(schemas.GenerationAnswer, httpx.post(f"{url}/v1/private/generate", json=g, timeout=600))
    _check(schemas.Health, httpx.get(f"{url}/v1/health"))
