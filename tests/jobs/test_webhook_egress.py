"""Webhook egress policy (SSRF): refused at submit time (422) and at delivery time after DNS resolution."""

from __future__ import annotations

import ipaddress
import json

import pytest

from app.jobs import egress, webhooks
from tests.conftest import running_app
from tests.jobs.conftest import job_settings, wait_for
from tests.jobs.test_webhooks import receiver  # noqa: F401 (fixture)

REFUSED_BY_DEFAULT = [
    ("http://169.254.169.254/latest/meta-data/iam/security-credentials/", "169.254.169.254 is a link-local address"),
    ("http://127.0.0.1:8000/v1/admin", "127.0.0.1 is a loopback address"),
    ("http://localhost:5432/", "localhost is a loopback address"),
    ("http://app.localhost/", "app.localhost is a loopback address"),
    ("http://10.0.0.7/hook", "10.0.0.7 is a private address"),
    ("http://192.168.1.1/", "192.168.1.1 is a private address"),
    ("http://100.64.0.1/", "100.64.0.1 is a non-global address"),
    ("http://0.0.0.0:8000/", "0.0.0.0 is an unspecified address"),
    ("http://[::1]/", "::1 is a loopback address"),
    ("http://[fe80::1]/", "fe80::1 is a link-local address"),
    ("http://[fd00::1]/", "fd00::1 is a private address"),
    ("http://224.0.0.1/", "224.0.0.1 is a multicast address"),
    ("http://240.0.0.1/", "240.0.0.1 is a private address"),
    ("http://[::ffff:169.254.169.254]/", "IPv4 169.254.169.254 embedded in IPv6"),
    ("http://[2002:7f00:1::]/", "IPv4 127.0.0.1 embedded in IPv6"),
    ("http://2130706433/", "2130706433 is a loopback address"),  # 127.0.0.1 as one number
    ("http://0x7f.1/", "0x7f.1 is a loopback address"),
    ("ftp://hooks.example.com/x", "scheme 'ftp' is not allowed"),
    ("file:///etc/passwd", "scheme 'file' is not allowed"),
    ("http://user:pass@hooks.example.com/x", "must not carry credentials"),
    ("http://token@hooks.example.com/x", "must not carry credentials"),
]


def test_static_policy_refuses_non_public_destinations_by_default():
    s = job_settings("sqlite://", webhook_allowed_networks=[])
    assert not s.webhook_allow_private and s.webhook_allowed_networks == [] and s.webhook_allowed_hosts == []
    for url, why in REFUSED_BY_DEFAULT:
        with pytest.raises(egress.EgressRefused) as exc:
            egress.check_url(url, s)
        assert why in str(exc.value) and str(exc.value).startswith("webhook_url"), (url, str(exc.value))
    for url in ("https://hooks.example.com/dpicl", "http://8.8.8.8:8080/x", "https://[2606:4700::1111]/"):
        egress.check_url(url, s)


def test_the_defaults_of_the_service_refuse_private_addresses():
    from app.config import Settings

    s = Settings()
    assert s.webhook_allow_private is False and s.webhook_allowed_networks == [] and s.webhook_allowed_hosts == []


def test_allowing_networks_hosts_or_private_addresses():
    s = job_settings("sqlite://", webhook_allowed_networks=["127.0.0.0/8", "10.20.0.0/16"])
    egress.check_url("http://127.0.0.1:9/x", s)
    egress.check_url("http://10.20.3.4/x", s)
    with pytest.raises(egress.EgressRefused, match="10.21.0.1 is a private address"):
        egress.check_url("http://10.21.0.1/x", s)
    with pytest.raises(egress.EgressRefused, match="link-local"):
        egress.check_url("http://169.254.169.254/", s)

    s = job_settings("sqlite://", webhook_allow_private=True)
    for url in ("http://127.0.0.1:9/x", "http://169.254.169.254/", "http://[::1]/"):
        egress.check_url(url, s)
    with pytest.raises(egress.EgressRefused, match="credentials"):  # still refused
        egress.check_url("http://a:b@127.0.0.1/", s)

    s = job_settings("sqlite://", webhook_allowed_hosts=["hooks.example.com", "*.corp.example"])
    egress.check_url("https://hooks.example.com/x", s)
    egress.check_url("https://ci.corp.example/x", s)
    for url in ("https://corp.example/x", "https://evil.example.com/x", "https://hooks.example.com.evil.io/"):
        with pytest.raises(egress.EgressRefused, match="DPICL_WEBHOOK_ALLOWED_HOSTS"):
            egress.check_url(url, s)


def test_the_lists_parse_from_the_environment(monkeypatch):
    from app.config import SettingsError, load_settings

    monkeypatch.setenv("DPICL_WEBHOOK_ALLOWED_NETWORKS", "127.0.0.0/8, fd00::/8")
    monkeypatch.setenv("DPICL_WEBHOOK_ALLOWED_HOSTS", '["Hooks.Example.com.", "*.corp.example"]')
    s = load_settings()
    assert s.webhook_allowed_networks == [ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("fd00::/8")]
    assert s.webhook_allowed_hosts == ["hooks.example.com", "*.corp.example"]
    monkeypatch.setenv("DPICL_WEBHOOK_ALLOWED_NETWORKS", "10.0.0.0/33")
    with pytest.raises(SettingsError, match="DPICL_WEBHOOK_ALLOWED_NETWORKS"):
        load_settings()
    monkeypatch.delenv("DPICL_WEBHOOK_ALLOWED_NETWORKS")
    monkeypatch.setenv("DPICL_WEBHOOK_ALLOWED_HOSTS", "*evil")
    with pytest.raises(SettingsError, match="DPICL_WEBHOOK_ALLOWED_HOSTS"):
        load_settings()


# --- submit time: 422 over real HTTP --------------------------------------------------------------


@pytest.fixture(scope="module")
def strict_client(jobs_db):
    """A live server with the default egress policy (no runner: nothing is ever delivered)."""
    with running_app(job_settings(jobs_db, webhook_allowed_networks=[], job_runner="none"), timeout=30) as c:
        yield c


@pytest.mark.parametrize(
    "url, why",
    [
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a link-local address"),
        ("http://127.0.0.1:8000/hook", "127.0.0.1 is a loopback address"),
        ("http://localhost:8000/hook", "localhost is a loopback address"),
        ("http://[::ffff:10.0.0.1]/hook", "private address"),
        ("ftp://hooks.example.com/x", "scheme"),
        ("http://user:pass@hooks.example.com/x", "credentials"),
    ],
)
def test_submit_refuses_with_422_naming_webhook_url(strict_client, url, why):
    before = len(strict_client.get("/v1/audits", params={"limit": 100}).json()["data"])
    r = strict_client.post("/v1/audits", json={"kind": "sleep", "config": {}, "webhook_url": url})
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["param"] == "webhook_url" and "webhook_url" in err["message"], err
    assert why in err["message"], err
    assert len(strict_client.get("/v1/audits", params={"limit": 100}).json()["data"]) == before


def test_submit_accepts_a_public_url(strict_client):
    r = strict_client.post("/v1/audits", json={"kind": "sleep", "config": {},
                                               "webhook_url": "https://hooks.example.com/dpicl"})
    assert r.status_code == 202, r.text
    stored = strict_client.get(f"/v1/audits/{r.json()['id']}").json()
    # Accepted and stored as given; nothing delivered yet (this server runs no jobs).
    assert stored["webhook"]["url"] == "https://hooks.example.com/dpicl"
    assert stored["webhook"]["attempts"] == 0 and stored["status"] == "queued"


# --- delivery time: after DNS resolution -----------------------------------------------------------


def _finished_job(rt, url: str) -> str:
    from app.jobs import repository as repo

    with rt.db.session() as s:
        job, _ = repo.create_job(s, kind="sleep", config={}, claimed_epsilon=None, claimed_delta=None,
                                 webhook_url=url, idempotency_key=None, request_hash="x", max_attempts=1)
        repo.claim(s, job.id, "w")
        repo.finish(s, job.id, "w", "succeeded", result={})
    return job.id


def _deliver(rt, job_id: str) -> tuple[str, int]:
    from app.jobs import repository as repo

    def settled():
        webhooks.deliver_due(rt)
        with rt.db.session() as s:
            row = repo.get_job(s, job_id, tenant_id=None)
        return (row.webhook_status, row.webhook_attempts) if row.webhook_status not in ("pending",) else None

    return wait_for(settled, 15, "a delivery attempt")


@pytest.fixture
def fake_dns(monkeypatch):
    """Stand in for DNS: names -> addresses; records every lookup."""
    table: dict[str, list[str]] = {}
    lookups: list[str] = []
    real = egress.resolve

    def resolve(host, port):
        lookups.append(host)
        if host in table:
            return [ipaddress.ip_address(a) for a in table[host]]
        return real(host, port)

    monkeypatch.setattr(egress, "resolve", resolve)
    return table, lookups


def test_delivery_refuses_a_name_that_resolves_to_a_private_address(fresh_database_url, receiver, fake_dns):
    """The name passes the submit-time check; the resolved address does not. Failed at once, with the reason."""
    from app.runtime import Runtime

    table, _ = fake_dns
    rcv = receiver()
    port = rcv.server.server_address[1]
    table["hooks.internal.test"] = ["127.0.0.1"]
    table["mixed.test"] = ["93.184.216.34", "10.1.2.3"]  # one private answer is enough to refuse
    rt = Runtime.create(job_settings(fresh_database_url, webhook_allowed_networks=[]))
    try:
        egress.check_url(f"http://hooks.internal.test:{port}/hook", rt.settings)  # submit time: fine
        job = _finished_job(rt, f"http://hooks.internal.test:{port}/hook")
        status, attempts = _deliver(rt, job)
        assert status == ("failed: refused by the egress policy "
                          "(hooks.internal.test resolves to 127.0.0.1, a loopback address)"), status
        assert attempts == 1 and rcv.calls == []

        job = _finished_job(rt, f"http://mixed.test:{port}/hook")
        status, attempts = _deliver(rt, job)
        assert status == "failed: refused by the egress policy (mixed.test resolves to 10.1.2.3, a private address)"
        assert attempts == 1 and rcv.calls == []

        # A URL that the policy refuses outright (e.g. allowed when submitted, refused since).
        job = _finished_job(rt, f"http://127.0.0.1:{port}/hook")
        status, _ = _deliver(rt, job)
        assert status == "failed: refused by the egress policy (webhook_url: 127.0.0.1 is a loopback address)"
        assert rcv.calls == []
    finally:
        rt.close()


def test_the_connection_checks_the_real_resolver_too(fresh_database_url):
    """`localhost` through the system resolver (no stand-in), straight at the connection layer."""
    settings = job_settings(fresh_database_url, webhook_allowed_networks=[])
    backend = egress.VettingBackend(settings)
    with pytest.raises(egress.EgressRefused, match=r"localhost resolves to (127\.0\.0\.1|::1), a loopback address"):
        backend.connect_tcp("localhost", 9, timeout=1)
    with pytest.raises(egress.EgressRefused, match=r"^169\.254\.169\.254 is a link-local address"):
        backend.connect_tcp("169.254.169.254", 80, timeout=1)
    # The delivery client's transport is the vetting one (guards against httpx internals changing).
    with egress.client(settings) as c:
        with pytest.raises(egress.EgressRefused, match="localhost resolves to"):
            c.post("http://localhost:9/x", content=b"{}")


def test_delivery_connects_to_the_vetted_address_when_allowed(fresh_database_url, receiver, fake_dns):
    """Allowed by DPICL_WEBHOOK_ALLOWED_NETWORKS: one lookup per attempt, the POST goes to the address that was
    checked (a name only the stand-in DNS knows), with the URL's host in the Host header."""
    from app.runtime import Runtime

    table, lookups = fake_dns
    rcv = receiver()
    port = rcv.server.server_address[1]
    table["hooks.internal.test"] = ["127.0.0.1"]
    rt = Runtime.create(job_settings(fresh_database_url, webhook_allowed_networks=["127.0.0.0/8"]))
    try:
        job = _finished_job(rt, f"http://hooks.internal.test:{port}/hook")
        status, attempts = _deliver(rt, job)
        assert status == "delivered (HTTP 200, attempt 1)" and attempts == 1
        assert lookups.count("hooks.internal.test") == 1
        assert len(rcv.calls) == 1 and rcv.calls[0]["headers"]["Host"] == f"hooks.internal.test:{port}"
        assert json.loads(rcv.calls[0]["body"])["id"] == job
    finally:
        rt.close()


def test_delivery_with_private_addresses_allowed_and_no_redirects(fresh_database_url, receiver):
    from app.runtime import Runtime

    rcv = receiver([302])
    port = rcv.server.server_address[1]
    rt = Runtime.create(job_settings(fresh_database_url, webhook_allowed_networks=[], webhook_allow_private=True,
                                     webhook_max_attempts=1))
    try:
        job = _finished_job(rt, f"http://127.0.0.1:{port}/hook")
        status, _ = _deliver(rt, job)
        assert status == "failed after 1 attempts (last: HTTP 302)"  # a redirect is not followed
        assert len(rcv.calls) == 1
        job = _finished_job(rt, f"http://localhost:{port}/hook")
        status, _ = _deliver(rt, job)
        assert status == "delivered (HTTP 200, attempt 1)" and len(rcv.calls) == 2
    finally:
        rt.close()
