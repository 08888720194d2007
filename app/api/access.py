"""Who may call what: every route of the server and the key it needs once the server is keyed.

This table is data, used three ways: AuthMiddleware lets the public and /ui routes through without a
key (every other path, unknown ones included, needs a valid key before its body is read); the
"Who may call what" section of docs/security.md is ``markdown_table()`` verbatim
(tests/docs/test_security_doc.py); and tests/api/test_route_access.py calls every route with no key,
another tenant's key and a key of each scope, and checks the answers against it. The scopes are
enforced by each route's dependencies (app/api/auth.py ``require``); a route added without a row
here fails that test.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.api.principal import METRICS_SCOPE, SCOPES

PUBLIC = "public"  # anyone, in every mode
UI = "ui"  # the /ui pages: their own login (app/ui/session.py), in keyed modes
UI_PREFIX = "/ui"


@dataclass(frozen=True)
class Access:
    method: str
    path: str
    who: str | tuple[str, ...]  # PUBLIC, UI, or the scopes of which the key needs any one
    owned: bool = False  # the path names a tenant's dataset or job: another tenant's key gets 404
    note: str = ""
    other: str = ""  # what another tenant's key gets, when not the default of markdown_table


ANY = SCOPES  # "any API scope" (not metrics: a scrape key opens nothing else)
_AUDIT = ("audit", "admin")
_BROWSE = ("infer", "audit", "admin")
_NO_DATA = "the same answer (no tenant data)"

ROUTES: tuple[Access, ...] = (
    Access("GET", "/v1/health", PUBLIC, note="readiness; says the effective auth mode"),
    Access("GET", "/v1/models", PUBLIC, note="model names and capabilities, no tenant data"),
    Access("GET", "/v1/models/{model_id}", PUBLIC),
    Access("GET", "/openapi.json", PUBLIC),
    Access("GET", "/docs", PUBLIC),
    Access("GET", "/redoc", PUBLIC),
    Access("GET", "/apidocs-static/{name}", PUBLIC, note="the Swagger UI / ReDoc assets, served offline"),
    Access("GET", "/", PUBLIC, note="redirects to /ui"),
    Access("GET", "/metrics", (METRICS_SCOPE, "admin"), note="totals over all tenants: give it a scrape key",
           other="the same totals"),
    Access("POST", "/v1/privacy/calibrate", ANY, other=_NO_DATA),
    Access("POST", "/v1/privacy/convert", ANY, other=_NO_DATA),
    Access("POST", "/v1/privacy/empirical", ANY, other=_NO_DATA),
    Access("POST", "/v1/datasets", ("admin",)),
    Access("GET", "/v1/datasets", ANY),
    Access("GET", "/v1/datasets/{dataset_id}", ANY, owned=True),
    Access("PATCH", "/v1/datasets/{dataset_id}", ("admin",), owned=True),
    Access("DELETE", "/v1/datasets/{dataset_id}", ("admin",), owned=True),
    Access("GET", "/v1/datasets/{dataset_id}/exemplars", ANY, owned=True),
    Access("GET", "/v1/datasets/{dataset_id}/budget", ANY, owned=True),
    Access("PUT", "/v1/datasets/{dataset_id}/budget", ("admin",), owned=True),
    Access("GET", "/v1/datasets/{dataset_id}/budget/forecast", ANY, owned=True),
    Access("GET", "/v1/datasets/{dataset_id}/ledger", ANY, owned=True),
    Access("GET", "/v1/samples", ANY, note="the bundled sample tasks", other=_NO_DATA),
    Access("POST", "/v1/samples/{name}/load", ("admin",), note="a sample task as a new dataset of the key's tenant"),
    Access("POST", "/v1/private/classify", ("infer",), note="return_internals also needs internals"),
    Access("GET", "/v1/private/mechanisms", _BROWSE),
    Access("POST", "/v1/private/generate", ("infer",), note="return_internals also needs internals"),
    Access("GET", "/v1/private/generate/mechanisms", _BROWSE),
    Access("POST", "/v1/chat/completions", ("infer",)),
    Access("POST", "/v1/audits", _AUDIT, note="kinds that spend a budget (synthesize) also need infer or admin"),
    Access("POST", "/v1/audits/plan", _AUDIT),
    Access("GET", "/v1/audits/kinds", _AUDIT),
    Access("GET", "/v1/audits", _AUDIT),
    Access("GET", "/v1/audits/{job_id}", _AUDIT, owned=True),
    Access("POST", "/v1/audits/{job_id}/cancel", _AUDIT, owned=True),
    Access("GET", "/v1/audits/{job_id}/artifacts", _AUDIT, owned=True),
    Access("GET", "/v1/audits/{job_id}/artifacts/{name}", _AUDIT, owned=True),
    Access("GET, POST", "/ui, /ui/...", UI, owned=True,
           note="log in with a key; a page needs the scopes of the API route it shows; GET/HEAD API "
                "routes also accept this session's cookie in place of a Bearer key"),
)

# Paths AuthMiddleware lets through without a key (templates as the routes spell them).
UNGUARDED_PATHS = frozenset({r.path for r in ROUTES if r.who == PUBLIC} | {"/v1/models/{model_id:path}"})


def keyed_cell(a: Access) -> str:
    if a.who == PUBLIC:
        return "anyone"
    if a.who == UI:
        return "a /ui session"
    if a.who == ANY:
        return "a key with any API scope"
    return "a key with " + " or ".join(f"`{s}`" for s in a.who)


def markdown_table() -> str:
    """The table of docs/security.md, "Who may call what" (checked verbatim by the docs test)."""
    rows = ["| Method | Path | open, or auto before any key | keyed: auto after a key, or required | "
            "another tenant's key | note |",
            "|---|---|---|---|---|---|"]
    for a in ROUTES:
        other = a.other or ("404 (not found)" if a.owned else "anyone" if a.who == PUBLIC else "its own tenant's data")
        open_cell = "anyone" if a.who != UI else "anyone, no login"
        rows.append(f"| {a.method} | `{a.path}` | {open_cell} | {keyed_cell(a)} | {other} | {a.note} |")
    return "\n".join(rows) + "\n"
