"""Who may call what, on a live keyed server (SQLite and PostgreSQL; issue 26).

The walk calls every route of the OpenAPI document, plus /metrics, the API docs and /ui, with no key,
with another tenant's key, and with a key of each scope, and checks each answer against the table of
app/api/access.py (which docs/security.md prints). Then: auto mode stays keyed once the last key is
revoked (in this process, and in a fresh replica of the same database).
"""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import DB_KINDS, LiveServer, free_port, make_database_url, server_settings

# auto mode after a key was made (the mode of item 3 of the issue) on both databases; required once.
MODES = [(db, "auto") for db in DB_KINDS] + [("sqlite", "required")]
# Valid bodies where the route checks the body before it looks the id up (else {}: a 422 once allowed).
# /v1/audits/plan: an unknown field, a quick 422 (its defaults plan a whole audit: seconds of CPU).
BODIES = {("PUT", "/v1/datasets/{dataset_id}/budget"): {"epsilon": 9.0}, ("POST", "/v1/audits/plan"): {"x": 1}}


def _denied(r: httpx.Response) -> bool:
    """Refused by authentication or scope (not by the route's own 403s, e.g. write-only exemplars)."""
    return r.status_code == 401 or (r.status_code == 403 and r.json()["error"]["code"] == "insufficient_scope")


def _settings(url: str, mode: str):
    return server_settings(url, auth_mode=mode, load_models=False, job_test_kinds=True, job_runner="none")


@pytest.fixture(scope="module", params=MODES, ids=[f"{d}-{m}" for d, m in MODES])
def keyed(request, tmp_path_factory, pg_databases):
    from app.api.main import create_app
    from app.api.principal import ALL_SCOPES, create_key
    from app.runtime import Runtime
    from app.store import migrate

    db_kind, mode = request.param
    url = make_database_url(db_kind, tmp_path_factory, pg_databases)
    migrate.upgrade(url)
    settings = _settings(url, mode)
    rt = Runtime.create(settings)
    keys: dict[str, str] = {}
    with rt.db.session() as s:
        for scope in ALL_SCOPES:
            keys[scope], _ = create_key(s, tenant_id="tenant-a", name=scope, scopes=[scope])
        keys["other"], _ = create_key(s, tenant_id="tenant-b", name="b", scopes=list(ALL_SCOPES))
        s.commit()
    srv = LiveServer(create_app(settings, runtime=rt), free_port())
    srv.start()
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        h = {"Authorization": f"Bearer {keys['admin']}"}
        r = c.post("/v1/datasets", headers=h, json={
            "name": "walk", "labels": ["a", "b"], "budget": {"epsilon": 8.0, "delta": 1e-5},
            "exemplars": [{"input": "one", "output": "a"}, {"input": "two", "output": "b"}]})
        assert r.status_code == 201, r.text
        ids = {"dataset_id": r.json()["id"]}
        r = c.post("/v1/audits", headers=h, json={"kind": "sleep", "config": {"steps": 1}})
        assert r.status_code == 202, r.text
        ids["job_id"] = r.json()["id"]
    ids.update(name="result.json", model_id="no-such-model")
    srv.runtime, srv.keys, srv.ids, srv.app = rt, keys, ids, srv.server.config.app
    yield srv
    srv.stop()
    rt.close()


def _routes(app) -> set[tuple[str, str]]:
    """Every (method, path) the server serves outside /ui: the OpenAPI document's, and every registered
    route beside it (/metrics, the API docs, any route hidden from the schema)."""
    import re

    from app.api.errors import _flat_routes

    out = {(m.upper(), p) for p, ops in app.openapi()["paths"].items() for m in ops}
    for r in _flat_routes(app.router.routes):
        path = re.sub(r":\w+}", "}", r.path)  # {model_id:path} is {model_id} in the OpenAPI document
        if path != "/ui" and not path.startswith("/ui/"):
            out |= {(m, path) for m in r.methods if m != "HEAD"}
    return out


def test_the_table_names_every_route(keyed):
    from app.api.access import PUBLIC, ROUTES, UI

    table = {(a.method, a.path) for a in ROUTES if a.who != UI}
    assert table == _routes(keyed.app)

    def table_who(key):
        return next(a.who for a in ROUTES if (a.method, a.path) == key)
    # The OpenAPI document declares 401 exactly where the table wants a key.
    doc = keyed.app.openapi()["paths"]
    undeclared = [(a.method, a.path) for a in ROUTES if a.path in doc
                  and ("401" in doc[a.path][a.method.lower()]["responses"]) != (a.who != PUBLIC)]
    assert not undeclared
    # ... and bearer security on exactly those routes (required: the server is keyed), none on the public ones.
    security = {(a.method, a.path): doc[a.path][a.method.lower()]["security"] for a in ROUTES if a.path in doc}
    wrong = [k for k, v in security.items() if v != ([] if table_who(k) == PUBLIC else [{"bearerAuth": []}])]
    assert not wrong, wrong
    assert keyed.app.openapi()["components"]["securitySchemes"]["bearerAuth"] == {
        **keyed.app.openapi()["components"]["securitySchemes"]["bearerAuth"], "type": "http", "scheme": "bearer"}


def _call(c: httpx.Client, method: str, path: str, ids: dict, key: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {"json": BODIES.get((method, path), {})} if method in ("POST", "PUT", "PATCH") else {}
    return c.request(method, path.format(**ids), headers=headers, **body)


def test_every_route_answers_as_the_table_says(keyed):
    from app.api.access import PUBLIC, ROUTES, UI
    from app.api.principal import ALL_SCOPES

    wrong = []
    # DELETE last: it removes the dataset the other rows use.
    rows = sorted((a for a in ROUTES if a.who != UI), key=lambda a: a.method == "DELETE")
    with httpx.Client(base_url=keyed.url, timeout=30) as c:
        for a in rows:
            what = f"{a.method} {a.path}"
            r = _call(c, a.method, a.path, keyed.ids, None)
            if a.who == PUBLIC:
                if _denied(r):
                    wrong.append(f"{what}, no key: {r.status_code} (public)")
            elif r.status_code != 401 or r.json()["error"]["code"] != "missing_api_key":
                wrong.append(f"{what}, no key: {r.status_code} {r.text[:120]}")
            r = _call(c, a.method, a.path, keyed.ids, keyed.keys["other"])
            if (a.owned and r.status_code != 404) or (not a.owned and _denied(r)):
                wrong.append(f"{what}, another tenant's key: {r.status_code} {r.text[:120]}")
            for scope in ALL_SCOPES:
                r = _call(c, a.method, a.path, keyed.ids, keyed.keys[scope])
                allowed = a.who == PUBLIC or scope in a.who
                if allowed and _denied(r):
                    wrong.append(f"{what}, {scope} key: {r.status_code} (allowed) {r.text[:120]}")
                if not allowed and not (r.status_code == 403 and _denied(r)):
                    wrong.append(f"{what}, {scope} key: {r.status_code} (should be 403) {r.text[:120]}")
    assert not wrong, "\n".join(wrong)


def test_unknown_paths_need_a_key_too(keyed):
    with httpx.Client(base_url=keyed.url, timeout=30) as c:
        assert c.get("/v1/no-such-route").status_code == 401
        assert c.post("/v1/datasets/x/no-such", json={}).status_code == 401
        assert c.get("/v1/no-such-route", headers={"Authorization": f"Bearer {keyed.keys['infer']}"}).status_code == 404


def test_ui_pages_use_their_own_login(keyed):
    """/ui: no session -> the login page (a Bearer key is not a session); a session sees its own
    tenant's job, another tenant's session gets 404 for it."""
    from tests.ui.conftest import UIClient

    job = keyed.ids["job_id"]
    for headers in ({}, {"Authorization": f"Bearer {keyed.keys['admin']}"}):
        c = UIClient(keyed.url)
        r = c.get(f"/ui/audits/{job}", headers=headers)
        assert r.status_code == 303 and r.headers["location"].startswith("/ui/login"), r.status_code
        c.close()
    for key, status in (("audit", 200), ("other", 404)):
        c = UIClient(keyed.url)
        c.login(keyed.keys[key])
        assert c.get(f"/ui/audits/{job}").status_code == status
        c.close()


def test_privacy_routes_need_a_key(keyed):
    body = {"rho": 0.5, "delta": 1e-5}
    with httpx.Client(base_url=keyed.url, timeout=30) as c:
        for route in ("/v1/privacy/calibrate", "/v1/privacy/convert", "/v1/privacy/empirical"):
            r = c.post(route, json=body)
            assert r.status_code == 401, (route, r.status_code)
            assert r.headers["www-authenticate"] == "Bearer"
        r = c.post("/v1/privacy/convert", json=body, headers={"Authorization": f"Bearer {keyed.keys['infer']}"})
        assert not _denied(r), r.text


def test_metrics_needs_the_metrics_scope(keyed):
    with httpx.Client(base_url=keyed.url, timeout=30) as c:
        assert c.get("/metrics").status_code == 401
        r = c.get("/metrics", headers={"Authorization": f"Bearer {keyed.keys['infer']}"})
        assert r.status_code == 403 and "metrics" in r.json()["error"]["message"]
        r = c.get("/metrics", headers={"Authorization": f"Bearer {keyed.keys['metrics']}"})
        assert r.status_code == 200 and "dpicl_request_seconds" in r.text
        # A scrape key opens nothing else.
        r = c.get("/v1/datasets", headers={"Authorization": f"Bearer {keyed.keys['metrics']}"})
        assert r.status_code == 403


# ---------------------------------------------------------------------------------------------------
# Revoking the last key keeps auto mode keyed
# ---------------------------------------------------------------------------------------------------


@pytest.fixture(params=DB_KINDS)
def auto_db(request, tmp_path_factory, pg_databases) -> str:
    from app.store import migrate

    url = make_database_url(request.param, tmp_path_factory, pg_databases)
    migrate.upgrade(url)
    return url


def _health_mode(c: httpx.Client) -> str:
    return c.get("/v1/health").json()["auth"]["mode"]


def _forget_mode(rt) -> None:
    """As if the cache's recheck interval had passed (or another replica asked the database)."""
    rt.extras.pop("_auth_cache", None)


def test_revoking_the_last_key_keeps_auto_mode_keyed(auto_db):
    from app.api.auth import create_key
    from app.api.main import create_app
    from app.runtime import Runtime
    from app.store import keys_repo

    settings = _settings(auto_db, "auto")
    rt = Runtime.create(settings)
    srv = LiveServer(create_app(settings, runtime=rt), free_port())
    srv.start()
    ds = {"name": "d", "labels": ["a", "b"], "exemplars": [{"input": "x", "output": "a"}]}
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            assert _health_mode(c) == "open"
            assert c.post("/v1/datasets", json=ds).status_code == 201  # open before any key
            with rt.db.session() as s:
                key, row = create_key(s, tenant_id="acme", name="only", scopes=["infer"])  # any key, not only admin
                s.commit()
            _forget_mode(rt)
            assert _health_mode(c) == "keys"
            assert c.post("/v1/datasets", json=ds).status_code == 401
            with rt.db.session() as s:
                assert keys_repo.revoke(s, row.id)
                s.commit()
            _forget_mode(rt)
            assert _health_mode(c) == "keys"
            r = c.post("/v1/datasets", json=ds)
            assert r.status_code == 401, r.text
            assert c.get("/v1/datasets").status_code == 401
            assert c.post("/v1/datasets", json=ds, headers={"Authorization": f"Bearer {key}"}).status_code == 401
    finally:
        srv.stop()
        rt.close()
    # A new replica on the same database: keyed from its first request, no key active.
    rt2 = Runtime.create(settings)
    srv2 = LiveServer(create_app(settings, runtime=rt2), free_port())
    srv2.start()
    try:
        with httpx.Client(base_url=srv2.url, timeout=30) as c:
            assert _health_mode(c) == "keys"
            assert c.post("/v1/datasets", json=ds).status_code == 401
    finally:
        srv2.stop()
        rt2.close()
    # Only the operator's explicit DPICL_AUTH_MODE=open opens it again.
    rt3 = Runtime.create(_settings(auto_db, "open"))
    try:
        from app.api.principal import auth_mode

        assert auth_mode(rt3) == "open"
    finally:
        rt3.close()


def test_migration_marks_a_database_that_had_keys_as_keyed(fresh_database_url):
    """A database migrated from before the marker, whose only key is revoked, is keyed after upgrade."""
    from sqlalchemy import text

    from app.store import Database, migrate

    migrate.upgrade(fresh_database_url, "0012")
    db = Database(fresh_database_url)
    try:
        with db.session() as s:
            s.execute(text("INSERT INTO api_keys (id, tenant_id, name, prefix, secret_hash, scopes, created_at, "
                           "revoked_at) VALUES ('key_1', 't', 'n', 'p', 'h', '[\"admin\"]', :t, :t)"),
                      {"t": "2026-11-01 00:00:00+00:00"})
            s.commit()
        migrate.upgrade(fresh_database_url)
        with db.session() as s:
            assert s.execute(text("SELECT name FROM auth_state")).scalars().all() == ["keyed"]
    finally:
        db.dispose()
