"""/ui over plain HTTP against a live keyed server (SQLite and PostgreSQL): login and the session
cookie, CSRF on every form, tenant isolation, form errors next to their field, redaction,
budget numbers against the JSON API. The browser half is tests/ui/test_browser_dashboard.py."""

from __future__ import annotations

import html
import json
import re

import pytest

from tests.conftest import running_app
from tests.jobs.conftest import job_settings, wait_job
from tests.ui.conftest import CANARY, api

EXEMPLAR_TEXT = "my secret exemplar about the zebra invoice 4711"


def _textarea(page: str) -> str:
    return html.unescape(re.search(r'<textarea id="config"[^>]*>(.*?)</textarea>', page, re.S).group(1))


def _dataset(server, key="A", name="tickets") -> str:
    with api(server, key) as c:
        r = c.post("/v1/datasets", json={
            "name": name, "labels": ["billing", "shipping"], "budget": {"epsilon": 8.0, "delta": 1e-5},
            "exemplars": [{"input": EXEMPLAR_TEXT, "output": "billing"},
                          {"input": "where is the parcel", "output": "shipping"},
                          {"input": "charged twice", "output": "billing"}]})
        assert r.status_code == 201, r.text
        return r.json()["id"]


def _job(server, key="A", **extra) -> dict:
    with api(server, key) as c:
        r = c.post("/v1/audits", json={"kind": "canary_mia", "config": CANARY, "claimed_epsilon": 1.0, **extra})
        assert r.status_code == 202, r.text
        return wait_job(c, r.json()["id"], timeout=60)


def test_login_sets_a_strict_httponly_secure_cookie_and_never_echoes_the_key(keyed_server, ui):
    c = ui()
    r = c.get("/ui/audits")
    assert r.status_code == 303 and r.headers["location"].startswith("/ui/login?next=%2Fui%2Faudits")
    token = c.csrf("/ui/login")
    attrs = c.last_set_cookie.lower()
    assert "httponly" in attrs and "secure" in attrs and "samesite=strict" in attrs and "path=/" in attrs
    wrong = keyed_server.keys["A"][:-4] + "XXXX"
    r = c.post("/ui/login", {"csrf_token": token, "api_key": wrong, "next": "/ui/audits"})
    assert r.status_code == 401 and "invalid or revoked" in r.text
    assert wrong not in r.text and wrong.split("_", 2)[2] not in r.text
    key = keyed_server.keys["A"]
    r = c.post("/ui/login", {"csrf_token": token, "api_key": key, "next": "https://evil.example/"})
    assert r.status_code == 303 and r.headers["location"] == "/ui/audits"  # no open redirect
    assert key not in c.last_set_cookie and key.split("_", 2)[2] not in c.last_set_cookie
    page = c.get("/ui/audits")
    assert page.status_code == 200 and 'data-tenant="tenant-a"' in page.text and key not in page.text
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert page.headers["cache-control"] == "no-store"
    # Logging out needs the form's token; then the pages need a login again.
    out = c.post("/ui/logout", {"csrf_token": re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)})
    assert out.status_code == 303 and c.cookie is None
    assert c.get("/ui/audits").status_code == 303


def test_every_form_needs_its_csrf_token(keyed_server, ui):
    a = ui("A")
    with api(keyed_server, "A") as c:
        running = c.post("/v1/audits", json={"kind": "sleep", "config": {"steps": 200, "step_seconds": 0.05}}).json()
    good = a.csrf()
    other = ui("B").csrf()  # a valid token of another session
    forms = [("/ui/audits/new", {"kind": "sleep", "config": "{}"}),
             (f"/ui/audits/{running['id']}/cancel", {}),
             ("/ui/logout", {}),
             ("/ui/login", {"api_key": keyed_server.keys["A"]})]
    for path, data in forms:
        for token in (None, "", "x" * 64, other):
            body = dict(data, **({"csrf_token": token} if token is not None else {}))
            r = a.post(path, body)
            assert r.status_code == 403 and "security token" in r.text, (path, token, r.status_code)
        # The right token from a foreign Origin is refused too.
        r = a.post(path, dict(data, csrf_token=good), headers={"Origin": "https://evil.example"})
        assert r.status_code == 403, path
    with api(keyed_server, "A") as c:
        assert c.get(f"/v1/audits/{running['id']}").json()["cancel_requested"] is False
        assert c.get("/v1/audits", params={"limit": 100}).json()["data"][0]["id"] == running["id"]
        c.post(f"/v1/audits/{running['id']}/cancel")
    assert a.get("/ui/audits").status_code == 200  # still logged in: the refused logout did nothing


def test_tenant_b_never_sees_tenant_a(keyed_server, ui):
    job = _job(keyed_server, "A")
    ds = _dataset(keyed_server, "A", name="a-private-set")
    a, b = ui("A"), ui("B")
    assert job["id"] in a.get("/ui/audits").text and "a-private-set" in a.get("/ui/datasets").text
    assert a.get(f"/ui/audits/{job['id']}").status_code == 200
    listing = b.get("/ui/audits").text
    assert job["id"] not in listing and "a-private-set" not in b.get("/ui/datasets").text
    for path in (f"/ui/audits/{job['id']}", f"/ui/audits/{job['id']}/artifacts/roc.png",
                 f"/ui/datasets/{ds}", f"/ui/audits/{job['id']}/artifacts/result.json"):
        r = b.get(path)
        assert r.status_code == 404 and job["id"] not in r.text and "a-private-set" not in r.text, path
    r = b.get(f"/ui/audits/new?rerun={job['id']}")
    assert r.status_code == 200 and "simulated" not in _textarea(r.text)  # not prefilled from A's job
    r = b.post(f"/ui/audits/{job['id']}/cancel", {"csrf_token": b.csrf()})
    assert r.status_code == 404
    # The JSON API with the session cookie: GETs answer for the session's tenant, writes need a key.
    assert a.get(f"/v1/audits/{job['id']}").status_code == 200
    assert b.get(f"/v1/audits/{job['id']}").status_code == 404
    assert b.get(f"/v1/datasets/{ds}/budget").status_code == 404
    r = a.http.post("/v1/audits", json={"kind": "sleep", "config": {}}, headers={"Cookie": f"dpicl_session={a.cookie}"})
    assert r.status_code == 401


def test_revoking_the_key_ends_the_session(keyed_server, ui):
    from app.api.auth import create_key
    from app.store import keys_repo

    rt = keyed_server.runtime
    with rt.db.session() as s:
        key, row = create_key(s, tenant_id="tenant-a", name="temp", scopes=["audit"])
        s.commit()
        key_id = row.id
    keyed_server.keys["temp"] = key
    c = ui("temp")
    assert c.get("/ui/audits").status_code == 200 and c.get("/v1/audits").status_code == 200
    with rt.db.session() as s:
        assert keys_repo.revoke(s, key_id)
        s.commit()
    r = c.get("/ui/audits")
    assert r.status_code == 303 and "notice=relogin" in r.headers["location"]
    assert c.get("/v1/audits").status_code == 401


def test_scopes_are_the_apis(keyed_server, ui):
    c = ui("A-infer")
    r = c.get("/ui/audits")
    assert r.status_code == 403 and "lacks the scope" in r.text
    assert c.get("/ui/audits/new").status_code == 403
    assert c.get("/ui/datasets").status_code == 200


def _form_errors(text: str) -> dict[str, str]:
    return {k: html.unescape(v) for k, v in re.findall(r'data-error-for="(\w+)">([^<]*)<', text)}


@pytest.mark.parametrize("form, field, api_body", [
    ({"kind": "canary_mia", "config": '{"target": {"type": "simulated", "bug": "sloppy"}}'}, "config",
     {"kind": "canary_mia", "config": {"target": {"type": "simulated", "bug": "sloppy"}}}),
    ({"kind": "canary_mia", "config": '{"query": "telepathy"}'}, "config",
     {"kind": "canary_mia", "config": {"query": "telepathy"}}),
    ({"kind": "no-such-kind", "config": "{}"}, "kind", {"kind": "no-such-kind", "config": {}}),
    ({"kind": "sleep", "config": "{}", "claimed_delta": "2"}, "claimed_delta",
     {"kind": "sleep", "config": {}, "claimed_delta": 2}),
    ({"kind": "sleep", "config": "{}", "claimed_epsilon": "-1"}, "claimed_epsilon",
     {"kind": "sleep", "config": {}, "claimed_epsilon": -1}),
    ({"kind": "sleep", "config": "{}", "webhook_url": "not a url"}, "webhook_url",
     {"kind": "sleep", "config": {}, "webhook_url": "not a url"}),
])
def test_form_errors_are_the_apis_422_next_to_the_field(keyed_server, ui, form, field, api_body):
    c = ui("A")
    r = c.post("/ui/audits/new", {"csrf_token": c.csrf(), **form})
    with api(keyed_server, "A") as a:
        want = a.post("/v1/audits", json=api_body)
    assert want.status_code == 422
    errors = _form_errors(r.text)
    assert r.status_code == 422 and list(errors) == [field], errors
    assert errors[field] == want.json()["error"]["message"]
    assert f'id="{field}"' in r.text and 'aria-invalid="true"' in r.text
    if form["config"] != "{}":  # the typed config is kept in the form
        assert _textarea(r.text) == form["config"]


def test_invalid_json_config_is_an_error_on_the_config_field(ui):
    c = ui("A")
    r = c.post("/ui/audits/new", {"csrf_token": c.csrf(), "kind": "sleep", "config": '{"steps": 3,'})
    assert r.status_code == 422 and list(_form_errors(r.text)) == ["config"]
    assert "not valid JSON (line 1" in _form_errors(r.text)["config"]


def test_form_submits_once_and_redirects_to_the_job(keyed_server, ui):
    c = ui("A")
    page = c.get("/ui/audits/new").text
    nonce = re.search(r'name="nonce" value="([^"]+)"', page).group(1)
    body = {"csrf_token": c.csrf(), "nonce": nonce, "kind": "canary_mia",
            "config": '{"target": {"type": "simulated", "params": {"epsilon": 1, "delta": 1e-5, "partitions": 4}}, '
                      '"trials": 400, "seed": 1}', "claimed_epsilon": "1"}
    r1 = c.post("/ui/audits/new", body)
    r2 = c.post("/ui/audits/new", body)  # a double click: the form's nonce is the Idempotency-Key
    assert r1.status_code == r2.status_code == 303 and r1.headers["location"] == r2.headers["location"]
    job_id = r1.headers["location"].rsplit("/", 1)[1]
    with api(keyed_server, "A") as a:
        j = wait_job(a, job_id, timeout=60)
    assert j["claimed_epsilon"] == 1.0 and j["verdict"] in ("pass", "inconclusive")
    page = c.get(f"/ui/audits/{job_id}").text
    for chart in ("roc", "bound", "histogram"):
        assert f'data-chart="{chart}"' in page
    assert f'data-verdict="{j["verdict"]}"' in page and html.escape(j["verdict_reason"], quote=False) in page


def test_job_page_shows_power_bound_and_artifacts_and_rerun(keyed_server, ui):
    job = _job(keyed_server, "A")
    c = ui("A")
    page = c.get(f"/ui/audits/{job['id']}").text
    r = job["result"]
    assert 'data-chart="power"' in page
    for name, alt in r["power"]["alternatives"].items():
        assert f'data-name="{name}" data-value="{float(alt["detection"])!r}"' in page
    bb = r["estimates"]["black-box"]
    assert f'data-name="black-box lower bound" data-value="{float(bb["epsilon_lower"])!r}"' in page
    assert f'data-bound="{r["epsilon"]}"' in page
    for a in job["artifacts"]:
        assert f'/ui/audits/{job["id"]}/artifacts/{a["name"]}' in page
        got = c.get(f'/ui/audits/{job["id"]}/artifacts/{a["name"]}')
        assert got.status_code == 200 and got.headers["content-disposition"].startswith("attachment")
    img = c.get(f'/ui/audits/{job["id"]}/artifacts/roc.png?inline=1')
    assert img.headers["content-disposition"].startswith("inline") and img.content[:4] == b"\x89PNG"
    rerun = c.get(f"/ui/audits/new?rerun={job['id']}").text
    assert json.loads(_textarea(rerun)) == job["config"] and 'value="1.0"' in rerun


def test_config_secrets_are_redacted(keyed_server, ui):
    secret = "sk-very-secret-target-key-0123456789"
    with api(keyed_server, "A") as a:
        r = a.post("/v1/audits", json={"kind": "canary_mia", "config": {
            "target": {"type": "remote", "url": "http://127.0.0.1:9", "api_key": secret, "mechanism": "rnm",
                       "params": {"epsilon": 1, "delta": 1e-5, "partitions": 2}},
            "trials": 20, "seed": 1}})
        assert r.status_code == 202, r.text
        job_id = r.json()["id"]
    c = ui("A")
    page = c.get(f"/ui/audits/{job_id}").text
    assert secret not in page and "[redacted]" in page
    rerun = c.get(f"/ui/audits/new?rerun={job_id}").text
    assert secret not in rerun and "[redacted]" in rerun and "put the target" in rerun


def test_budget_page_numbers_are_the_apis_and_no_exemplar_text(keyed_server, ui):
    from app.budget.ledger import Ledger
    from app.privacy.accountant import PrivacyCost
    from app.privacy.rdp import DEFAULT_ORDERS

    ds = _dataset(keyed_server, "A")
    db = keyed_server.runtime.db
    gauss = PrivacyCost(epsilon=1.2, delta=1e-6, adjacency="replace-one", mechanism="rnm",
                        orders=tuple(DEFAULT_ORDERS), rdp=tuple(0.05 * a for a in DEFAULT_ORDERS))
    for i in range(4):  # the ledger's own charge path (the browser test charges through real answers)
        with db.session() as s:
            Ledger().charge(s, dataset_id=ds, tenant_id="tenant-a", cost=gauss, mechanism="rnm", params={"i": i},
                            response={"label": "billing"}, idempotency_key=f"k{i}")
            s.commit()
    c = ui("A")
    page = c.get(f"/ui/datasets/{ds}").text
    with api(keyed_server, "A") as a:
        budget = a.get(f"/v1/datasets/{ds}/budget").json()
        entries = a.get(f"/v1/datasets/{ds}/ledger").json()["data"]
    assert budget["charges"] == 4 and budget["epsilon_spent"] < 4 * 1.2  # composed, not summed
    assert f'data-spent="{budget["epsilon_spent"]!r}" data-budget="{budget["epsilon"]!r}"' in page
    points = re.findall(r'data-x="[^"]+" data-y="([^"]+)"', page)
    want = [8.0] + [8.0 - e["epsilon_spent_after"] for e in entries] + [8.0 - budget["epsilon_spent"]]
    assert [float(p) for p in points] == pytest.approx(want, abs=1e-12)
    for e in entries:
        assert f'data-ledger-entry="{e["id"]}"' in page
    assert re.search(r'data-field="answers_remaining" data-value="(\d+)"', page)
    assert EXEMPLAR_TEXT not in page and EXEMPLAR_TEXT not in c.get("/ui/datasets").text
    assert 'data-exemplar-count="3"' in page and "billing (2)" in page


def test_open_mode_shows_the_health_warning(database_url):
    with running_app(job_settings(database_url, auth_mode="open"), timeout=30) as c:
        warning = c.get("/v1/health").json()["auth"]["warning"]
        assert warning
        for path in ("/ui/audits", "/ui/datasets", "/ui/audits/new"):
            page = c.get(path)
            assert page.status_code == 200 and 'id="open-mode-banner"' in page.text
            assert html.escape(warning, quote=False) in page.text
        assert c.get("/ui/login", follow_redirects=False).status_code == 303  # nothing to log in to


def test_static_assets_are_versioned_package_files(keyed_server, ui):
    c = ui()
    for name in ("ui.2.css", "ui.2.js"):
        r = c.get(f"/ui/static/{name}")
        assert r.status_code == 200 and "immutable" in r.headers["cache-control"]
    assert c.get("/ui/static/../session.py").status_code == 404
    assert c.get("/ui/static/ui.1.css").status_code == 404


def test_login_warns_when_a_secure_cookie_cannot_stick(ui):
    c = ui()
    assert "drop the Secure session cookie" not in c.get("/ui/login").text  # loopback keeps it
    r = c.get("/ui/login", headers={"Host": "dpicl.internal.example"})
    assert r.status_code == 200 and "drop the Secure session cookie" in r.text


def test_lists_show_why_a_job_failed_and_the_ledgers_idempotency_keys(keyed_server, ui):
    from app.budget.ledger import Ledger
    from app.privacy.accountant import PrivacyCost

    with api(keyed_server, "A") as c:
        r = c.post("/v1/audits", json={"kind": "sleep", "config": {"steps": 1, "fail_at_step": 0,
                                                                    "fail_message": "no target answered"}})
        assert r.status_code == 202, r.text
        job = wait_job(c, r.json()["id"], timeout=60)
    assert job["status"] == "failed"
    page = ui("A").get("/ui/audits").text
    row = page[page.index(f'data-job-row="{job["id"]}"'):]
    row = row[:row.index("</tr>")]
    assert 'data-role="error"' in row and "no target answered" in row
    # the visible time is whole seconds; the datetime attribute keeps the machine-readable instant
    shown = re.search(r"<time datetime=\"[^\"]+\">([^<]*)</time>", row)
    assert shown and re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", shown.group(1)), row

    ds = _dataset(keyed_server, "A", name="keys")
    with keyed_server.runtime.db.session() as s:
        Ledger().charge(s, dataset_id=ds, tenant_id="tenant-a", mechanism="rnm", params={}, response={"label": "x"},
                        cost=PrivacyCost(epsilon=0.5, delta=0.0, adjacency="replace-one", mechanism="rnm"),
                        idempotency_key="client-q-42")
        s.commit()
    ledger = ui("A").get(f"/ui/datasets/{ds}").text
    assert "Idempotency-Key" in ledger and "<code>client-q-42</code>" in ledger


def test_failed_job_shows_its_reason_in_the_list(keyed_server, ui):
    """A gateway that refuses connections: the job fails target_unavailable, and the /ui list says why."""
    cfg = {"target": {"type": "remote", "url": "http://127.0.0.1:9", "retries": 0,
                      "params": {"epsilon": 1.0, "partitions": 2, "shots_per_partition": 1}},
           "dataset": {"exemplars": [{"input": f"x {i}", "output": "a"} for i in range(4)], "labels": ["a", "b"],
                       "size": 4}, "canary": {"type": "hex", "label": "b"}, "threat_model": "black-box"}
    with api(keyed_server, "A") as c:
        r = c.post("/v1/audits", json={"kind": "canary_mia", "config": cfg, "claimed_epsilon": 1.0})
        assert r.status_code == 202, r.text
        j = wait_job(c, r.json()["id"], timeout=60)
    assert j["status"] == "failed", j
    page = ui("A").get("/ui/audits?status=failed").text
    row = page[page.index(f'data-job-row="{j["id"]}"'):]
    row = row[:row.index("</tr>")]
    assert 'data-role="error"' in row and html.escape(j["error"]["message"], quote=False) in row


def test_a_repeated_key_in_the_config_is_an_error_on_the_config_field(ui):
    # app.jsonbody.loads, as the API parses bodies: before, the last "steps" won silently
    c = ui("A")
    r = c.post("/ui/audits/new", {"csrf_token": c.csrf(), "kind": "sleep", "config": '{"steps": 1, "steps": 9}'})
    assert r.status_code == 422 and _form_errors(r.text) == {
        "config": "config.steps: the key appears more than once in a JSON object"}


def test_an_integer_too_long_to_read_is_an_error_on_the_config_field(ui):
    # before: json.loads' ValueError (int()'s 4300-digit limit) escaped the form handler (a 500)
    c = ui("A")
    r = c.post("/ui/audits/new", {"csrf_token": c.csrf(), "kind": "sleep", "config": '{"steps": %s}' % ("9" * 5000)})
    assert r.status_code == 422 and _form_errors(r.text) == {
        "config": "config.steps: a number with more than 4300 digits is not accepted"}, r.text[:300]


def test_a_deeply_nested_config_is_an_error_on_the_config_field(ui):
    # before: json.loads' RecursionError escaped the form handler (a 500)
    c = ui("A")
    r = c.post("/ui/audits/new", {"csrf_token": c.csrf(), "kind": "sleep", "config": "[" * 60_000})
    assert r.status_code == 422 and list(_form_errors(r.text)) == ["config"], r.text[:300]
