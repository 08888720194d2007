"""Remote audit targets through the jobs API (real dpicl server, real HTTP, SQLite and PostgreSQL):
the gateway key is never stored in plain text nor returned (every output searched for it), target.url
follows the egress policy, and gateway failures are the gateway's (retried, then target_unavailable).

The gateway here is a tiny stand-in written for these tests (it imports nothing of ``app``): it speaks
the two routes a remote canary target calls, records what it was sent, and can fail on purpose."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from cryptography.fernet import Fernet

from tests.conftest import DB_KINDS, free_port, make_database_url, running_app
from tests.jobs.conftest import ROOT, job_settings, submit, wait_job

KEY = "gw-key-Zq8Xv3KpL0wT7nYb"  # distinctive: searched for in every output below
ENV_KEY = "gw-env-key-Hm4Rt9Ws2Qd6"
SECRETS_KEY = Fernet.generate_key().decode()
EXEMPLARS = [{"input": f"request number {i}", "output": ["weather", "music"][i % 2]} for i in range(8)]
DATASET = {"exemplars": EXEMPLARS, "labels": ["weather", "music"], "size": 8}
PARAMS = {"epsilon": 1.0, "delta": 1e-5, "partitions": 4}


class Gateway:
    """A stand-in gateway: POST /v1/datasets and /v1/private/classify (label = the first label),
    POST /hook records webhook deliveries. ``fail_first`` answers ``fail_status`` to that many requests
    first (-1: always); ``delay`` sleeps before answering."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str | None]] = []
        self.hooks: list[bytes] = []
        self.fail_first, self.fail_status, self.delay, self.off_api, self.retry_after = 0, 503, 0.0, False, None
        self.labels: dict[str, list[str]] = {}
        gw = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path == "/hook":
                    gw.hooks.append(body)
                    return self._send(200, {})
                gw.requests.append((self.path, self.headers.get("Authorization")))
                if gw.delay:
                    time.sleep(gw.delay)
                if gw.fail_first != 0:
                    gw.fail_first -= 1 if gw.fail_first > 0 else 0
                    return self._send(gw.fail_status, {"error": {"message": f"stand-in says {gw.fail_status}",
                                                                 "param": None}}, gw.retry_after)
                req = json.loads(body)
                if self.path == "/v1/datasets":
                    ds = f"ds_{len(gw.labels)}"
                    gw.labels[ds] = req["labels"]
                    return self._send(200, {"id": ds})
                if self.path == "/v1/private/classify" and gw.off_api:  # 200, but not the API's shape
                    return self._send(200, {"answer": "weather"})
                if self.path == "/v1/private/classify":
                    return self._send(200, {"label": gw.labels[req["dataset_id"]][0],
                                            "privacy": {"epsilon": 1.0, "delta": 1e-5}})
                self._send(404, {"error": {"message": "no such route"}})

            def _send(self, status, obj, retry_after=None):
                data = json.dumps(obj).encode()
                self.send_response(status)
                if retry_after is not None:
                    self.send_header("Retry-After", retry_after)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except BrokenPipeError:  # the client timed out (the timeout test)
                    pass

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def reset(self, **kw) -> None:
        self.requests.clear()
        self.fail_first, self.fail_status, self.delay, self.off_api, self.retry_after = 0, 503, 0.0, False, None
        for k, v in kw.items():
            setattr(self, k, v)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def gateway():
    gw = Gateway()
    yield gw
    gw.close()


@pytest.fixture(scope="module")
def logs():
    """Every log record of this process (the server runs in it) at DEBUG, as text."""
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setLevel(logging.DEBUG)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    old = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield buf
    root.removeHandler(handler)
    root.setLevel(old)


@pytest.fixture(scope="module")
def server(database_url, logs):
    """(client, database_url): a dpicl server with a secrets key; loopback allowed (the stand-in listens there)."""
    with running_app(job_settings(database_url, secrets_key=SECRETS_KEY), timeout=30) as c:
        yield c, database_url


def _remote(gateway, **target) -> dict:
    return {"target": {"type": "remote", "url": gateway.url, "params": PARAMS, "retry_backoff_seconds": 0.05,
                       **target},
            "dataset": DATASET, "trials": 20, "seed": 3, "query": "inquiry"}


def _db_text(database_url: str) -> str:
    """Every row of every table, as text."""
    import sqlalchemy as sa

    eng = sa.create_engine(database_url)
    out = []
    try:
        with eng.connect() as conn:
            insp = sa.inspect(conn)
            for schema in [None] + ([] if database_url.startswith("sqlite") else []):
                for table in insp.get_table_names(schema=schema):
                    t = sa.Table(table, sa.MetaData(), autoload_with=conn)
                    for row in conn.execute(sa.select(t)):
                        out.append(f"{table}: {tuple(row)!r}")
    finally:
        eng.dispose()
    assert any(line.startswith("audit_jobs") for line in out)
    return "\n".join(out)


def test_the_key_is_used_and_never_stored_nor_returned(server, gateway, logs, monkeypatch, tmp_path):
    c, database_url = server
    gateway.reset()
    monkeypatch.setenv("DPICL_TARGET_KEY_TEST", ENV_KEY)  # the in-process runner reads this process's env
    seen: list[str] = []

    def keep(r):
        seen.append(r.text)
        return r

    inline = keep(c.post("/v1/audits", json={"kind": "canary_mia", "config": _remote(gateway, api_key=KEY),
                                             "webhook_url": f"{gateway.url}/hook"}))
    assert inline.status_code == 202, inline.text
    assert inline.json()["config"]["target"]["api_key_sealed"] == "[redacted]"
    by_env = keep(c.post("/v1/audits", json={"kind": "canary_mia",
                                             "config": _remote(gateway, api_key_env="DPICL_TARGET_KEY_TEST")}))
    assert by_env.status_code == 202, by_env.text
    assert by_env.json()["config"]["target"]["api_key_env"] == "DPICL_TARGET_KEY_TEST"  # a name, not a secret
    jobs = [wait_job(c, r.json()["id"], timeout=60) for r in (inline, by_env)]
    assert [j["status"] for j in jobs] == ["succeeded", "succeeded"], jobs
    # The gateway got each key (the audit really authenticated with it).
    auths = {a for _, a in gateway.requests}
    assert auths == {f"Bearer {KEY}", f"Bearer {ENV_KEY}"}, auths

    # The CLI (a real process): --json on stdout, messages on stderr, a JUnit file.
    cfg = tmp_path / "audit.json"
    cfg.write_text(json.dumps({"kind": "canary_mia", "config": _remote(gateway, api_key=KEY)}))
    junit = tmp_path / "junit.xml"
    p = subprocess.run([sys.executable, "-m", "app.cli", "audit", "run", "--server", str(c.base_url), "--config",
                        str(cfg), "--claimed-epsilon", "1", "--wait", "--json", "--junit", str(junit),
                        "--run-id", str(time.time_ns())], cwd=ROOT, capture_output=True, text=True, timeout=120)
    cli_job = json.loads(p.stdout)
    assert cli_job["status"] == "succeeded", p.stdout + p.stderr
    assert cli_job["config"]["target"]["api_key_sealed"] == "[redacted]"
    from app.cli.audit import idempotency_key

    assert idempotency_key({"config": {"target": {"api_key": KEY}}}, "1") == \
        idempotency_key({"config": {"target": {"api_key": "another"}}}, "1")  # no hash of the key in the header
    plain = subprocess.run([sys.executable, "-m", "app.cli", "audit", "status", cli_job["id"], "--server",
                            str(c.base_url)], cwd=ROOT, capture_output=True, text=True, timeout=60)

    for j in jobs + [cli_job]:
        seen.append(c.get(f"/v1/audits/{j['id']}").text)
        for a in c.get(f"/v1/audits/{j['id']}/artifacts").json()["data"]:
            seen.append(c.get(a["url"]).content.decode(errors="replace"))
    seen.append(c.get("/v1/audits", params={"limit": 100}).text)
    deadline = time.time() + 30
    while not gateway.hooks and time.time() < deadline:
        time.sleep(0.1)
    assert gateway.hooks, "no webhook delivery"
    everything = {
        "responses": "\n".join(seen), "webhooks": b"\n".join(gateway.hooks).decode(),
        "cli": p.stdout + p.stderr + plain.stdout + plain.stderr, "junit": junit.read_text(),
        "logs": logs.getvalue(), "database": _db_text(database_url),
    }
    assert "audit_jobs" in everything["database"] and "[redacted]" in everything["webhooks"]
    for where, text in everything.items():
        assert KEY not in text and ENV_KEY not in text, f"the key leaks into the {where}"
    assert len(everything["logs"]) > 0 and len(everything["responses"]) > 1000


@pytest.mark.parametrize(("target", "param", "says"), [
    ({"api_key_env": "DPICL_TARGET_KEY_UNSET_HERE"}, "config.target.api_key_env", "not set on this server"),
    ({"api_key_env": "DPICL_DATABASE_URL"}, "config.target.api_key_env", "DPICL_TARGET_KEY"),
    ({"api_key": KEY, "api_key_env": "DPICL_TARGET_KEY_X"}, "config.target", "one of api_key and api_key_env"),
    ({"api_key_sealed": "gAAAA"}, "config.target.api_key_sealed", "set by the server"),
    ({"url": "http://10.1.2.3:8000"}, "config.target.url", "private address"),
    ({"url": "http://169.254.169.254/latest"}, "config.target.url", "link-local address"),
    ({"url": "http://[::ffff:10.0.0.1]:80"}, "config.target.url", "private address"),
    ({"url": "ftp://example.com"}, "config.target.url", "scheme"),
    ({"url": "http://user:pw@example.com"}, "config.target.url", "credentials"),
])
def test_bad_credentials_and_urls_are_422_naming_the_field(server, gateway, target, param, says):
    c, _ = server
    r = c.post("/v1/audits", json={"kind": "canary_mia", "config": _remote(gateway, **target)})
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["param"] == param and says in err["message"], err
    assert KEY not in r.text


def test_inline_key_without_a_server_key_is_refused(database_url, gateway):
    with running_app(job_settings(database_url, webhook_allowed_networks=[]), timeout=30) as c:
        r = c.post("/v1/audits", json={"kind": "canary_mia", "config": _remote(gateway, url="http://93.184.215.14",
                                                                               api_key=KEY)})
        assert r.status_code == 422 and r.json()["error"]["param"] == "config.target.api_key", r.text
        assert "api_key_env" in r.json()["error"]["message"] and "DPICL_SECRETS_KEY" in r.json()["error"]["message"]
        # The default policy (no allow-list) refuses the loopback stand-in at submit.
        r = c.post("/v1/audits", json={"kind": "canary_mia", "config": _remote(gateway)})
        assert r.status_code == 422 and r.json()["error"]["param"] == "config.target.url", r.text
        assert "loopback" in r.json()["error"]["message"] and "DPICL_EGRESS_ALLOWED_NETWORKS" in r.text


def test_idempotent_replay_compares_the_key_by_its_hmac(server, gateway):
    """The stored request hash holds an HMAC of the key: the same key replays the job, another key is a 409."""
    c, database_url = server
    gateway.reset()
    idem = {"Idempotency-Key": f"replay-{time.time_ns()}"}
    body = {"kind": "canary_mia", "config": _remote(gateway, api_key=KEY)}
    first = c.post("/v1/audits", json=body, headers=idem)
    again = c.post("/v1/audits", json=body, headers=idem)
    assert first.status_code == 202 and again.status_code == 200 and again.json()["id"] == first.json()["id"]
    other = c.post("/v1/audits", json={**body, "config": _remote(gateway, api_key=KEY + "x")}, headers=idem)
    assert other.status_code == 409, other.text
    assert wait_job(c, first.json()["id"], timeout=60)["status"] == "succeeded"
    from app.jobs.service import request_hash

    plain = request_hash("canary_mia", body["config"], None, None, None)  # what an unkeyed hash would store
    assert plain not in _db_text(database_url)


def _failed(c, config) -> dict:
    j = wait_job(c, submit(c, "canary_mia", config)["id"], timeout=60)
    assert j["status"] == "failed", j
    assert "bug in dpicl" not in j["error"]["message"]
    return j["error"]


def test_unreachable_gateway_fails_as_target_unavailable(server, gateway):
    c, _ = server
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    err = _failed(c, _remote(gateway, url=url))
    assert err["code"] == "target_unavailable", err
    assert err["message"] == (f"gateway {url}/v1/datasets unreachable after 4 attempts: connection refused "
                              "(register dataset)"), err


def test_5xx_is_retried_then_succeeds_or_fails_as_target_unavailable(server, gateway):
    c, _ = server
    gateway.reset(fail_first=2, retry_after="0.6")  # 503, 503, then 200: within the 3 retries
    t0 = time.time()
    j = wait_job(c, submit(c, "canary_mia", _remote(gateway))["id"], timeout=60)
    assert j["status"] == "succeeded", j
    assert [p for p, _ in gateway.requests[:3]] == ["/v1/datasets"] * 3
    assert time.time() - t0 >= 1.2  # Retry-After: 0.6 honoured twice (the back-off alone: 0.05 + 0.1 s)
    gateway.reset(fail_first=-1)
    t0 = time.time()
    err = _failed(c, _remote(gateway, retries=2))
    assert err["code"] == "target_unavailable" and len(gateway.requests) == 3, (err, gateway.requests)
    assert err["message"].startswith(f"gateway {gateway.url}/v1/datasets unavailable after 3 attempts: HTTP 503: "
                                     "stand-in says 503"), err
    assert time.time() - t0 >= 0.05 + 0.1  # the back-off: 0.05 s, then 0.1 s


def test_timeouts_are_retried_then_target_unavailable(server, gateway):
    c, _ = server
    gateway.reset(delay=1.5)
    err = _failed(c, _remote(gateway, retries=1, timeout_seconds=0.3))
    assert err["code"] == "target_unavailable" and len(gateway.requests) == 2, (err, gateway.requests)
    assert "unreachable after 2 attempts: timed out waiting for the answer (timeout 0.3s)" in err["message"], err


@pytest.mark.parametrize("status", [401, 429])
def test_4xx_fails_at_once_as_target_error(server, gateway, status):
    c, _ = server
    gateway.reset(fail_first=-1, fail_status=status)
    err = _failed(c, _remote(gateway))
    assert err["code"] == "target_error" and len(gateway.requests) == 1, (err, gateway.requests)
    assert f"gateway {gateway.url}/v1/datasets answered HTTP {status}: stand-in says {status}" in err["message"]


def test_an_answer_off_the_api_is_a_target_error(server, gateway):
    c, _ = server
    gateway.reset(off_api=True)
    err = _failed(c, _remote(gateway))
    assert err["code"] == "target_error", err
    assert f"gateway {gateway.url}/v1/private/classify answered without label (got ['answer'])" in err["message"]


def test_rotation_first_key_seals_every_key_opens():
    """DPICL_SECRETS_KEY rotation: sealed with A; 'B,A' opens it (and seals with B); 'B' alone cannot."""
    from app.config import load_settings
    from app.jobs import secrets
    from app.jobs.kinds.canary_mia import CanaryMIAConfig

    a, b = Fernet.generate_key().decode(), Fernet.generate_key().decode()

    def sealed(key: str):
        cfg = CanaryMIAConfig.model_validate({"target": {"type": "remote", "url": "http://93.184.215.14",
                                                         "api_key": KEY}})
        secrets.seal(cfg, load_settings(secrets_key=key))
        stored = cfg.model_dump(mode="json")
        assert KEY not in json.dumps(stored) and stored["target"]["api_key"] is None
        return CanaryMIAConfig.model_validate(stored).target  # as the worker reads it back

    old = sealed(a)
    assert secrets.resolve(old, load_settings(secrets_key=f"{b},{a}")) == KEY
    assert secrets.resolve(sealed(f"{b},{a}"), load_settings(secrets_key=b)) == KEY  # the first key seals
    with pytest.raises(secrets.SecretUnavailable, match="none of the keys"):
        secrets.resolve(old, load_settings(secrets_key=b))
    unset = CanaryMIAConfig.model_validate({"target": {"type": "remote", "url": "http://93.184.215.14",
                                                       "api_key_env": "DPICL_TARGET_KEY_NOT_ON_THIS_WORKER"}})
    with pytest.raises(secrets.SecretUnavailable, match="not set on the worker"):
        secrets.resolve(unset.target, load_settings())
    moved = old.model_copy(update={"url": "http://93.184.215.15"})  # a sealed key opens for its own url only
    with pytest.raises(secrets.SecretUnavailable, match="another target url"):
        secrets.resolve(moved, load_settings(secrets_key=a))


def test_a_target_repr_holds_no_key():
    from app.audit import RemoteTarget

    t = RemoteTarget("http://127.0.0.1:9", api_key=KEY)
    try:
        assert KEY not in repr(t) and KEY not in str(t)
    finally:
        t.close()


def test_egress_names_and_their_webhook_aliases(monkeypatch):
    import ipaddress

    from app.config import SettingsError, load_settings

    monkeypatch.setenv("DPICL_WEBHOOK_ALLOWED_NETWORKS", "10.0.0.0/8")
    s = load_settings()
    assert s.egress_allowed_networks == [ipaddress.ip_network("10.0.0.0/8")] and s.egress_allow_private is False
    monkeypatch.setenv("DPICL_EGRESS_ALLOWED_NETWORKS", "192.168.0.0/16")
    monkeypatch.setenv("DPICL_EGRESS_ALLOW_PRIVATE", "true")
    s = load_settings()
    assert s.egress_allowed_networks == [ipaddress.ip_network("192.168.0.0/16")] and s.egress_allow_private is True
    monkeypatch.setenv("DPICL_SECRETS_KEY", "not-a-fernet-key")
    with pytest.raises(SettingsError, match="DPICL_SECRETS_KEY: .*not a Fernet key") as exc:
        load_settings()
    assert "not-a-fernet-key" not in str(exc.value)


@pytest.mark.parametrize("db_kind", DB_KINDS)
def test_real_server_and_worker_processes_never_write_the_key(db_kind, gateway, tmp_path, tmp_path_factory,
                                                              pg_databases):
    """`dpicl serve` (+ a `dpicl worker` on PostgreSQL: procrastinate) as real processes at DEBUG log level,
    configured by environment (DPICL_EGRESS_ALLOWED_NETWORKS, DPICL_SECRETS_KEY, DPICL_TARGET_KEY_*): both
    ways of giving the key reach the gateway; the processes' logs and every table (procrastinate's too) lack it."""
    from tests.jobs.conftest import Proc, fast_env, start_server

    gateway.reset()
    url = make_database_url(db_kind, tmp_path_factory, pg_databases)
    env = fast_env(url, DPICL_LOG_LEVEL="debug", DPICL_SECRETS_KEY=f"{Fernet.generate_key().decode()},{SECRETS_KEY}",
                   DPICL_EGRESS_ALLOWED_NETWORKS="127.0.0.0/8", DPICL_TARGET_KEY_CI=ENV_KEY)
    env.pop("DPICL_WEBHOOK_ALLOWED_NETWORKS", None)
    log = tmp_path / "procs.log"
    procs = []
    try:
        if db_kind == "postgres":
            procs.append(Proc(["worker", "--name", "w1"], env, log))
        srv, base = start_server(env, log)
        procs.append(srv)
        with httpx.Client(base_url=base, timeout=30) as c:
            ids = [submit(c, "canary_mia", _remote(gateway, **t))["id"]
                   for t in ({"api_key": KEY}, {"api_key_env": "DPICL_TARGET_KEY_CI"})]
            jobs = [wait_job(c, i, timeout=90) for i in ids]
            assert [j["status"] for j in jobs] == ["succeeded", "succeeded"], jobs
            if db_kind == "postgres":
                assert c.get("/v1/health").json()["extras"]["job_runner"] == "procrastinate"
            seen = c.get("/v1/audits").text + "".join(c.get(f"/v1/audits/{i}").text for i in ids)
    finally:
        for p in procs:
            p.stop()
    assert {a for _, a in gateway.requests} == {f"Bearer {KEY}", f"Bearer {ENV_KEY}"}
    text = log.read_text(errors="replace")
    assert "DEBUG" in text and "canary_mia" in text, text[-2000:]
    for where, out in {"logs": text, "responses": seen, "database": _db_text(url)}.items():
        assert KEY not in out and ENV_KEY not in out, f"the key leaks into the {where}"
