"""Bad bytes are a 422: NUL and lone surrogates never reach a route or a repository.

One check (``app.badtext``) at each way text comes in:

* path and query parameters: ``InputGuardMiddleware`` (pure ASGI) checks the decoded path and
  every query name and value before routing, and names the path parameter (``dataset_id``) or
  the query parameter (``after``);
* JSON bodies: ``app.jsonbody.JSONBody`` (the base of every request body model) raises
  ``BadTextError`` with the dotted field, answered here as a 422;
* JSONL upload lines and /ui forms call ``check_text`` themselves (with the line number / the
  form field).

Headers need no check: the HTTP parser refuses a NUL in a header (400), and a header is
decoded as latin-1, which has no surrogates. Without this, PostgreSQL answers a NUL with a 500
(SQLite stores it) and a lone surrogate is a UnicodeEncodeError on both.
"""

from __future__ import annotations

from urllib.parse import parse_qsl

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.errors import error_body
from app.badtext import BadTextError, text_problem

CODE = "invalid_text"


def bad_text_response(param: str | None, reason: str) -> JSONResponse:
    return JSONResponse(error_body(f"{param or 'body'}: {reason}", "invalid_request_error", param, CODE),
                        status_code=422)


def _path_param(scope: Scope) -> str:
    """The name of the path parameter that holds the bad text (``path`` when no route matches)."""
    from app.api.errors import _flat_routes

    app = scope.get("app")
    for route in _flat_routes(getattr(getattr(app, "router", None), "routes", ())):
        try:
            match, child = route.matches(scope)
        except Exception:  # a route type that cannot match this scope
            continue
        if match is Match.NONE:
            continue
        for name, value in (child.get("path_params") or {}).items():
            if isinstance(value, str) and text_problem(value):
                return str(name)
    return "path"


class InputGuardMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            found = self._problem(scope)
            if found is not None:
                await bad_text_response(*found)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    @staticmethod
    def _problem(scope: Scope) -> tuple[str, str] | None:
        why = text_problem(scope.get("path", ""))
        if why:
            return _path_param(scope), why
        qs = scope.get("query_string") or b""
        if qs:
            # As Starlette decodes it (percent-decoded UTF-8, invalid sequences replaced).
            for name, value in parse_qsl(qs.decode("latin-1"), keep_blank_values=True):
                why = text_problem(name)
                if why:
                    return "query", f"a parameter name {why}"
                why = text_problem(value)
                if why:
                    return name, why
        return None


def install(app: FastAPI) -> None:
    """The middleware (paths, queries) and the 422 for a ``BadTextError`` raised by a body model."""
    app.add_middleware(InputGuardMiddleware)

    @app.exception_handler(BadTextError)
    async def _bad_text(_req: Request, exc: BadTextError) -> JSONResponse:
        return bad_text_response(exc.param, exc.reason)
