"""The ``synthesize`` job and ``synthetic_icl`` over real HTTP (uvicorn, in-process runner, SQLite and
PostgreSQL, SmolLM2), and the job's charge-once / restart / cancel behaviour against the real ledger.

Kept tiny (2 labels x 1 shot x 3 tokens from 2 partitions): the arithmetic of the mechanism is
tested in tests/mechanisms/test_synthesize.py."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from tests.conftest import LiveServer, free_port, server_settings

MARK = "QZV-SYN-4417"  # planted in every private exemplar
CONFIG = {"epsilon": 4.0, "delta": 1e-5, "shots_per_label": 1, "max_tokens": 3, "partitions": 2, "seed": 5}


@pytest.fixture(scope="module")
def server(database_url, lm):
    from app.api.main import create_app
    from app.runtime import Runtime

    settings = server_settings(database_url, job_runner="inprocess", job_poll_seconds=0.1, auth_mode="open")
    rt = Runtime.create(settings, models={lm.name: lm})
    srv = LiveServer(create_app(settings, runtime=rt), free_port())
    srv.start()
    yield srv.url
    srv.stop()
    rt.close()


def _dataset(url: str, epsilon: float = 10.0) -> str:
    texts = {"lights": ["turn the lamp on", "switch off the kitchen light", "dim the bedroom lights"],
             "music": ["play some jazz", "skip this song", "turn the music up"]}
    body = {"name": "syn-parent", "task": "classification", "labels": ["lights", "music"],
            "budget": {"epsilon": epsilon, "delta": 1e-5},
            "exemplars": [{"input": f"{MARK} {t}", "output": lab} for lab, ts in texts.items() for t in ts]}
    r = httpx.post(f"{url}/v1/datasets", json=body, timeout=30)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _wait(url: str, job_id: str, timeout: float = 240) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        job = httpx.get(f"{url}/v1/audits/{job_id}", timeout=30).json()
        if job["status"] in ("succeeded", "failed", "cancelled"):
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} did not finish: {job}")


def test_synthesize_charges_once_and_serves_a_public_set(server):
    parent = _dataset(server)
    r = httpx.post(f"{server}/v1/audits", json={"kind": "synthesize", "config": {"dataset_id": parent, **CONFIG}},
                   timeout=30)
    assert r.status_code == 202, r.text
    job = _wait(server, r.json()["id"])
    assert job["status"] == "succeeded", job
    res = job["result"]
    assert res["parent_dataset_id"] == parent and res["charged"] is True
    # The degenerate-demonstration filter (issue 29): counts per reason, no text, adding up.
    assert set(res["examples_dropped"]) == {"empty", "too_short", "non_words", "truncated", "duplicate"}
    assert res["examples_kept"] + sum(res["examples_dropped"].values()) == res["examples_requested"] == 2
    assert sum(res["kept_per_label"].values()) == res["examples_kept"] == res["exemplar_count"]
    assert all(isinstance(v, int) for v in res["examples_dropped"].values())
    assert 0 < res["epsilon"] <= 4.0 and res["adjacency"] == "replace-one"
    assert MARK not in str({k: v for k, v in job.items() if k != "result"})

    # The parent paid once, before release, under the job's idempotency key.
    led = httpx.get(f"{server}/v1/datasets/{parent}/ledger").json()["data"]
    assert [(e["idempotency_key"], e["status"], e["mechanism"]) for e in led] == [
        (f"synthesize:{job['id']}", "charged", "dp_few_shot_generation")]
    assert led[0]["epsilon"] == pytest.approx(res["epsilon"])
    budget = httpx.get(f"{server}/v1/datasets/{parent}/budget").json()
    assert budget["charges"] == 1 and 0 < budget["epsilon_spent"] <= 4.0 + 1e-9

    # The new set: public, with provenance, readable in full; the parent stays write-only.
    ds = httpx.get(f"{server}/v1/datasets/{res['dataset_id']}").json()
    assert ds["visibility"] == "public" and ds["budget"] is None
    prov = ds["provenance"]
    assert prov["parent_dataset_id"] == parent and prov["mechanism"] == "dp_few_shot_generation"
    assert prov["epsilon"] == pytest.approx(res["epsilon"]) and prov["delta"] == 1e-5
    assert prov["adjacency"] == "replace-one" and prov["model"] and "caller seed" in prov["seed_policy"]
    assert prov["parameters"]["partitions"] == 2 and prov["parameters"]["compositions"] == 2 * 1 * 3
    assert prov["dropped"] == res["examples_dropped"] and prov["kept"] == res["examples_kept"]
    ex = httpx.get(f"{server}/v1/datasets/{res['dataset_id']}/exemplars")
    assert ex.status_code == 200 and ex.json()["total"] == ds["exemplar_count"] >= 1
    assert {e["output"] for e in ex.json()["data"]} <= {"lights", "music"}
    priv = httpx.get(f"{server}/v1/datasets/{parent}/exemplars")
    assert priv.status_code == 403 and priv.json()["error"]["param"] == "dataset_id"
    assert MARK not in priv.text
    assert httpx.get(f"{server}/v1/datasets/ds_nope/exemplars").status_code == 404

    # synthetic_icl answers from it at zero cost; the parent's budget does not move.
    for _ in range(2):
        a = httpx.post(f"{server}/v1/private/classify", json={
            "dataset_id": res["dataset_id"], "query": "lights off please", "mechanism": "synthetic_icl"}, timeout=60)
        assert a.status_code == 200, a.text
        body = a.json()
        assert body["label"] in ("lights", "music") and body["privacy"]["epsilon"] == 0.0
        assert body["budget"] is None and body["synthetic_source"]["parent_dataset_id"] == parent
    assert httpx.get(f"{server}/v1/datasets/{parent}/budget").json()["charges"] == 1
    # Refusals name the field.
    bad = httpx.post(f"{server}/v1/private/classify", json={
        "dataset_id": parent, "query": "x", "mechanism": "synthetic_icl"})
    assert bad.status_code == 422 and bad.json()["error"]["param"] == "dataset_id"
    bad = httpx.post(f"{server}/v1/private/classify", json={
        "dataset_id": res["dataset_id"], "query": "x", "mechanism": "rnm", "epsilon": 1.0})
    assert bad.status_code == 422 and bad.json()["error"]["param"] == "mechanism"

    # A second synthesis the budget cannot pay: 429 naming config.epsilon, nothing charged.
    r = httpx.post(f"{server}/v1/audits", json={"kind": "synthesize", "config": {
        "dataset_id": parent, **CONFIG, "epsilon": 9.9}}, timeout=30)
    assert r.status_code == 429 and r.json()["error"]["param"] == "config.epsilon", r.text
    assert httpx.get(f"{server}/v1/datasets/{parent}/budget").json()["charges"] == 1


@pytest.mark.parametrize("over, param", [
    ({"partitions": 4}, "config.partitions"),  # 4 x 1 > 3 exemplars per label
    ({"shots_per_label": 0}, "config.shots_per_label"),
    ({"epsilon": -1}, "config.epsilon"),
    ({"model": "no-such-model"}, "config.model"),
])
def test_bad_configs_are_refused_naming_the_field(server, over, param):
    parent = _dataset(server)
    r = httpx.post(f"{server}/v1/audits", json={"kind": "synthesize", "config": {
        "dataset_id": parent, **CONFIG, **over}}, timeout=30)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["param"] == param


def test_an_unknown_parent_dataset_is_a_404_naming_it(server):
    """A well-formed config that names no dataset of the caller's tenant: 404 (the OpenAPI document
    declares it), not a 422, which would say the body itself is invalid."""
    r = httpx.post(f"{server}/v1/audits", json={"kind": "synthesize", "config": {
        "dataset_id": "ds_missing", **CONFIG}}, timeout=30)
    assert r.status_code == 404, r.text
    assert r.json()["error"]["param"] == "config.dataset_id"
    assert r.json()["error"]["code"] == "dataset_not_found"


# ---------------------------------------------------------------------------------------------
# Charge once across restarts, concurrent attempts and cancellation (the kind on a real runtime)
# ---------------------------------------------------------------------------------------------


class _Ctx:
    """The part of JobContext the kind uses; ``stop_after`` raises ``exc`` at that many checkpoints."""

    def __init__(self, rt, job_id: str, stop_after: int | None = None, exc: type[BaseException] | None = None):
        self.runtime, self.settings, self.job_id = rt, rt.settings, job_id
        self._n, self._stop, self._exc = 0, stop_after, exc

    def checkpoint(self) -> None:
        self._n += 1
        if self._stop is not None and self._n >= self._stop:
            raise self._exc(self.job_id)

    def progress(self, fraction, message=None) -> None:
        self.checkpoint()


@pytest.fixture(scope="module")
def runtime(database_url, lm):
    from app.runtime import Runtime

    rt = Runtime.create(server_settings(database_url, job_runner="none", auth_mode="open"), models={lm.name: lm})
    yield rt
    rt.close()


def _direct_job(rt, parent: str) -> tuple[str, object, object]:
    from app.jobs import service

    sub = service.submit(rt, kind_name="synthesize", config={"dataset_id": parent, **CONFIG}, claimed_epsilon=None,
                         claimed_delta=None, webhook_url=None, idempotency_key=None)
    kind, model = service.validate_config(rt.settings, "synthesize", {"dataset_id": parent, **CONFIG})
    return sub.job_id, kind, model


def _ledger(rt, parent: str):
    from app.store import budget_repo

    with rt.db.session() as s:
        rows, _ = budget_repo.list_entries(s, parent, limit=100, offset=0)
        acc = budget_repo.get_account(s, parent, "default")
        return [(e.idempotency_key, e.status) for e in rows], acc.epsilon_spent


def _parent_direct(rt) -> str:
    from app.budget.ledger import Ledger
    from app.store import datasets_repo

    ex = [(f"{MARK} turn the lamp on {i}", "lights") for i in range(3)] + \
         [(f"{MARK} play some jazz {i}", "music") for i in range(3)]
    with rt.db.session() as s:
        ds = datasets_repo.create_dataset(s, tenant_id="default", name="p", task="classification",
                                          labels=["lights", "music"], template={"input_prefix": "Text:"}, exemplars=ex)
        Ledger().open_account(s, dataset_id=ds.id, tenant_id="default", epsilon=10.0, delta=1e-5,
                                   adjacency="replace-one")
        s.commit()
        return ds.id


def test_restart_after_charge_pays_once_and_releases_one_set(runtime):
    from app.jobs.errors import JobShutdown

    parent = _parent_direct(runtime)
    job_id, kind, model = _direct_job(runtime, parent)
    # Attempt 1: the worker stops mid-generation (after the charge): the charge stays.
    with pytest.raises(JobShutdown):
        kind.run(_Ctx(runtime, job_id, stop_after=4, exc=JobShutdown), model)
    entries, spent = _ledger(runtime, parent)
    assert entries == [(f"synthesize:{job_id}", "charged")] and spent > 0
    # Attempt 2 finds its charge (no second one) and releases the set.
    r2 = kind.run(_Ctx(runtime, job_id), model)
    assert r2["charged"] is False and _ledger(runtime, parent) == (entries, spent)
    # Attempt 3 (e.g. a crash after the release, before the job row was marked done) returns that set.
    r3 = kind.run(_Ctx(runtime, job_id), model)
    assert r3["resumed"] is True and r3["dataset_id"] == r2["dataset_id"]
    assert _ledger(runtime, parent) == (entries, spent)


def test_concurrent_attempts_of_one_job_charge_once(runtime):
    parent = _parent_direct(runtime)
    job_id, kind, model = _direct_job(runtime, parent)
    out: list = []
    errs: list = []

    def attempt():
        try:
            out.append(kind.run(_Ctx(runtime, job_id), model))
        except BaseException as exc:  # pragma: no cover - reported below
            errs.append(exc)

    ts = [threading.Thread(target=attempt) for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=300)
    assert not errs, errs
    assert len(out) == 2 and out[0]["dataset_id"] == out[1]["dataset_id"]
    entries, _ = _ledger(runtime, parent)
    assert entries == [(f"synthesize:{job_id}", "charged")]


def test_cancel_before_release_refunds(runtime):
    from app.jobs.errors import JobCancelled

    parent = _parent_direct(runtime)
    job_id, kind, model = _direct_job(runtime, parent)
    with pytest.raises(JobCancelled):
        kind.run(_Ctx(runtime, job_id, stop_after=4, exc=JobCancelled), model)
    entries, spent = _ledger(runtime, parent)
    assert entries == [(f"synthesize:{job_id}", "refunded")] and spent == 0.0


def test_canary_mia_targets_the_synthesizer(server, database_url):
    """canary_mia task synthesize on SmolLM2 (tiny: 4 trials of 2 labels x 1 shot x 3 tokens): the job
    runs, reports the rigorous bound against the synthesizer's own epsilon, and is honest that
    4 trials have no power (inconclusive unless it sees a violation)."""
    if not database_url.startswith("sqlite"):
        pytest.skip("the model work runs once, on SQLite (the job's SQL is the canary_mia job's)")
    ex = [{"input": t, "output": "lights"} for t in ("turn the lamp on", "dim the lights", "lights off")] + \
         [{"input": t, "output": "music"} for t in ("play jazz", "skip this song", "volume up")]
    config = {"task": "synthesize", "dataset": {"exemplars": ex, "labels": ["lights", "music"], "size": 6},
              "target": {"params": {"epsilon": 4.0, "delta": 1e-5, "shots_per_label": 1, "max_tokens": 3,
                                    "partitions": 2}},
              "canary": {"type": "hex", "label": "lights"}, "trials": 4, "seed": 3}
    r = httpx.post(f"{server}/v1/audits", json={"kind": "canary_mia", "config": config}, timeout=30)
    assert r.status_code == 202, r.text
    job = _wait(server, r.json()["id"])
    assert job["status"] == "succeeded", (job["error"], job["result"])
    res = job["result"]
    assert res["target"] == "synthesize" and res["trials_total"] == 4
    assert 0 < res["epsilon_claimed"] <= 4.0 and res["epsilon"] >= 0.0
    assert job["verdict"] in ("inconclusive", "violation")
    bad = httpx.post(f"{server}/v1/audits", json={"kind": "canary_mia", "config": {
        **config, "target": {"params": {"partitions": 9}}}}, timeout=30)
    assert bad.status_code == 422 and bad.json()["error"]["param"] == "config.target.params.partitions", bad.text


def test_only_a_key_that_may_spend_budget_submits_synthesize(tmp_path, lm):
    """synthesize charges the parent's budget: an `audit`-only key gets 403 naming `kind` and no job,
    no charge; an `infer` key of the same tenant is accepted."""
    from app.api.auth import create_key
    from app.api.main import create_app
    from app.runtime import Runtime

    settings = server_settings(f"sqlite:///{tmp_path / 'k.db'}", auth_mode="required", job_runner="none")
    rt = Runtime.create(settings, models={lm.name: lm})
    with rt.db.session() as s:
        keys = {n: create_key(s, tenant_id="A", name=n, scopes=sc)[0]
                for n, sc in [("admin", ["admin"]), ("audit", ["audit"]), ("infer", ["infer", "audit"])]}
        s.commit()
    srv = LiveServer(create_app(settings, runtime=rt), free_port())
    srv.start()
    try:
        def h(n):
            return {"Authorization": f"Bearer {keys[n]}"}
        texts = {"lights": ["turn the lamp on", "dim the lights"], "music": ["play some jazz", "skip this song"]}
        r = httpx.post(f"{srv.url}/v1/datasets", headers=h("admin"), timeout=30, json={
            "name": "p", "labels": ["lights", "music"], "budget": {"epsilon": 10.0, "delta": 1e-5},
            "exemplars": [{"input": t, "output": lab} for lab, ts in texts.items() for t in ts]})
        assert r.status_code == 201, r.text
        job = {"kind": "synthesize", "config": {"dataset_id": r.json()["id"], "epsilon": 4.0, "delta": 1e-5,
                                                "shots_per_label": 1, "max_tokens": 4}}
        denied = httpx.post(f"{srv.url}/v1/audits", headers=h("audit"), json=job, timeout=30)
        assert denied.status_code == 403, denied.text
        assert denied.json()["error"]["param"] == "kind"
        assert httpx.get(f"{srv.url}/v1/audits", headers=h("audit")).json()["data"] == []
        ok = httpx.post(f"{srv.url}/v1/audits", headers=h("infer"), json=job, timeout=30)
        assert ok.status_code == 202, ok.text
    finally:
        srv.stop()
        rt.close()
