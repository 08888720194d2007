"""The chat route's query has the same bound as the private answers' (20,000 characters), checked before
any model work, with a 422 naming the message.

``POST /v1/private/classify`` and ``/generate`` refuse a ``query`` over 20,000 characters at validation.
``/v1/chat/completions`` takes its query from the last user message, which had no bound: a 1 MB message
(inside the 1 MiB body limit) was tokenized whole (416,740 tokens) before the context check refused it,
5.3 s of a worker per request on the 2-core box, with ``param: null``. Real server (uvicorn, the bundled
models), SQLite and PostgreSQL.
"""

from __future__ import annotations

import time

import httpx
import pytest

from app.api.answer_http import QUERY_MAX_CHARS
from tests.answers.test_gateway_api import EXEMPLARS, LABELS


@pytest.fixture(scope="module")
def dataset(live_server):
    r = httpx.post(f"{live_server}/v1/datasets", json={
        "name": "chat-limit", "labels": LABELS, "exemplars": [{"input": i, "output": o} for i, o in EXEMPLARS]},
        timeout=60)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _chat(live_server, dataset, messages):
    return httpx.post(f"{live_server}/v1/chat/completions", timeout=120, json={
        "model": "smollm2-135m-instruct", "messages": messages, "dataset_id": dataset, "epsilon": 1.0,
        "partitions": 2, "shots_per_partition": 1})


@pytest.mark.parametrize("chars", [QUERY_MAX_CHARS + 1, 1_000_000])
@pytest.mark.parametrize("shape", ["string", "parts"])
def test_an_over_long_query_is_refused_before_model_work(live_server, dataset, chars, shape):
    text = ("lorem ipsum " * (chars // 12 + 1))[:chars]
    content = text if shape == "string" else [{"type": "text", "text": text[:chars // 2]},
                                             {"type": "text", "text": text[chars // 2:]}]
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "an earlier turn"},
                {"role": "assistant", "content": "ok"}, {"role": "user", "content": content}]
    t0 = time.monotonic()
    r = _chat(live_server, dataset, messages)
    took = time.monotonic() - t0
    assert r.status_code == 422, r.text[:300]
    err = r.json()["error"]
    assert err["param"] == "messages.3.content", err  # before: null (the model's context check)
    assert str(QUERY_MAX_CHARS) in err["message"], err
    assert took < 2.0, took  # before: 5.3 s for the 1 MB message (tokenized whole)


def test_the_bound_itself_is_answered(live_server, dataset):
    # the same query length classify accepts; earlier turns do not count (only the last user turn is the query)
    r = _chat(live_server, dataset, [{"role": "user", "content": "x" * (QUERY_MAX_CHARS + 5)},
                                     {"role": "user", "content": "Is it raining today?"}])
    assert r.status_code == 200, r.text[:300]
    r = httpx.post(f"{live_server}/v1/private/classify", timeout=60, json={
        "dataset_id": dataset, "query": "a" * (QUERY_MAX_CHARS + 1), "epsilon": 1.0})
    assert r.status_code == 422 and r.json()["error"]["param"] == "query", r.text  # the same bound there


def _spent(live_server, dataset):
    return httpx.get(f"{live_server}/v1/datasets/{dataset}/budget", timeout=30).json()["epsilon_spent"]


def test_a_query_past_the_model_context_names_the_query(live_server, dataset):
    """Within the character bound, a query can still exceed the model's context (one CJK character is
    about two tokens here): a 422 naming the query (``messages.N.content`` on the chat route), nothing
    charged. Before: ``param: null``."""
    query = "\u96e8" * 19_000  # 38,000 tokens > 8,192
    before = _spent(live_server, dataset)
    r = httpx.post(f"{live_server}/v1/private/classify", timeout=60, json={
        "dataset_id": dataset, "query": query, "epsilon": 1.0, "partitions": 2, "shots_per_partition": 1})
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert (err["param"], err["code"]) == ("query", "prompt_too_long"), err
    r = _chat(live_server, dataset, [{"role": "user", "content": "hello"}, {"role": "user", "content": query}])
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert (err["param"], err["code"]) == ("messages.1.content", "prompt_too_long"), err
    assert _spent(live_server, dataset) == before
