"""Several `dpicl serve` replicas on one database (docs/deploy.md): three app instances in this
process, each its own Runtime (engine, pool, dataset cache) and uvicorn server on its own port,
the one database of each kind. The ledger stays exact when they race one budget (the account's
row lock on PostgreSQL, the database write lock on SQLite), and a set deleted through one replica
is refused by the others although their exemplar caches hold it."""

from __future__ import annotations

import asyncio
import contextlib

import httpx
import pytest

from tests.answers.test_gateway_api import LABELS, PURE, T, _dataset
from tests.conftest import running_app, server_settings


@pytest.fixture()
def replicas(fresh_database_url, lm, embedder):
    """Base URLs of three replicas on one fresh database (the bundled models' objects are shared:
    what is under test is the database, not the model)."""
    settings = server_settings(fresh_database_url)
    with contextlib.ExitStack() as stack:
        clients = [stack.enter_context(running_app(settings, models={lm.name: lm, embedder.name: embedder}, timeout=T))
                   for _ in range(3)]
        yield [str(c.base_url).rstrip("/") for c in clients]


def test_three_replicas_racing_one_budget_charge_it_exactly(replicas):
    ds = _dataset(replicas[0], epsilon=6.0)  # Laplace RNM: exactly 1.0 per answer, so 6 answers fit

    async def go():
        async with httpx.AsyncClient(timeout=600) as c:  # 30 real-model answers on a loaded 2-core box
            return await asyncio.gather(*[
                c.post(f"{replicas[i % 3]}/v1/private/classify",
                       json={"dataset_id": ds, "query": f"Will it snow tomorrow? {i}", **PURE})
                for i in range(30)])

    rs = asyncio.run(go())
    codes = [r.status_code for r in rs]
    assert sorted(codes) == [200] * 6 + [429] * 24, codes
    for r in rs:
        if r.status_code == 200:
            assert r.json()["label"] in LABELS
            assert float(r.headers["X-DPICL-Epsilon-Spent"]) <= 6.0 + 1e-9
        else:
            assert r.json()["error"]["code"] == "budget_exhausted"
    for url in replicas:  # every replica reads the same ledger
        budget = httpx.get(f"{url}/v1/datasets/{ds}/budget").json()
        assert budget["charges"] == 6 and budget["epsilon_spent"] == pytest.approx(6.0)
    live = [e for e in httpx.get(f"{replicas[1]}/v1/datasets/{ds}/ledger").json()["data"] if e["status"] == "charged"]
    assert len(live) == 6 and sum(e["epsilon"] for e in live) == pytest.approx(6.0)


def test_a_set_deleted_through_one_replica_is_refused_by_all(replicas):
    ds = _dataset(replicas[0], epsilon=50.0)
    ask = {"dataset_id": ds, "query": "Is it sunny?", **PURE, "reuse": False}
    for url in replicas:  # every replica answers once: its exemplar cache now holds the set
        assert httpx.post(f"{url}/v1/private/classify", json=ask, timeout=T).status_code == 200
    assert httpx.delete(f"{replicas[1]}/v1/datasets/{ds}").status_code == 200
    for url in replicas:
        r = httpx.post(f"{url}/v1/private/classify", json=ask, timeout=T)
        assert r.status_code == 404, (url, r.text)
        assert r.json()["error"]["code"] == "dataset_not_found"
