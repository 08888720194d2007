"""Shared fixtures: real databases (SQLite and PostgreSQL), real models, a real HTTP server.

PostgreSQL: every test session creates its own database on the server named by
DPICL_TEST_POSTGRES_URL (default: the local trust-auth server) and drops it at
the end. An unreachable PostgreSQL fails the run loudly; set
DPICL_TEST_SKIP_POSTGRES=1 to run the SQLite half alone on a machine without one.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest

PG_ADMIN_URL = os.environ.get("DPICL_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
SKIP_PG = os.environ.get("DPICL_TEST_SKIP_POSTGRES") == "1"
DB_KINDS = ["sqlite"] + ([] if SKIP_PG else ["postgres"])


def model_cache_dir() -> Path:
    env = os.environ.get("DPICL_MODEL_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "dpicl" / "models"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresDatabases:
    """Creates throwaway databases on the test PostgreSQL server."""

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url
        self.created: list[str] = []

    def _connect(self):
        import psycopg

        return psycopg.connect(self.admin_url, autocommit=True, connect_timeout=5)

    def create(self) -> str:
        from sqlalchemy.engine import make_url

        name = f"dpicl_test_{uuid.uuid4().hex[:12]}"
        try:
            with self._connect() as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
        except Exception as exc:  # fail loudly: the PostgreSQL half of the suite is required
            pytest.fail(f"PostgreSQL at {self.admin_url} is required for the test suite ({exc}); "
                        "set DPICL_TEST_SKIP_POSTGRES=1 to skip it deliberately", pytrace=False)
        self.created.append(name)
        return make_url(self.admin_url).set(database=name).render_as_string(hide_password=False)

    def drop_all(self) -> None:
        if not self.created:
            return
        with self._connect() as conn:
            for name in self.created:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def pg_databases():
    pg = PostgresDatabases(PG_ADMIN_URL)
    yield pg
    pg.drop_all()


def make_database_url(kind: str, tmp_path_factory, pg_databases) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp_path_factory.mktemp('db') / 'dpicl.db'}"
    return pg_databases.create()


@pytest.fixture(params=DB_KINDS)
def fresh_database_url(request, tmp_path_factory, pg_databases) -> str:
    """An empty (unmigrated) database of each kind, new for every test."""
    return make_database_url(request.param, tmp_path_factory, pg_databases)


@pytest.fixture(scope="session", params=DB_KINDS)
def database_url(request, tmp_path_factory, pg_databases) -> str:
    """A migrated database of each kind, shared by the session."""
    from app.store import migrate

    url = make_database_url(request.param, tmp_path_factory, pg_databases)
    migrate.upgrade(url)
    return url


@pytest.fixture(scope="session")
def lm():
    from app.llm import bundled_specs, load_model

    spec = next(s for s in bundled_specs() if s.kind == "lm")
    return load_model(spec, cache_dir=model_cache_dir(), device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def embedder():
    from app.llm import bundled_specs, load_model

    spec = next(s for s in bundled_specs() if s.kind == "embedder")
    return load_model(spec, cache_dir=model_cache_dir(), device="cpu", dtype="float32")


class LiveServer:
    """A real uvicorn server on a loopback port, running the app in a background thread."""

    def __init__(self, app, port: int) -> None:
        import uvicorn

        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name=f"uvicorn-{port}", daemon=True)

    def start(self, timeout: float = 120.0) -> None:
        self.thread.start()
        deadline = time.time() + timeout
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("the test server failed to start")
            if time.time() > deadline:
                raise RuntimeError("the test server did not start in time")
            time.sleep(0.05)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def server_settings(database_url: str, **overrides):
    from app.config import load_settings

    base = dict(
        database_url=database_url,
        migrate_on_startup=True,
        model_cache_dir=str(model_cache_dir()),
        device="cpu",
        dtype="float32",
        allow_seeded_noise=True,
    )
    base.update(overrides)
    return load_settings(**base)


def full_key(settings, tenant: str) -> str:
    """A key of every API scope for ``tenant``, made in ``settings``' database (migrated first)."""
    from app.api.principal import create_key
    from app.runtime import Runtime
    from app.store import migrate

    migrate.upgrade(settings.database_url)
    rt = Runtime.create(settings, models={})
    try:
        with rt.db.session() as s:
            key, _ = create_key(s, tenant_id=tenant, name=tenant, scopes=["admin", "infer", "audit", "internals"])
            s.commit()
    finally:
        rt.close()
    return key


@contextlib.contextmanager
def running_app(settings, models: dict | None = None, timeout: float = 60.0):
    """A real dpicl (uvicorn thread) for these settings; yields an httpx client on its base URL."""
    import httpx

    from app.api.main import create_app
    from app.runtime import Runtime

    rt = Runtime.create(settings, models=models)
    srv = LiveServer(create_app(settings, runtime=rt), free_port())
    srv.start()
    try:
        with httpx.Client(base_url=srv.url, timeout=timeout) as c:
            yield c
    finally:
        srv.stop()
        rt.close()


@pytest.fixture(scope="session")
def live_server(database_url, lm, embedder):
    """Base URL of a running dpicl (both bundled models, the session's database of each kind)."""
    from app.api.main import create_app
    from app.runtime import Runtime

    # No job runner: this server lives the whole session on the shared database, and a runner of its own
    # (default egress policy, default slots) would claim jobs that a test submitted to its own server on
    # that database (seen: a loopback remote-target audit refused by this runner's egress policy).
    settings = server_settings(database_url, job_runner="none")
    rt = Runtime.create(settings, models={lm.name: lm, embedder.name: embedder})
    srv = LiveServer(create_app(settings, runtime=rt), free_port())
    srv.start()
    yield srv.url
    srv.stop()
    rt.close()


# The doc-test count in the terminal summary (tests/docs/test_doc_examples.py fills it). Under
# pytest-xdist (`make test` runs 2 workers) a worker fills the tally: it hands it back at the end of its
# session (``workeroutput``) and the controller, which prints the summary, merges it.
_KEY = "dpicl_doc_tally"


def pytest_sessionfinish(session):
    from tests.docs.doc_blocks import TALLY

    out = getattr(session.config, "workeroutput", None)
    if out is not None and TALLY:  # an xdist worker: hand the tally to the controller
        out[_KEY] = json.dumps([[list(k) if isinstance(k, tuple) else k, v] for k, v in TALLY.items()])


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    from tests.docs.doc_blocks import TALLY

    text = getattr(node, "workeroutput", {}).get(_KEY)
    for k, v in json.loads(text) if text else []:
        TALLY[tuple(k) if isinstance(k, list) else k] = tuple(v) if k == "static" else v


def pytest_terminal_summary(terminalreporter):
    from tests.docs.doc_blocks import summary_line

    line = summary_line()
    if line:
        terminalreporter.write_sep("-", "doc examples")
        terminalreporter.write_line(line)
