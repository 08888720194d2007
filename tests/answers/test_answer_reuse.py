"""Answer reuse over real HTTP (uvicorn; SQLite and PostgreSQL; SmolLM2): an identical private
request gets the stored released answer at zero cost, marked ``reused``; anything that differs is
charged; a dataset can opt out; a workload with 30% repeats spends 30% less."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.answers.test_gateway_api import EXEMPLARS, LABELS, T

# Laplace report-noisy-max is pure DP: each charge is exactly its epsilon in the ledger.
PURE = {"mechanism": "rnm", "epsilon": 0.5, "partitions": 2, "shots_per_partition": 2, "params": {"noise": "laplace"}}


def _dataset(url: str, epsilon: float = 20.0, **extra) -> str:
    body = {"name": "r", "labels": LABELS, "budget": {"epsilon": epsilon, "delta": 1e-5},
            "exemplars": [{"input": i, "output": o} for i, o in EXEMPLARS], **extra}
    r = httpx.post(f"{url}/v1/datasets", json=body, timeout=T)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _ask(url: str, ds: str, query: str, **over) -> httpx.Response:
    return httpx.post(f"{url}/v1/private/classify", json={"dataset_id": ds, "query": query, **PURE, **over}, timeout=T)


def _budget(url: str, ds: str) -> dict:
    return httpx.get(f"{url}/v1/datasets/{ds}/budget", timeout=T).json()


def _charged(url: str, ds: str) -> list[dict]:
    return [e for e in httpx.get(f"{url}/v1/datasets/{ds}/ledger", timeout=T).json()["data"] if e["status"] == "charged"]


def test_identical_request_is_reused_at_zero_cost(live_server):
    ds = _dataset(live_server)
    a = _ask(live_server, ds, "Will it rain tomorrow?", return_internals=True)
    assert a.status_code == 200, a.text
    assert a.json()["reused"] is False and "X-DPICL-Reused" not in a.headers
    spent = _budget(live_server, ds)["epsilon_spent"]
    assert spent == pytest.approx(0.5)
    # Whitespace differences normalise away; the default parameters spelled out are the same request.
    b = _ask(live_server, ds, "  Will it rain   tomorrow? ", params={"noise": "laplace", "calibration": "analytic"})
    assert b.status_code == 200, b.text
    body = b.json()
    assert body["reused"] is True and b.headers["X-DPICL-Reused"] == "true"
    assert body["label"] == a.json()["label"] and body["privacy"] == a.json()["privacy"]
    assert body["reuse"]["epsilon_charged"] == 0.0 and body["reuse"]["ledger_entry_id"] == _charged(live_server, ds)[0]["id"]
    assert "internals" not in body  # stored for audits, shown only when asked
    assert body["budget"]["epsilon_spent"] == spent and float(b.headers["X-DPICL-Epsilon-Spent"]) == pytest.approx(spent)
    assert _budget(live_server, ds)["charges"] == 1 and len(_charged(live_server, ds)) == 1
    # The OpenAI-compatible route shares the service: same request, reused, dp.reused.
    chat = httpx.post(f"{live_server}/v1/chat/completions", timeout=T, json={
        "model": "smollm2-135m-instruct", "messages": [{"role": "user", "content": "Will it rain tomorrow?"}],
        "dataset_id": ds, "mechanism": "rnm", "epsilon": 0.5, "partitions": 2, "shots_per_partition": 2,
        "dp_params": {"noise": "laplace"}})
    assert chat.status_code == 200, chat.text
    assert chat.json()["dp"]["reused"] is True and chat.json()["choices"][0]["message"]["content"] == body["label"]
    assert _budget(live_server, ds)["charges"] == 1


@pytest.mark.parametrize("change", [
    {"query": "Will it snow tomorrow?"},
    {"query": "will it rain tomorrow?"},  # case is kept: a different prompt
    {"epsilon": 0.6},
    {"partitions": 1},
    {"shots_per_partition": 1},
    {"params": {"noise": "gumbel"}},
    {"calibrate": True},
    {"reuse": False},  # the caller asks for a fresh answer and pays for it
    {"seed": 5},  # seeded noise (tests, audits) never reuses
])
def test_a_differing_request_is_charged(live_server, change):
    ds = _dataset(live_server)
    assert _ask(live_server, ds, "Will it rain tomorrow?").status_code == 200
    change = dict(change)  # the parameter is shared by both databases' runs
    query = change.pop("query", "Will it rain tomorrow?")
    r = _ask(live_server, ds, query, **change)
    assert r.status_code == 200, r.text
    assert r.json()["reused"] is False and _budget(live_server, ds)["charges"] == 2


def test_seeded_answers_are_never_a_reuse_source(live_server):
    ds = _dataset(live_server)
    assert _ask(live_server, ds, "Sunny?", seed=3).status_code == 200
    r = _ask(live_server, ds, "Sunny?")
    assert r.json()["reused"] is False and _budget(live_server, ds)["charges"] == 2


def test_opt_out_per_dataset_and_patch(live_server):
    ds = _dataset(live_server, answer_reuse=False)
    assert httpx.get(f"{live_server}/v1/datasets/{ds}", timeout=T).json()["answer_reuse"] is False
    for _ in range(2):
        r = _ask(live_server, ds, "Is the match on tonight?")
        assert r.status_code == 200 and r.json()["reused"] is False
    assert _budget(live_server, ds)["charges"] == 2
    p = httpx.patch(f"{live_server}/v1/datasets/{ds}", json={"answer_reuse": True}, timeout=T)
    assert p.status_code == 200 and p.json()["answer_reuse"] is True
    r = _ask(live_server, ds, "Is the match on tonight?")
    assert r.json()["reused"] is True and _budget(live_server, ds)["charges"] == 2
    httpx.patch(f"{live_server}/v1/datasets/{ds}", json={"answer_reuse": False}, timeout=T)
    assert _ask(live_server, ds, "Is the match on tonight?").json()["reused"] is False
    assert _budget(live_server, ds)["charges"] == 3
    bad = httpx.patch(f"{live_server}/v1/datasets/{ds}", json={"answer_reuse": "maybe"}, timeout=T)
    assert bad.status_code == 422 and bad.json()["error"]["param"] == "answer_reuse"
    extra = httpx.patch(f"{live_server}/v1/datasets/{ds}", json={"labels": ["x", "y"]}, timeout=T)
    assert extra.status_code == 422 and extra.json()["error"]["param"] == "labels"
    missing = httpx.patch(f"{live_server}/v1/datasets/ds_missing", json={"answer_reuse": True}, timeout=T)
    assert missing.status_code == 404


def test_reused_answers_outlast_a_spent_budget(live_server):
    ds = _dataset(live_server, epsilon=0.5)
    first = _ask(live_server, ds, "Bake the bread at what temperature?")
    assert first.status_code == 200
    assert _ask(live_server, ds, "A new question").status_code == 429
    again = _ask(live_server, ds, "Bake the bread at what temperature?")
    assert again.status_code == 200 and again.json()["reused"] is True
    assert again.json()["label"] == first.json()["label"]


def test_concurrent_twins_are_charged_once(live_server):
    ds = _dataset(live_server)

    async def go():
        async with httpx.AsyncClient(timeout=300) as c:
            return await asyncio.gather(*[c.post(f"{live_server}/v1/private/classify", json={
                "dataset_id": ds, "query": "Is the new phone any good?", **PURE}) for _ in range(5)])

    rs = asyncio.run(go())
    assert [r.status_code for r in rs] == [200] * 5
    assert len({r.json()["label"] for r in rs}) == 1  # one released answer, five times
    assert sum(not r.json()["reused"] for r in rs) == 1
    assert _budget(live_server, ds)["charges"] == 1


def test_a_workload_with_30_percent_repeats_spends_30_percent_less(live_server):
    distinct = [f"Weather question number {i}?" for i in range(7)]
    workload = distinct[:4] + [distinct[0]] + distinct[4:6] + [distinct[2], distinct[6], distinct[5]]
    assert len(workload) == 10 and len(set(workload)) == 7
    spend = {}
    for reuse in (True, False):
        ds = _dataset(live_server, answer_reuse=reuse)
        for q in workload:
            assert _ask(live_server, ds, q).status_code == 200
        live = _charged(live_server, ds)
        spend[reuse] = (len(live), sum(e["epsilon"] for e in live))
    assert spend[False] == (10, pytest.approx(5.0)) and spend[True] == (7, pytest.approx(3.5))
    assert spend[True][1] / spend[False][1] == pytest.approx(0.7)


def test_generation_reuse(live_server):
    body = {"name": "gen", "task": "generation", "budget": {"epsilon": 20.0, "delta": 1e-5},
            "template": {"instruction": "Summarize.", "input_prefix": "Text:", "output_prefix": "Summary:"},
            "exemplars": [{"input": f"Ann meets Bo on day {i}.", "output": f"Ann and Bo meet ({i})."}
                          for i in range(6)]}
    ds = httpx.post(f"{live_server}/v1/datasets", json=body, timeout=T).json()["id"]
    req = dict(dataset_id=ds, query="Cy meets Di on Friday.", mechanism="clip_softmax", epsilon=2.0, max_tokens=1,
               params={"prompts": 2})
    a = httpx.post(f"{live_server}/v1/private/generate", json=req, timeout=T)
    assert a.status_code == 200 and a.json()["reused"] is False, a.text
    b = httpx.post(f"{live_server}/v1/private/generate", json=req, timeout=T)
    assert b.status_code == 200 and b.json()["reused"] is True and b.json()["text"] == a.json()["text"]
    c = httpx.post(f"{live_server}/v1/private/generate", json={**req, "max_tokens": 2}, timeout=T)
    assert c.json()["reused"] is False
    assert _budget(live_server, ds)["charges"] == 2


def test_a_black_box_remote_audit_draws_fresh_noise_every_trial(live_server):
    """The remote canary-audit target registers its datasets with answer_reuse false: the same query
    asked three times is answered (and charged) three times, never a stored answer."""
    import numpy as np

    from app.audit.queries import AttackQuery
    from app.audit.targets import RemoteTarget

    attack = AttackQuery(strategy="input_output", query="Will it rain tomorrow?", labels=tuple(LABELS),
                         positive="weather", negative=None, instruction=None, canary=None)
    target = RemoteTarget(live_server, "rnm", {"epsilon": 0.5, "partitions": 2, "shots_per_partition": 2,
                                               "noise": "laplace"})
    try:
        rng = np.random.default_rng(0)
        outs = [target._ask(EXEMPLARS, attack, rng, False) for _ in range(3)]
    finally:
        target.close()
    ds = next(iter(target.datasets.values()))
    assert [o["reused"] for o in outs] == [False] * 3
    assert _budget(live_server, ds)["charges"] == 3
    assert httpx.get(f"{live_server}/v1/datasets/{ds}", timeout=T).json()["answer_reuse"] is False
