"""The gateway over real HTTP: budget under concurrency, crash between charge and release,
keys/tenants/scopes, and the official openai client. SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import time

import httpx
import pytest

# Model-backed answers on a loaded 2-core machine can take longer than httpx's 5 s default.
T = 180

from tests.conftest import LiveServer, free_port, make_database_url, model_cache_dir, server_settings, DB_KINDS

LABELS = ["sports", "weather", "food", "tech"]
EXEMPLARS = [
    ("The striker scored twice in the final minutes of the match.", "sports"),
    ("Heavy rain and strong winds are expected across the coast tonight.", "weather"),
    ("Simmer the tomatoes with garlic and basil for twenty minutes.", "food"),
    ("The new laptop ships with a faster chip and more memory.", "tech"),
    ("The goalkeeper saved a penalty in extra time.", "sports"),
    ("Sunny skies and mild temperatures all weekend.", "weather"),
    ("Knead the dough and let it rise for an hour.", "food"),
    ("The phone update fixes a battery drain bug.", "tech"),
]
# Laplace report-noisy-max is pure DP: answers compose by basic composition, exactly 1.0 each.
PURE = {"mechanism": "rnm", "epsilon": 1.0, "partitions": 2, "shots_per_partition": 2, "params": {"noise": "laplace"}}


def _dataset(url: str, headers=None, epsilon: float = 10.0) -> str:
    body = {"name": "g", "labels": LABELS, "budget": {"epsilon": epsilon, "delta": 1e-5},
            "exemplars": [{"input": i, "output": o} for i, o in EXEMPLARS]}
    r = httpx.post(f"{url}/v1/datasets", json=body, headers=headers)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def test_fifty_concurrent_answers_against_a_budget_of_ten(live_server):
    ds = _dataset(live_server, epsilon=10.0)

    async def go():
        async with httpx.AsyncClient(timeout=300) as c:
            return await asyncio.gather(*[
                c.post(f"{live_server}/v1/private/classify", json={"dataset_id": ds, "query": f"Is it raining? {i}", **PURE})
                for i in range(50)])

    rs = asyncio.run(go())
    codes = sorted(r.status_code for r in rs)
    assert codes.count(200) == 10 and codes.count(429) == 40, codes
    for r in rs:
        if r.status_code == 429:
            err = r.json()["error"]
            assert err["code"] == "budget_exhausted" and "remaining" in err["message"]
            assert "X-DPICL-Epsilon-Remaining" in r.headers
        else:
            assert r.json()["label"] in LABELS
            assert float(r.headers["X-DPICL-Epsilon-Spent"]) <= 10.0 + 1e-9
    budget = httpx.get(f"{live_server}/v1/datasets/{ds}/budget").json()
    # PLD composition (optimal composition of eps-DP answers, Kairouz et al. 2015) charges ten eps-1 answers
    # 9.99977 at delta 1e-5, a hair under basic composition's 10; an 11th would cost 10.9997.
    assert budget["charges"] == 10 and budget["epsilon_spent"] == pytest.approx(10.0, rel=1e-4)
    assert budget["epsilon_spent"] <= 10.0
    ledger = httpx.get(f"{live_server}/v1/datasets/{ds}/ledger").json()
    live = [e for e in ledger["data"] if e["status"] == "charged"]
    assert len(live) == 10 and sum(e["epsilon"] for e in live) <= 10.0 + 1e-9


def test_private_answer_headers_idempotency_and_internals(live_server):
    ds = _dataset(live_server, epsilon=5.0)
    req = {"dataset_id": ds, "query": "Snow is falling in the mountains.", **PURE, "return_internals": True}
    a = httpx.post(f"{live_server}/v1/private/classify", json=req, headers={"Idempotency-Key": "q-1"}, timeout=T)
    assert a.status_code == 200, a.text
    body = a.json()
    assert body["privacy"]["epsilon"] == pytest.approx(1.0) and body["budget"]["epsilon_remaining"] == pytest.approx(4.0, rel=1e-4)
    assert "noisy_votes" in str(body["internals"])
    b = httpx.post(f"{live_server}/v1/private/classify", json=req, headers={"Idempotency-Key": "q-1"}, timeout=T)
    assert b.status_code == 200 and b.headers.get("Idempotent-Replayed") == "true"
    assert b.json()["label"] == body["label"]
    assert httpx.get(f"{live_server}/v1/datasets/{ds}/budget").json()["charges"] == 1
    c = httpx.post(f"{live_server}/v1/private/classify", json={**req, "query": "other"},
                   headers={"Idempotency-Key": "q-1"}, timeout=T)
    assert c.status_code == 409 and c.json()["error"]["param"] == "Idempotency-Key"
    no_int = httpx.post(f"{live_server}/v1/private/classify", json={**req, "return_internals": False}, timeout=T)
    assert no_int.status_code == 200 and "internals" not in no_int.json()


@pytest.mark.parametrize(
    "patch, param",
    [
        ({"dataset_id": "ds_missing"}, "dataset_id"),
        ({"mechanism": "nope"}, "mechanism"),
        ({"epsilon": -1}, "epsilon"),
        ({"partitions": 5, "shots_per_partition": 2}, None),  # 10 > 8 exemplars
        ({"mechanism": "zero_shot"}, "epsilon"),  # epsilon on a non-private mechanism
        ({"mechanism": "icl", "epsilon": None}, "mechanism"),  # non-private baseline refused on private data
        ({"seed": 3, "model": "nope"}, "model"),
    ],
)
def test_impossible_requests_are_4xx(live_server, patch, param):
    ds = _dataset(live_server)
    req = {"dataset_id": ds, "query": "Rain?", **PURE}
    req.update(patch)
    req = {k: v for k, v in req.items() if v is not None}
    r = httpx.post(f"{live_server}/v1/private/classify", json=req, timeout=T)
    assert r.status_code in (404, 422), r.text
    if param:
        assert r.json()["error"]["param"] == param
    assert httpx.get(f"{live_server}/v1/datasets/{ds}/budget").json()["charges"] == 0


def test_openai_client_gets_a_private_answer(live_server):
    openai = pytest.importorskip("openai")
    ds = _dataset(live_server)
    client = openai.OpenAI(base_url=f"{live_server}/v1", api_key="unused-in-open-mode", timeout=T)
    resp = client.chat.completions.create(
        model="smollm2-135m-instruct",
        messages=[{"role": "user", "content": "Thunderstorms will hit the city this afternoon."}],
        extra_body={"dataset_id": ds, **{k: v for k, v in PURE.items() if k != "params"}, "dp_params": PURE["params"]},
    )
    assert resp.object == "chat.completion"
    assert resp.choices[0].message.content in LABELS
    dp = resp.model_extra["dp"]
    assert dp["privacy"]["epsilon"] == pytest.approx(1.0) and dp["budget"]["epsilon_spent"] == pytest.approx(1.0, rel=1e-4)
    models = client.models.list()
    assert "smollm2-135m-instruct" in [m.id for m in models.data]
    with pytest.raises(openai.UnprocessableEntityError):
        client.chat.completions.create(model="smollm2-135m-instruct", messages=[{"role": "user", "content": "x"}],
                                       extra_body={"dataset_id": ds, "epsilon": -2})


# ---------------------------------------------------------------------------
# Keys, tenants, scopes (a server of its own, auth required)
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module", params=DB_KINDS)
def keyed(request, tmp_path_factory, pg_databases, lm, embedder):
    from app.api.auth import create_key
    from app.api.main import create_app
    from app.runtime import Runtime

    url = make_database_url(request.param, tmp_path_factory, pg_databases)
    settings = server_settings(url, auth_mode="required")
    rt = Runtime.create(settings, models={lm.name: lm, embedder.name: embedder})
    keys = {}
    with rt.db.session() as s:
        for name, tenant, scopes in [("a_admin", "A", ["admin", "infer"]), ("a_infer", "A", ["infer"]),
                                     ("b_all", "B", ["admin", "infer", "internals", "audit"])]:
            keys[name], _ = create_key(s, tenant_id=tenant, name=name, scopes=scopes)
        s.commit()
    srv = LiveServer(create_app(settings, runtime=rt), free_port())
    srv.start()
    yield srv.url, {k: {"Authorization": f"Bearer {v}"} for k, v in keys.items()}, keys, rt
    srv.stop()
    rt.close()


def test_keys_required_and_checked(keyed):
    url, h, _, _ = keyed
    assert httpx.get(f"{url}/v1/datasets").status_code == 401
    assert httpx.get(f"{url}/v1/datasets", headers={"Authorization": "Bearer dpicl_abc_def"}).status_code == 401
    assert httpx.get(f"{url}/v1/datasets", headers=h["a_infer"]).status_code == 200
    health = httpx.get(f"{url}/v1/health").json()
    assert health["auth"]["mode"] == "keys" and health["auth"]["warning"] is None


def test_cross_tenant_isolation(keyed):
    url, h, _, _ = keyed
    ds = _dataset(url, headers=h["a_admin"])
    for method, path in [("GET", f"/v1/datasets/{ds}"), ("DELETE", f"/v1/datasets/{ds}"),
                         ("GET", f"/v1/datasets/{ds}/budget"), ("GET", f"/v1/datasets/{ds}/ledger"),
                         ("PUT", f"/v1/datasets/{ds}/budget")]:
        r = httpx.request(method, f"{url}{path}", headers=h["b_all"], json={"epsilon": 100} if method == "PUT" else None)
        assert r.status_code == 404, (method, path, r.status_code)
    r = httpx.post(f"{url}/v1/private/classify", headers=h["b_all"], json={"dataset_id": ds, "query": "x", **PURE},
                   timeout=T)
    assert r.status_code == 404
    assert ds not in [d["id"] for d in httpx.get(f"{url}/v1/datasets", headers=h["b_all"]).json()["data"]]
    assert httpx.get(f"{url}/v1/datasets/{ds}", headers=h["a_infer"]).status_code == 200


def test_scopes_enforced(keyed):
    url, h, _, _ = keyed
    body = {"name": "x", "labels": ["a", "b"], "exemplars": [{"input": "t", "output": "a"}]}
    r = httpx.post(f"{url}/v1/datasets", json=body, headers=h["a_infer"])
    assert r.status_code == 403 and r.json()["error"]["code"] == "insufficient_scope"
    ds = _dataset(url, headers=h["a_admin"])
    r = httpx.post(f"{url}/v1/private/classify", headers=h["a_infer"],
                   json={"dataset_id": ds, "query": "x", **PURE, "return_internals": True}, timeout=T)
    assert r.status_code == 403 and r.json()["error"]["param"] == "return_internals"


def test_revoked_key_and_keys_never_logged(keyed, caplog):
    from app.api.auth import create_key
    from app.store import keys_repo

    caplog.set_level(logging.DEBUG)
    url, h, keys, rt = keyed
    with rt.db.session() as s:
        key, row = create_key(s, tenant_id="A", name="temp", scopes=["infer"])
        s.commit()
    auth = {"Authorization": f"Bearer {key}"}
    assert httpx.get(f"{url}/v1/datasets", headers=auth).status_code == 200
    with rt.db.session() as s:
        assert keys_repo.revoke(s, row.id)
        s.commit()
    r = httpx.get(f"{url}/v1/datasets", headers=auth)
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    for k in [key, *keys.values()]:
        assert k not in caplog.text
    with rt.db.session() as s:
        stored = [k.secret_hash for k in keys_repo.list_keys(s)]
    assert key not in stored and all(len(x) == 64 for x in stored)


def test_crash_between_charge_and_release(tmp_path, fresh_database_url):
    """Kill the server right after the charge commits: the retry with the same key gets the
    answer, and the ledger holds exactly one charge."""
    env = dict(os.environ, DPICL_DATABASE_URL=fresh_database_url, DPICL_MODEL_CACHE_DIR=str(model_cache_dir()),
               DPICL_DEVICE="cpu", DPICL_AUTH_MODE="open")

    def start(extra):
        port = free_port()
        p = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--port", str(port)], cwd=tmp_path,
                             env={**env, **extra}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        deadline = time.time() + 180
        while time.time() < deadline:
            try:
                if httpx.get(f"{url}/v1/health", timeout=2).status_code == 200:
                    return p, url
            except httpx.TransportError:
                time.sleep(0.2)
        p.kill()
        raise AssertionError("server did not start")

    proc, url = start({"DPICL_TEST_CRASH_AFTER_CHARGE": "1"})
    try:
        ds = _dataset(url, epsilon=5.0)
        req = {"dataset_id": ds, "query": "Is it sunny?", **PURE}
        with pytest.raises(httpx.TransportError):
            httpx.post(f"{url}/v1/private/classify", json=req, headers={"Idempotency-Key": "crash-1"}, timeout=120)
        assert proc.wait(timeout=30) == 17
    finally:
        if proc.poll() is None:
            proc.kill()
    proc, url = start({})
    try:
        r = httpx.post(f"{url}/v1/private/classify", json=req, headers={"Idempotency-Key": "crash-1"}, timeout=120)
        assert r.status_code == 200 and r.headers.get("Idempotent-Replayed") == "true"
        assert r.json()["label"] in LABELS
        budget = httpx.get(f"{url}/v1/datasets/{ds}/budget").json()
        assert budget["charges"] == 1 and budget["epsilon_spent"] == pytest.approx(1.0, rel=1e-4)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
