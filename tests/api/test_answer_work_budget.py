"""The tokens one private answer may run through the model are bounded (``DPICL_MAX_ANSWER_TOKENS``): the
caller picks the query, the partitions and the shots, so without a bound one request could hold the model
for minutes (a red-team run: a 20,000-character query, 8 partitions, 72 s of a 2-core box; esa 180 s).
Over the bound: a 422 ``request_too_large`` naming the query, before the call that would pass it, nothing
charged, no exemplar text in the error. Real server (uvicorn, the bundled SmolLM2), SQLite and PostgreSQL."""

from __future__ import annotations

import httpx
import pytest

from tests.answers.test_gateway_api import PURE, T, _dataset
from tests.answers.test_generate_api import MARK, _dataset as _gen_dataset
from tests.conftest import running_app, server_settings

LIMIT = 1500  # an rnm 2 x 2 answer of these exemplars is ~300 tokens


@pytest.fixture(scope="module")
def server(database_url, lm, embedder):
    with running_app(server_settings(database_url, job_runner="none", max_answer_tokens=LIMIT),
                     models={lm.name: lm, embedder.name: embedder}, timeout=T) as c:
        yield str(c.base_url).rstrip("/")


def _spent(url: str, ds: str) -> tuple[float, int]:
    b = httpx.get(f"{url}/v1/datasets/{ds}/budget", timeout=30).json()
    return b["epsilon_spent"], b["charges"]


def test_a_classify_answer_over_the_token_budget_is_refused_uncharged(server):
    ds = _dataset(server)
    long_query = "Will the weather be fine for the match this weekend? " * 100  # ~1200 tokens, x 2 partitions
    r = httpx.post(f"{server}/v1/private/classify", timeout=T, json={"dataset_id": ds, "query": long_query, **PURE})
    assert r.status_code == 422, r.text[:300]
    err = r.json()["error"]
    assert (err["param"], err["code"]) == ("query", "request_too_large"), err
    assert str(LIMIT) in err["message"] and "DPICL_MAX_ANSWER_TOKENS" in err["message"]
    assert "match ended" not in r.text and "striker" not in r.text  # no exemplar text (tests.answers EXEMPLARS)
    assert _spent(server, ds) == (0.0, 0)
    # the same request with a short query is answered and charged
    r = httpx.post(f"{server}/v1/private/classify", timeout=T,
                   json={"dataset_id": ds, "query": "Will it rain tomorrow?", **PURE})
    assert r.status_code == 200, r.text[:300]
    assert _spent(server, ds)[1] == 1
    # a query of ~500 tokens fits in 2 prompts, not in 4: the query times the prompts is what counts
    mid = "Will it rain tomorrow? " * 80
    r = httpx.post(f"{server}/v1/private/classify", timeout=T, json={
        "dataset_id": ds, "query": mid, **{**PURE, "partitions": 4, "shots_per_partition": 1}})
    assert r.status_code == 422 and r.json()["error"]["code"] == "request_too_large", r.text[:300]
    assert _spent(server, ds)[1] == 1
    r = httpx.post(f"{server}/v1/private/classify", timeout=T, json={
        "dataset_id": ds, "query": mid, **{**PURE, "partitions": 2, "shots_per_partition": 1}})
    assert r.status_code == 200, r.text[:300]


def test_a_generation_over_the_token_budget_is_refused_uncharged(server):
    ds = _gen_dataset(server)
    r = httpx.post(f"{server}/v1/private/generate", timeout=T, json={
        "dataset_id": ds, "query": "Cy meets Di on Friday to plan the trip. " * 80, "mechanism": "clip_softmax",
        "epsilon": 2.0, "max_tokens": 1, "params": {"prompts": 2}, "seed": 7})
    assert r.status_code == 422, r.text[:300]
    assert MARK not in r.text
    err = r.json()["error"]
    assert (err["param"], err["code"]) == ("query", "request_too_large"), err
    assert _spent(server, ds) == (0.0, 0)


def test_the_default_bound_refuses_the_red_team_query_at_once(live_server):
    """The default (twice the model's max_batch_tokens: 16384 on a CPU) refuses the red team's 20,000-character
    query through 4 partitions (~4.4k tokens x 4) before any model work, where it held the model ~40-70 s."""
    import time

    from app.api.answer_http import QUERY_MAX_CHARS

    ds = _dataset(live_server)
    query = ("Is the striker fit for the final on Sunday? " * 500)[:QUERY_MAX_CHARS]
    t0 = time.monotonic()
    r = httpx.post(f"{live_server}/v1/private/classify", timeout=T, json={
        "dataset_id": ds, "query": query, **{**PURE, "partitions": 4, "shots_per_partition": 1}})
    assert r.status_code == 422 and r.json()["error"]["code"] == "request_too_large", r.text[:300]
    assert "16384" in r.json()["error"]["message"]
    assert time.monotonic() - t0 < 10  # tokenizing only
    assert _spent(live_server, ds) == (0.0, 0)


def test_the_budget_follows_the_setting_else_the_model():
    from types import SimpleNamespace

    from app.answers.flow import answer_token_budget

    assert answer_token_budget(None, SimpleNamespace(max_batch_tokens=8192)) == 16384
    assert answer_token_budget(500, SimpleNamespace(max_batch_tokens=8192)) == 500
    assert answer_token_budget(0, SimpleNamespace(max_batch_tokens=8192)) == 0  # 0: no bound (work_scope)
    assert answer_token_budget(None, object()) is None  # a model that declares no batch size


@pytest.fixture(scope="module")
def remote_server(database_url, embedder):
    """A real server whose language model is remote: the fake vLLM of tests/llm/remote (no vLLM here; the real
    one runs in scripts/vllm_ci.sh); DPICL_MAX_ANSWER_TOKENS 2000 (the default for a remote model, twice its declared
    max_batch_tokens, is tests/llm/remote/test_work_budget_remote.py's)."""
    from tests.llm.remote.fake_server import FakeVLLM
    from tests.llm.remote.test_client import remote

    with FakeVLLM() as fake:
        toy = remote(fake.url, max_context=100_000)
        try:
            with running_app(server_settings(database_url, job_runner="none", max_answer_tokens=2000),
                             models={toy.name: toy, embedder.name: embedder}, timeout=T) as c:
                yield str(c.base_url).rstrip("/"), fake
        finally:
            toy.close()


def test_a_remote_models_answer_is_bounded_too(remote_server):
    url, fake = remote_server
    ds = _dataset(url)
    fake.requests.clear()
    r = httpx.post(f"{url}/v1/private/classify", timeout=T, json={
        "dataset_id": ds, "model": "toy-remote", "query": "Will the weather be fine for the match this weekend? " * 40,
        **PURE})
    assert r.status_code == 422, r.text[:300]  # before: answered, ~2 x 2,300 tokens sent to the model server
    err = r.json()["error"]
    assert (err["param"], err["code"]) == ("query", "request_too_large") and "2000" in err["message"], err
    assert "striker" not in r.text
    assert fake.bodies("/v1/completions") == []  # tokenized only: nothing scored
    assert _spent(url, ds) == (0.0, 0)
    r = httpx.post(f"{url}/v1/private/classify", timeout=T, json={"dataset_id": ds, "model": "toy-remote",
                                                                "query": "Rain?", **PURE})
    assert r.status_code == 200, r.text[:300]
    assert fake.bodies("/v1/completions") and _spent(url, ds)[1] == 1


def _adjacent_datasets(url: str) -> tuple[str, str]:
    """Two sets that differ in one record (replace-one neighbours): the first exemplar's input is longer in the
    second; both the same size and labels."""
    from tests.answers.test_gateway_api import EXEMPLARS, LABELS

    longer = [(EXEMPLARS[0][0] + " The stadium stayed loud long after the whistle, and the fans sang all night.",
               EXEMPLARS[0][1])] + EXEMPLARS[1:]
    ids = []
    for rows in (EXEMPLARS, longer):
        r = httpx.post(f"{url}/v1/datasets", json={
            "name": "adjacent", "labels": LABELS, "budget": {"epsilon": 10.0, "delta": 1e-5},
            "exemplars": [{"input": i, "output": o} for i, o in rows]})
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    return ids[0], ids[1]


def _refusals(url: str, datasets: tuple[str, str], query: str) -> list[dict]:
    # 1 partition x 8 shots: every prompt holds every exemplar, so the partition's draw does not matter
    out = []
    for ds in datasets:
        r = httpx.post(f"{url}/v1/private/classify", timeout=T, json={
            "dataset_id": ds, "query": query, **{**PURE, "partitions": 1, "shots_per_partition": 8}})
        assert r.status_code == 422, r.text[:300]
        out.append(r.json()["error"])
        assert _spent(url, ds) == (0.0, 0)
    return out


def test_a_refusal_over_the_token_budget_says_nothing_that_depends_on_the_exemplars(server):
    """Before, the message carried the tokens asked for ("0 so far, 1604 more for 1 prompt row"): with a query of
    known length, the exact token count of the exemplars in the prompt, released uncharged (and over 1 x all shots,
    that of the whole set: it tells neighbouring sets apart). Now neighbouring sets get the same bytes."""
    a, b = _refusals(server, _adjacent_datasets(server), "Will the weather be fine for the match this weekend? " * 130)
    assert a["code"] == "request_too_large" and a == b, (a, b)


def test_a_prompt_over_the_context_says_nothing_that_depends_on_the_exemplars(live_server):
    """Likewise the context check: before, "prompt 0 has 10173 tokens (+1), more than the max context 8192"."""
    a, b = _refusals(live_server, _adjacent_datasets(live_server), "雨" * 5000)  # ~10,000 tokens, under 16384
    assert a["code"] == "prompt_too_long" and a == b, (a, b)


@pytest.mark.parametrize("status", [400, 500])  # 500: retried, then given up
def test_a_model_servers_error_that_quotes_the_prompt_is_not_passed_on(remote_server, caplog, status):
    """The remote backend's errors quoted the server's answer in the API error: an OpenAI-style server's
    validation error echoes its input, i.e. a prompt with the exemplars in it. Now the status only."""
    url, fake = remote_server
    ds = _dataset(url)
    fake.fail("/v1/completions", *[("echo", status)] * 64)  # every attempt of every request
    try:
        with caplog.at_level("DEBUG"):
            r = httpx.post(f"{url}/v1/private/classify", timeout=T, json={
                "dataset_id": ds, "model": "toy-remote", "query": "Rain?", **PURE})
    finally:
        fake.faults["/v1/completions"].clear()
    assert r.status_code == 502, r.text[:300]
    assert r.json()["error"]["code"] == "upstream_error" and f"HTTP {status}" in r.text, r.text[:300]
    assert fake.bodies("/v1/completions"), "the fault was not reached"
    for text in (r.text, caplog.text):  # tests.answers EXEMPLARS
        assert "striker" not in text and "goalkeeper" not in text and "laptop" not in text
    assert _spent(url, ds) == (0.0, 0)
