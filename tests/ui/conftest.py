"""Fixtures of the /ui tests: a live keyed server (in-thread uvicorn, in-process job runner) with
two tenants, and a cookie-handling HTTP client for its pages."""

from __future__ import annotations

import re
from contextlib import contextmanager
from http.cookies import SimpleCookie

import httpx
import pytest

from tests.conftest import DB_KINDS, LiveServer, free_port, make_database_url
from tests.jobs.conftest import job_settings

SIM = {"type": "simulated", "params": {"epsilon": 1.0, "delta": 1e-5, "partitions": 4}}
# A cheap real audit: simulated votes, 400 trials, with power against noise x 1/4 (about a second).
CANARY = {"target": SIM, "trials": 400, "seed": 1, "power": {"alternatives": ["noise_quarter"]}}
SECRETS_KEY = "dGhpcyBpcyBhIHRlc3Qga2V5IG9mIDMyIGJ5dGVzISE="  # Fernet: 32 url-safe base64 bytes


class UIClient:
    """An httpx client that keeps the session cookie by hand. http.cookiejar never sends a Secure
    cookie over plain http, and the cookie stays Secure here as in production; browsers do send it
    to http://127.0.0.1 (a secure context), which the browser tests show."""

    def __init__(self, base_url: str) -> None:
        self.http = httpx.Client(base_url=base_url, timeout=30, follow_redirects=False)
        self.cookie: str | None = None
        self.last_set_cookie: str | None = None

    def _headers(self, headers: dict | None) -> dict:
        h = dict(headers or {})
        if self.cookie:
            h["Cookie"] = f"dpicl_session={self.cookie}"
        return h

    def _keep(self, r: httpx.Response) -> httpx.Response:
        for raw in r.headers.get_list("set-cookie"):
            c = SimpleCookie()
            c.load(raw)
            if "dpicl_session" in c:
                self.last_set_cookie = raw
                m = c["dpicl_session"]
                self.cookie = m.value if m.value and m["max-age"] != "0" else None
        return r

    def get(self, url: str, **kw) -> httpx.Response:
        return self._keep(self.http.get(url, headers=self._headers(kw.pop("headers", None)), **kw))

    def post(self, url: str, data: dict | None = None, **kw) -> httpx.Response:
        return self._keep(self.http.post(url, data=data, headers=self._headers(kw.pop("headers", None)), **kw))

    def csrf(self, path: str = "/ui/audits/new") -> str:
        r = self.get(path)
        assert r.status_code == 200, r.text
        return re.search(r'name="csrf_token" value="([^"]+)"', r.text).group(1)

    def login(self, key: str) -> httpx.Response:
        token = self.csrf("/ui/login")
        r = self.post("/ui/login", {"csrf_token": token, "api_key": key, "next": "/ui/audits"})
        assert r.status_code == 303, r.text
        return r

    def close(self) -> None:
        self.http.close()


@contextmanager
def keyed_live_server(url: str, keys: dict[str, tuple[str, list[str]]], models: dict | None = None, **settings_overrides):
    """A live server that requires keys, on the database at ``url`` (migrated here), its in-process runner
    running the jobs. ``keys``: name -> (tenant id, scopes); the server's ``keys`` maps each name to its key."""
    from app.api.auth import create_key
    from app.api.main import create_app
    from app.runtime import Runtime
    from app.store import migrate

    migrate.upgrade(url)
    settings = job_settings(url, auth_mode="required", **settings_overrides)
    rt = Runtime.create(settings, models=models)
    with rt.db.session() as s:
        made = {name: create_key(s, tenant_id=tenant, name=name.lower(), scopes=scopes)[0]
                for name, (tenant, scopes) in keys.items()}
        s.commit()
    srv = LiveServer(create_app(settings, runtime=rt), free_port())
    srv.start()
    srv.runtime, srv.keys = rt, made
    try:
        yield srv
    finally:
        srv.stop()
        rt.close()


@pytest.fixture(scope="module", params=DB_KINDS)
def keyed_server(request, tmp_path_factory, pg_databases):
    """A server that requires keys; tenants A (audit+admin), B (audit+admin), A-infer (infer only)."""
    url = make_database_url(request.param, tmp_path_factory, pg_databases)
    keys = {"A": ("tenant-a", ["audit", "admin"]), "B": ("tenant-b", ["audit", "admin"]),
            "A-infer": ("tenant-a", ["infer"])}
    with keyed_live_server(url, keys, secrets_key=SECRETS_KEY) as srv:
        srv.db_kind = request.param
        yield srv


@pytest.fixture
def ui(keyed_server):
    clients: list[UIClient] = []

    def make(key: str | None = None) -> UIClient:
        c = UIClient(keyed_server.url)
        clients.append(c)
        if key:
            c.login(keyed_server.keys[key])
        return c

    yield make
    for c in clients:
        c.close()


def api(server, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=30, headers={"Authorization": f"Bearer {server.keys[key]}"})
