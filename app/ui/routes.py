"""The web dashboard at /ui: server-rendered pages over the same data, keys and tenants as the API.

Pages read through the API's own functions (job resources with their redaction, dataset and budget
objects, the ledger's composed spend) for the caller's tenant only; forms post with a CSRF token
(app/ui/session.py); the audit form submits through the API's own ``submit_audit`` so its 422s,
naming the field, are shown next to that field.
"""

from __future__ import annotations

import json
import math
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from pydantic import ValidationError

from app import __version__
from app.api.json_route import JSONRoute
from app.jsonbody import BodyValueError, loads
from app.api.principal import OPEN_MODE_WARNING, SCOPES, Principal, auth_mode, principal_for_key
from app.api.errors import APIError, validation_error
from app.api.input_guard import CODE as BAD_TEXT
from app.badtext import check_text, text_problem
from app.ui import session as sess
from app.ui import views

HERE = Path(__file__).parent
STATIC_VERSION = "2"  # bump with every change of app/ui/static/*: the files are cached for a year
STATIC = {f"ui.{STATIC_VERSION}.css": "text/css; charset=utf-8", f"ui.{STATIC_VERSION}.js": "text/javascript; charset=utf-8"}
MAX_FORM_BYTES = 256 * 1024

templates = Jinja2Templates(directory=str(HERE / "templates"))
templates.env.globals.update(static_version=STATIC_VERSION, version=__version__)
templates.env.filters["fmt"] = lambda v, p=4: "—" if v is None else (f"{v:.{p}g}" if isinstance(v, float) else str(v))
templates.env.filters["when"] = lambda v: "—" if not v else views.when(str(v))
templates.env.filters["pretty"] = lambda v: json.dumps(v, indent=2, sort_keys=False)

router = APIRouter(route_class=JSONRoute, prefix="/ui", include_in_schema=False)

SECURITY_HEADERS = {
    # No inline script or style anywhere: the CSP forbids them, so injected markup cannot run.
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                               "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
NOTICES = {"cancel_finished": "This job had already finished; there was nothing to cancel.",
           "cancelled": "Cancellation requested: a running job stops at its next progress point.",
           "logged_out": "You are logged out.",
           "relogin": "Your session has ended or its key was revoked: log in again."}


class _Page:
    """The caller of one page: session (maybe new), principal (None: must log in), open mode."""

    def __init__(self, request: Request) -> None:
        self.request = request
        self.session = sess.read_session(request) or sess.new_session()
        self.principal: Principal | None = None
        self.open = False

    async def resolve(self) -> None:
        rt = self.request.app.state.runtime
        self.open = await run_in_threadpool(auth_mode, rt) == "open"
        self.principal = await run_in_threadpool(sess.session_principal, self.request, self.session)

    def render(self, template: str, status: int = 200, **ctx: Any) -> Response:
        ctx.update(request=self.request, principal=self.principal, open_mode=self.open,
                   open_warning=OPEN_MODE_WARNING if self.open else None,
                   csrf=sess.csrf_token(self.request, self.session), notice=NOTICES.get(
                       self.request.query_params.get("notice", "")))
        resp = templates.TemplateResponse(self.request, template, ctx, status_code=status)
        return self.finish(resp)

    def finish(self, resp: Response) -> Response:
        if self.session.new:
            sess.set_cookie(self.request, resp, self.session)
        resp.headers.update(SECURITY_HEADERS)
        return resp

    def redirect(self, url: str) -> Response:
        return self.finish(RedirectResponse(url, status_code=303))


async def _page(request: Request, *scopes: str) -> tuple[_Page, Response | None]:
    """The page's caller, or the response to send instead (login redirect, 403)."""
    page = _Page(request)
    await page.resolve()
    if page.principal is None:
        had_key = bool(page.session.key_prefix)
        nxt = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        q = {"next": nxt, **({"notice": "relogin"} if had_key else {})}
        if had_key:  # a revoked key or an expired session: drop it
            page.session = sess.new_session()
        return page, page.redirect(f"/ui/login?{urlencode(q)}")
    if scopes and not any(page.principal.has(s) for s in scopes):
        return page, page.render("error.html", 403, title="Not allowed",
                                 message=f"Your API key lacks the scope {' or '.join(repr(s) for s in scopes)}.")
    return page, None


async def _form(request: Request) -> dict[str, str]:
    """A urlencoded form (the only kind these pages post); the last value of each field."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise APIError(413, "form too large", param="body")
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if not body:
        return {}
    if ctype != "application/x-www-form-urlencoded":
        raise APIError(415, "forms are posted as application/x-www-form-urlencoded", param="content-type")
    form = {k: v[-1] for k, v in parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True).items()}
    for k, v in form.items():  # NUL / lone surrogates: the same 422 as the API's (app.api.input_guard)
        why = text_problem(k)
        if why:
            raise APIError(422, f"form: a field name {why}", param="form", code=BAD_TEXT)
        check_text(v, k)
    return form


def _csrf_failed(page: _Page) -> Response:
    return page.render("error.html", 403, title="Form expired",
                       message="The form's security token did not match this session (it may have expired, or the "
                               "form came from another site). Reload the page and submit it again.")


def _cookie_will_be_dropped(request: Request) -> bool:
    """A Secure cookie over plain http is kept by browsers for localhost / loopback only: say so at login
    rather than failing every form with an expired token."""
    secure = request.app.state.runtime.settings.ui_cookie_secure
    host = (request.url.hostname or "").lower()
    return secure and request.url.scheme != "https" and host not in ("localhost", "127.0.0.1", "::1", "[::1]")


def _safe_next(url: str | None) -> str:
    # Only local /ui paths: never an open redirect.
    if url and url.startswith("/ui") and not url.startswith("//") and "\\" not in url:
        return url
    return "/ui/audits"


# ---------------------------------------------------------------------------
# Static assets and login
# ---------------------------------------------------------------------------


@router.get("/static/{name}")
def static(name: str):
    media = STATIC.get(name)
    if media is None:
        raise APIError(404, "no such asset", code="not_found")
    path = HERE / "static" / name
    return Response(path.read_bytes(), media_type=media, headers={
        "Cache-Control": "public, max-age=31536000, immutable", "X-Content-Type-Options": "nosniff"})


@router.get("")
@router.get("/")
async def home(request: Request):
    return RedirectResponse("/ui/audits", status_code=303)


@router.get("/login")
async def login_form(request: Request, next: str | None = None):
    page = _Page(request)
    await page.resolve()
    if page.open:
        return page.redirect(_safe_next(next))
    return page.render("login.html", next=_safe_next(next), error=None, insecure=_cookie_will_be_dropped(request))


@router.post("/login")
async def login(request: Request):
    page = _Page(request)
    await page.resolve()
    form = await _form(request)
    if not sess.csrf_ok(request, None if page.session.new else page.session, form.get("csrf_token")):
        return _csrf_failed(page)
    nxt = _safe_next(form.get("next"))
    key = (form.get("api_key") or "").strip()
    rt = request.app.state.runtime
    who = await run_in_threadpool(principal_for_key, rt, key) if key else None
    if who is None:
        # The key is never echoed back: the field is rendered empty.
        return page.render("login.html", 401, next=nxt, insecure=_cookie_will_be_dropped(request),
                           error="This API key is invalid or revoked." if key else "Enter an API key.")
    # A fresh session id at login (no session fixation), holding the key's prefix and hash only.
    page.session = sess.new_session(key)
    page.principal = who
    return page.redirect(nxt)


@router.post("/logout")
async def logout(request: Request):
    page = _Page(request)
    form = await _form(request)
    if not sess.csrf_ok(request, None if page.session.new else page.session, form.get("csrf_token")):
        await page.resolve()
        return _csrf_failed(page)
    resp = RedirectResponse("/ui/login?notice=logged_out", status_code=303)
    sess.clear_cookie(request, resp)
    resp.headers.update(SECURITY_HEADERS)
    return resp


# ---------------------------------------------------------------------------
# Audits
# ---------------------------------------------------------------------------

AUDITORS = ("audit", "admin")
STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")
VERDICTS = ("pass", "violation", "inconclusive", "none")


@router.get("/audits")
async def audits(request: Request, kind: str = "", status: str = "", verdict: str = "", after: str = ""):
    page, stop = await _page(request, *AUDITORS)
    if stop:
        return stop
    from app.jobs import registry
    from app.jobs import repository as repo
    from app.jobs.resource import attach_config_heads, attach_queues, job_resource
    from app.jobs.service import job_slots

    rt = request.app.state.runtime
    tenant = page.principal.tenant_id
    kinds = sorted(registry.available_kinds(rt.settings))
    status = status if status in STATUSES else ""
    verdict = verdict if verdict in VERDICTS else ""

    def _load():
        with rt.db.session() as s:
            try:
                jobs, more = repo.list_jobs(s, tenant_id=tenant, kind=kind[:64] or None, status=status or None,
                                            limit=100, after=after[:64] or None, with_config=False)
            except KeyError:
                jobs, more = [], False
            index = repo.artifact_index(s, [j.id for j in jobs])
            out = [job_resource(j, index[j.id], with_config=False) for j in jobs]
            attach_config_heads(s, out, rt.settings)  # the target column: never whole configs
            attach_queues(s, out, tenant, job_slots(rt))
            return out, more

    jobs, more = await run_in_threadpool(_load)
    if verdict:
        jobs = [j for j in jobs if (j["verdict"] or "none") == verdict]
    rows = [views.row(j) for j in jobs]
    next_q = urlencode({"kind": kind, "status": status, "verdict": verdict, "after": jobs[-1]["id"]}) \
        if more and jobs else None
    return page.render("audits.html", rows=rows, kinds=kinds, statuses=STATUSES, verdicts=VERDICTS,
                       f_kind=kind, f_status=status, f_verdict=verdict, next_q=next_q)


def _load_job(request: Request, tenant: str, job_id: str) -> dict[str, Any] | None:
    from app.jobs.resource import load_resource
    from app.jobs.service import job_slots

    rt = request.app.state.runtime
    with rt.db.session() as s:
        return load_resource(s, job_id[:64], tenant, job_slots(rt), rt.settings)


def _form_defaults(request: Request) -> dict[str, Any]:
    return {"kind": "canary_mia", "config": "{\n  \n}", "claimed_epsilon": "", "claimed_delta": "", "webhook_url": ""}


@router.get("/audits/new")
async def new_audit_form(request: Request, rerun: str = ""):
    page, stop = await _page(request, *AUDITORS)
    if stop:
        return stop
    from app.jobs import registry

    values = _form_defaults(request)
    note = None
    if rerun:
        job = await run_in_threadpool(_load_job, request, page.principal.tenant_id, rerun)
        if job is not None:
            values.update(kind=job["kind"], config=json.dumps(job["config"], indent=2),
                          claimed_epsilon="" if job["claimed_epsilon"] is None else repr(job["claimed_epsilon"]),
                          claimed_delta="" if job["claimed_delta"] is None else repr(job["claimed_delta"]))
            note = views.rerun_note(job["config"])
    kinds = registry.available_kinds(request.app.state.runtime.settings)
    return page.render("audit_new.html", kinds=kinds, values=values, errors={}, form_error=None, note=note,
                       nonce=secrets.token_urlsafe(16))


def _field_of(param: str | None) -> str:
    if not param:
        return "form"
    head = param.split(".", 1)[0]
    return head if head in ("kind", "config", "claimed_epsilon", "claimed_delta", "webhook_url") else "form"


@router.post("/audits/new")
async def new_audit(request: Request):
    page, stop = await _page(request, *AUDITORS)
    if stop:
        return stop
    from app.api.audit_submit import AuditCreate, submit_audit
    from app.jobs import registry

    form = await _form(request)
    if not sess.csrf_ok(request, page.session, form.get("csrf_token")):
        return _csrf_failed(page)
    values = {k: form.get(k, "") for k in ("kind", "config", "claimed_epsilon", "claimed_delta", "webhook_url")}
    kinds = registry.available_kinds(request.app.state.runtime.settings)

    def again(errors: dict[str, str], status: int = 422, form_error: str | None = None):
        return page.render("audit_new.html", status, kinds=kinds, values=values, errors=errors,
                           form_error=form_error, note=None, nonce=secrets.token_urlsafe(16))

    errors: dict[str, str] = {}
    try:
        config = loads(values["config"] or "{}")
        if not isinstance(config, dict):
            errors["config"] = "config: must be a JSON object"
    except json.JSONDecodeError as exc:
        errors["config"] = f"config: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        config = {}
    except BodyValueError as exc:
        errors["config"] = str(exc.prefixed("config."))
        config = {}
    except RecursionError:
        errors["config"] = "config: not valid JSON (nested too deeply)"
        config = {}
    body: dict[str, Any] = {"kind": values["kind"], "config": config}
    for name in ("claimed_epsilon", "claimed_delta"):
        raw = values[name].strip()
        if raw:
            try:
                body[name] = float(raw)
                if not math.isfinite(body[name]):
                    raise ValueError
            except ValueError:
                errors[name] = f"{name}: must be a number"
    if values["webhook_url"].strip():
        body["webhook_url"] = values["webhook_url"].strip()
    if errors:
        return again(errors)
    try:
        model = AuditCreate.model_validate(body)
        nonce = form.get("nonce", "")[:100]
        sub = await submit_audit(request, model, page.principal,
                                 f"ui-{nonce}" if nonce.replace("-", "").replace("_", "").isalnum() else None)
    except ValidationError as exc:
        err = validation_error(list(exc.errors()))
        return again({_field_of(err.param): err.message})
    except APIError as exc:
        field = _field_of(exc.param)
        if exc.status_code == 409:
            return again({}, 409, "This form was already submitted with a different config: submit it again.")
        return again({field: exc.message} if field != "form" else {}, exc.status_code,
                     exc.message if field == "form" else None)
    return page.redirect(f"/ui/audits/{sub.resource['id']}")


@router.get("/audits/{job_id}")
async def audit_page(request: Request, job_id: str):
    page, stop = await _page(request, *AUDITORS)
    if stop:
        return stop
    job = await run_in_threadpool(_load_job, request, page.principal.tenant_id, job_id)
    if job is None:
        return page.render("error.html", 404, title="Not found", message="No audit job with this id.")
    plots = await run_in_threadpool(views.audit_charts, job)
    result = job["result"] if isinstance(job["result"], dict) else None
    # The page shows the result without its bulky per-trial list (downloadable as result.json).
    summary = {k: v for k, v in result.items() if k not in ("trials",)} if result else None
    return page.render("audit.html", job=job, row=views.row(job), plots=plots, summary=summary)


@router.post("/audits/{job_id}/cancel")
async def cancel(request: Request, job_id: str):
    page, stop = await _page(request, *AUDITORS)
    if stop:
        return stop
    from app.jobs import service

    form = await _form(request)
    if not sess.csrf_ok(request, page.session, form.get("csrf_token")):
        return _csrf_failed(page)
    rt = request.app.state.runtime
    resource = await run_in_threadpool(service.cancel, rt, job_id[:64], page.principal.tenant_id)
    if resource is None:
        return page.render("error.html", 404, title="Not found", message="No audit job with this id.")
    if resource["status"] in ("succeeded", "failed"):
        return page.redirect(f"/ui/audits/{resource['id']}?notice=cancel_finished")
    runner = service.get_runner(request.app)
    if runner is not None and resource["status"] == "running":
        runner.cancel_local(resource["id"])
    return page.redirect(f"/ui/audits/{resource['id']}?notice=cancelled")


@router.get("/audits/{job_id}/artifacts/{name}")
async def artifact(request: Request, job_id: str, name: str, inline: int = 0):
    page, stop = await _page(request, *AUDITORS)
    if stop:
        return stop
    from app.jobs import repository as repo

    def _get():
        with request.app.state.runtime.db.session() as s:
            if repo.get_job(s, job_id[:64], page.principal.tenant_id) is None:
                return None
            art = repo.get_artifact(s, job_id[:64], name[:200])
            return None if art is None else (art.content, art.media_type)

    got = await run_in_threadpool(_get)
    if got is None:
        return page.render("error.html", 404, title="Not found", message="No such artifact.")
    content, media = got
    show_inline = inline and media == "image/png"  # only images are shown in the page; all else downloads
    safe_name = "".join(c for c in name if c.isalnum() or c in "._-") or "artifact"
    resp = Response(content, media_type=media, headers={
        "Content-Disposition": f'{"inline" if show_inline else "attachment"}; filename="{safe_name}"'})
    return page.finish(resp)


# ---------------------------------------------------------------------------
# Datasets and budgets
# ---------------------------------------------------------------------------


@router.get("/datasets")
async def datasets(request: Request):
    page, stop = await _page(request, *SCOPES)
    if stop:
        return stop
    from app.api.dataset_service import dataset_object
    from app.store import budget_repo
    from app.store import datasets_repo as repo

    rt = request.app.state.runtime
    tenant = page.principal.tenant_id

    def _load():
        with rt.db.session() as s:
            rows, total = repo.list_datasets(s, tenant, limit=200, offset=0)
            return [dataset_object(d, budget_repo.get_account(s, d.id, tenant)) for d in rows], total

    data, total = await run_in_threadpool(_load)
    return page.render("datasets.html", datasets=data, total=total)


@router.get("/datasets/{dataset_id}")
async def dataset_page(request: Request, dataset_id: str):
    page, stop = await _page(request, *SCOPES)
    if stop:
        return stop
    from app.api.dataset_service import dataset_object, ledger_entry_object
    from app.budget.composition import Charge
    from app.budget.forecast import count_answers
    from app.budget.ledger import state_of
    from app.privacy.pld import PldSpec
    from app.store import budget_repo
    from app.store import datasets_repo as repo

    rt = request.app.state.runtime
    tenant = page.principal.tenant_id

    def _load():
        with rt.db.session() as s:
            ds = repo.get_dataset(s, dataset_id[:64], tenant)
            acc = budget_repo.get_account(s, ds.id, tenant) if ds else None
            if ds is None or acc is None:
                return None
            rows, total = budget_repo.list_entries(s, ds.id, limit=10_000, offset=0)
            obj = dataset_object(ds, acc)
            forecast = None
            last = next((e for e in reversed(rows) if e.status == "charged"), None)
            if last is not None:
                curve = [math.inf if x is None else float(x) for x in last.rdp] if last.rdp else None
                pld = PldSpec.from_dict(last.pld) if last.pld is not None and curve else None
                c = Charge(last.epsilon, last.delta, acc.rdp_orders if curve else None, curve, pld)
                n = count_answers(state_of(acc), c, acc.epsilon_budget, acc.delta_budget, limit=100_000)
                forecast = {"answers": n.answers, "capped": n.capped, "mechanism": last.mechanism,
                            "epsilon": last.epsilon, "delta": last.delta, "rdp": curve is not None}
            return obj, [ledger_entry_object(e) for e in rows], total, forecast

    got = await run_in_threadpool(_load)
    if got is None:
        return page.render("error.html", 404, title="Not found", message="No dataset with this id.")
    obj, entries, total, forecast = got
    b = obj["budget"]
    from app.ui import charts

    return page.render("dataset.html", ds=obj, budget=b, entries=entries, total=total, forecast=forecast,
                       gauge=charts.gauge(b["epsilon_spent"], b["epsilon"], label="epsilon spent (composed)"),
                       burndown=views.burn_down(b, entries, obj["created_at"]))
