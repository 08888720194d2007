"""Browser tests of /ui: Playwright driving the system Chromium (Debian package `chromium`; Playwright's
own browser download cannot be reached here) against a live keyed server with the bundled SmolLM2.

- budget: a dataset and real private answers through the API, then the gauge, burn-down and ledger
  table in the page against GET /v1/datasets/{id}/budget and /ledger;
- audit: a canary_mia audit (simulated votes, about a second) submitted from the form, progress
  watched to the end, the verdict checked against the API and the plots checked to render;
- tenant B's browser never sees tenant A's jobs or datasets, also through the API with its cookie;
- cookie flags, keyboard access, a phone-sized viewport.

Screenshots go to ``<pytest tmp dir>/ui-screenshots`` (or $DPICL_UI_SCREENSHOTS). Skipped, saying why,
when Chromium or Playwright is missing: `make test` installs Chromium (scripts/ensure_chromium.sh).
SQLite only: the pages are database-agnostic, and tests/ui/test_http_ui.py covers both databases.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import httpx
import pytest

from tests.conftest import make_database_url
from tests.ui.conftest import keyed_live_server

CHROMIUM = os.environ.get("DPICL_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # pragma: no cover - the [test] extra pins it
    sync_playwright = None

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(sync_playwright is None, reason="playwright is not installed (pip install -e '.[test]')"),
    pytest.mark.skipif(CHROMIUM is None, reason="no system Chromium: run scripts/ensure_chromium.sh "
                       "(apt-get install -y chromium) or set DPICL_CHROMIUM to its path"),
]

LABELS = ["billing", "shipping"]
EXEMPLARS = [("I was charged twice for one order", "billing"), ("Where is my parcel?", "shipping"),
             ("Refund the duplicate payment", "billing"), ("The package has not arrived", "shipping")]
ANSWER = {"mechanism": "rnm", "epsilon": 1.0, "delta": 1e-5, "partitions": 2, "shots_per_partition": 1}
AUDIT_CONFIG = {"target": {"type": "simulated", "params": {"epsilon": 1.0, "delta": 1e-5, "partitions": 4}},
                "trials": 400, "seed": 3, "power": {"alternatives": ["noise_quarter"]}}


@pytest.fixture(scope="module")
def server(tmp_path_factory, pg_databases, lm):
    url = make_database_url("sqlite", tmp_path_factory, pg_databases)
    keys = {t: (f"tenant-{t.lower()}", ["audit", "admin", "infer"]) for t in ("A", "B")}
    with keyed_live_server(url, keys, {lm.name: lm}, allow_seeded_noise=True) as srv:
        yield srv


@pytest.fixture(scope="module")
def browser():
    pw = sync_playwright().start()
    b = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                           args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"])
    yield b
    b.close()
    pw.stop()


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    d = Path(os.environ["DPICL_UI_SCREENSHOTS"]) if os.environ.get("DPICL_UI_SCREENSHOTS") else \
        tmp_path_factory.mktemp("ui-screenshots")
    d.mkdir(parents=True, exist_ok=True)
    print(f"\nscreenshots: {d}")
    return d


def _api(server, tenant: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=180, headers={"Authorization": f"Bearer {server.keys[tenant]}"})


def _login(browser, server, tenant: str, **ctx):
    context = browser.new_context(base_url=server.url, **ctx)
    page = context.new_page()
    page.goto("/ui/audits")
    assert "/ui/login" in page.url
    page.get_by_label("API key").fill(server.keys[tenant])
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/ui/audits")
    return context, page


@pytest.fixture(scope="module")
def tenant_a(server):
    """Tenant A's dataset with three real private answers (rnm, Gaussian noise) and a finished audit."""
    with _api(server, "A") as c:
        r = c.post("/v1/datasets", json={"name": "support-tickets", "labels": LABELS,
                                         "budget": {"epsilon": 6.0, "delta": 1e-5},
                                         "exemplars": [{"input": i, "output": o} for i, o in EXEMPLARS]})
        assert r.status_code == 201, r.text
        ds = r.json()["id"]
        for i, q in enumerate(["My card was charged two times", "No parcel yet", "Double charge again"]):
            r = c.post("/v1/private/classify", json={"dataset_id": ds, "query": q, "seed": i, **ANSWER})
            assert r.status_code == 200, r.text
    return {"dataset": ds}


def test_budget_page_matches_the_api(browser, server, tenant_a, shots):
    ds = tenant_a["dataset"]
    context, page = _login(browser, server, "A")
    try:
        cookie = next(c for c in context.cookies() if c["name"] == "dpicl_session")
        assert cookie["httpOnly"] and cookie["secure"] and cookie["sameSite"] == "Strict"
        assert "dpicl_session" not in page.evaluate("document.cookie")  # HttpOnly: no script can read it
        assert server.keys["A"] not in cookie["value"]

        page.get_by_role("link", name="Datasets & budgets").click()
        row = page.locator(f'[data-dataset-row="{ds}"]')
        expect(row).to_contain_text("support-tickets")
        expect(row.locator("[data-exemplar-count]")).to_have_text("4")
        for i, _ in EXEMPLARS:
            expect(page.locator("body")).not_to_contain_text(i)  # never exemplar text
        row.get_by_role("link", name="support-tickets").click()
        page.wait_for_url(f"**/ui/datasets/{ds}")

        with _api(server, "A") as c:
            budget = c.get(f"/v1/datasets/{ds}/budget").json()
            ledger = c.get(f"/v1/datasets/{ds}/ledger").json()["data"]
        assert budget["charges"] == 3 and len(ledger) == 3
        gauge = page.locator('svg[data-chart="gauge"]')
        assert float(gauge.get_attribute("data-spent")) == budget["epsilon_spent"]
        assert float(gauge.get_attribute("data-budget")) == budget["epsilon"] == 6.0
        fill = page.locator("svg[data-chart=gauge] .gauge-fill").bounding_box()
        track = page.locator("svg[data-chart=gauge] .gauge-bg").bounding_box()
        assert fill["width"] / track["width"] == pytest.approx(budget["epsilon_spent"] / budget["epsilon"], abs=0.01)
        expect(page.locator('[data-field="charges"]')).to_have_text("3")
        assert float(page.locator('[data-field="epsilon_remaining"]').get_attribute("data-value")) == \
            pytest.approx(budget["epsilon_remaining"], abs=1e-12)

        # The burn-down: budget at creation, then budget minus the ledger's composed spend after each
        # charge (not a running sum of per-answer epsilons), then the account now.
        pts = page.locator('svg[data-chart="burndown"] circle[data-y]')
        ys = [float(pts.nth(i).get_attribute("data-y")) for i in range(pts.count())]
        want = [6.0] + [6.0 - e["epsilon_spent_after"] for e in ledger] + [6.0 - budget["epsilon_spent"]]
        assert ys == pytest.approx(want, abs=1e-12)
        xs = [float(pts.nth(i).get_attribute("data-x")) for i in range(pts.count())]
        assert xs == sorted(xs) and pts.first.bounding_box()["width"] > 0
        assert page.locator('svg[data-chart="burndown"] polyline').first.get_attribute("points").count(",") >= 5
        for e in ledger:
            expect(page.locator(f'[data-ledger-entry="{e["id"]}"]')).to_contain_text("rnm")
        forecast = int(page.locator('[data-field="answers_remaining"]').get_attribute("data-value"))
        assert forecast >= int(budget["epsilon_remaining"] // ANSWER["epsilon"])  # composed: at least the naive count
        page.screenshot(path=str(shots / "budget.png"), full_page=True)
    finally:
        context.close()


def test_submit_an_audit_from_the_form_and_watch_it_finish(browser, server, shots):
    context, page = _login(browser, server, "A")
    try:
        page.get_by_role("link", name="New audit").first.click()
        page.get_by_label("Kind").select_option("canary_mia")
        page.get_by_label("Config (JSON object)").fill(json.dumps(AUDIT_CONFIG))
        page.get_by_label("Claimed epsilon (optional)").fill("1")
        page.get_by_role("button", name="Submit audit").click()
        page.wait_for_url("**/ui/audits/job_*")
        job_id = page.url.rsplit("/", 1)[1]
        # Live progress: the page polls the JSON API and re-renders when the job is done.
        status = page.locator(f'[data-job-id="{job_id}"]')
        expect(status).to_have_attribute("data-status", "succeeded", timeout=60_000)
        expect(status.locator("progress")).to_have_attribute("value", "100.0")
        with _api(server, "A") as c:
            job = c.get(f"/v1/audits/{job_id}").json()
        assert job["status"] == "succeeded" and job["verdict"] in ("pass", "inconclusive")
        expect(page.locator("#verdict [data-verdict]")).to_have_attribute("data-verdict", job["verdict"])
        expect(page.locator("#verdict-reason")).to_contain_text(job["verdict_reason"])
        for chart in ("roc", "bound", "power", "histogram"):
            svg = page.locator(f'svg[data-chart="{chart}"]')
            box = svg.bounding_box()
            assert box and box["width"] > 100 and box["height"] > 50, chart
            assert svg.locator("polyline, rect.bar, circle").count() > 0, chart
        # The ROC's attack points sit where the API's estimates say.
        pts = page.locator('svg[data-chart="roc"] circle')
        got = sorted((float(pts.nth(i).get_attribute("data-x")), float(pts.nth(i).get_attribute("data-y")))
                     for i in range(pts.count()))
        want = sorted((e["fpr"], e["tpr"]) for e in job["result"]["estimates"].values())
        assert got == want  # data-x / data-y carry the floats exactly (repr)
        # The job's own PNG figures load (non-empty images).
        img = page.locator('img[data-artifact="roc.png"]')
        img.scroll_into_view_if_needed()
        expect(img).to_be_visible()
        page.wait_for_function("document.querySelector('img[data-artifact=\"roc.png\"]').naturalWidth > 0")
        expect(page.locator("#config-json")).to_contain_text('"simulated"')
        page.screenshot(path=str(shots / "audit_job.png"), full_page=True)
        # The list shows it with its verdict and bound vs claim.
        page.get_by_role("link", name="Audits", exact=True).click()
        row = page.locator(f'[data-job-row="{job_id}"]')
        expect(row.locator("[data-verdict]")).to_have_attribute("data-verdict", job["verdict"])
        expect(row.locator(".bvc")).to_have_attribute("data-bound", str(job["result"]["epsilon"]))
        page.get_by_label("Verdict").select_option("violation")
        page.get_by_role("button", name="Filter").click()
        expect(page.locator(f'[data-job-row="{job_id}"]')).to_have_count(0)
        page.screenshot(path=str(shots / "audits_filtered.png"), full_page=True)
    finally:
        context.close()


def test_progress_is_live_and_cancel_works(browser, server, shots):
    with _api(server, "A") as c:
        slow = c.post("/v1/audits", json={"kind": "sleep", "config": {"steps": 16, "step_seconds": 0.15}}).json()
        endless = c.post("/v1/audits", json={"kind": "sleep", "config": {"steps": 1000, "step_seconds": 0.1}}).json()
    context, page = _login(browser, server, "A")
    try:
        page.goto(f"/ui/audits/{slow['id']}")
        # The script updates the bar in place (no reload) while the job runs...
        page.wait_for_function(
            "id => { const e = document.querySelector(`[data-job-id='${id}']`); const v = e.querySelector('progress').value;"
            " return e.dataset.status === 'running' && v > 0 && v < 100; }", arg=slow["id"], timeout=20_000)
        # ...and the page re-renders when it is done.
        expect(page.locator(f'[data-job-id="{slow["id"]}"]')).to_have_attribute("data-status", "succeeded",
                                                                              timeout=30_000)
        page.goto(f"/ui/audits/{endless['id']}")
        page.wait_for_function("id => document.querySelector(`[data-job-id='${id}']`).dataset.status === 'running'",
                               arg=endless["id"], timeout=20_000)
        page.get_by_role("button", name="Cancel").click()
        expect(page.get_by_role("status")).to_contain_text("Cancellation requested")
        expect(page.locator(f'[data-job-id="{endless["id"]}"]')).to_have_attribute("data-status", "cancelled",
                                                                                 timeout=20_000)
        with _api(server, "A") as c:
            assert c.get(f"/v1/audits/{endless['id']}").json()["status"] == "cancelled"
        expect(page.get_by_role("button", name="Cancel")).to_have_count(0)
        page.screenshot(path=str(shots / "cancelled.png"), full_page=True)
    finally:
        context.close()


def test_tenant_b_never_sees_tenant_a(browser, server, tenant_a, shots):
    with _api(server, "A") as c:
        a_jobs = [j["id"] for j in c.get("/v1/audits", params={"limit": 100}).json()["data"]]
    assert a_jobs, "tenant A has jobs (the form test ran first)"
    context, page = _login(browser, server, "B")
    try:
        expect(page.locator("[data-tenant]")).to_have_attribute("data-tenant", "tenant-b")
        body = page.locator("body").inner_text()
        assert not any(j in body for j in a_jobs) and page.locator("[data-job-row]").count() == 0
        page.goto("/ui/datasets")
        expect(page.locator("body")).not_to_contain_text("support-tickets")
        r = page.goto(f"/ui/audits/{a_jobs[0]}")
        assert r.status == 404
        r = page.goto(f"/ui/datasets/{tenant_a['dataset']}")
        assert r.status == 404
        # The JSON API with B's session cookie answers for B only.
        status = page.evaluate("id => fetch('/v1/audits/' + id).then(r => r.status)", a_jobs[0])
        assert status == 404
        page.screenshot(path=str(shots / "tenant_b.png"), full_page=True)
    finally:
        context.close()


def test_keyboard_and_phone_layout(browser, server, shots):
    context, page = _login(browser, server, "A", viewport={"width": 390, "height": 844}, is_mobile=True)
    try:
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.textContent") == "Skip to content"
        page.keyboard.press("Enter")
        assert page.evaluate("location.hash") == "#main"
        # No sideways scrolling on a phone: tables stack into cards.
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
        page.screenshot(path=str(shots / "audits_phone.png"), full_page=True)
        page.goto("/ui/audits/new")
        page.get_by_label("Config (JSON object)").fill("{not json")
        page.get_by_role("button", name="Submit audit").click()
        err = page.locator('[data-error-for="config"]')
        expect(err).to_contain_text("not valid JSON")
        assert page.get_by_label("Config (JSON object)").get_attribute("aria-invalid") == "true"
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    finally:
        context.close()


def test_api_docs_render_offline(browser, server, shots):
    """/docs (Swagger UI) and /redoc render with every request off this server refused (as on a machine with
    no internet: FastAPI's default pages load from a CDN and stay blank); / leads to the dashboard."""
    context = browser.new_context(base_url=server.url)
    outside: list[str] = []

    def only_this_server(route):
        if route.request.url.startswith(server.url):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    context.route("**/*", only_this_server)
    page = context.new_page()
    page.goto("/docs")
    expect(page.locator(".swagger-ui .opblock").first).to_be_visible(timeout=30_000)
    expect(page.get_by_text("/v1/private/classify").first).to_be_visible()
    page.screenshot(path=str(shots / "apidocs-swagger.png"))
    page.goto("/redoc")
    expect(page.get_by_role("heading", name="dpicl").first).to_be_visible(timeout=30_000)
    expect(page.get_by_text("/v1/private/classify").first).to_be_attached()
    page.screenshot(path=str(shots / "apidocs-redoc.png"))
    page.goto("/")
    assert "/ui" in page.url
    context.close()
    assert outside == [], outside
