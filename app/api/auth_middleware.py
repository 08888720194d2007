"""Authentication before the body: a pure ASGI middleware (issue 26).

FastAPI reads and parses a JSON body before it runs a route's dependencies, so a key checked in a
dependency came after a 200 MB body had been parsed. This middleware resolves the caller first, from
the headers alone: a missing, malformed, unknown or revoked key is answered 401 (the API's error
envelope) without reading a byte of the body; a valid one is left in ``scope["state"]["principal"]``,
where app/api/auth.py's dependencies find it (scope checks, 403, stay in the dependencies).

Every path needs a key in keyed mode except those app/api/access.py names public and the /ui pages
(which log in with their own session cookie). Unknown paths need a key too, so a caller without one
learns nothing about which routes exist.
"""

from __future__ import annotations

import re

from starlette._utils import get_route_path
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse

from app.api.access import UI_PREFIX, UNGUARDED_PATHS
from app.api.auth import authenticate, missing_key
from app.api.errors import APIError, _flat_routes, error_body
from app.api.principal import cached_auth_mode, open_principal


class AuthMiddleware:
    def __init__(self, app) -> None:
        self.app = app
        self._unguarded: list[re.Pattern[str]] | None = None

    def _is_unguarded(self, scope) -> bool:
        path = get_route_path(scope)
        if path == UI_PREFIX or path.startswith(UI_PREFIX + "/"):
            return True
        if self._unguarded is None:  # the routes' own regexes: the same matching Starlette routes with
            self._unguarded = [r.path_regex for r in _flat_routes(scope["app"].router.routes)
                               if getattr(r, "path", None) in UNGUARDED_PATHS and hasattr(r, "path_regex")]
        return any(rx.match(path) for rx in self._unguarded)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or self._is_unguarded(scope):
            return await self.app(scope, receive, send)
        request = Request(scope)  # headers and cookies only: no receive, so the body cannot be read here
        rt = request.app.state.runtime
        mode = cached_auth_mode(rt)
        try:
            if mode == "open":
                principal = open_principal()
            elif mode == "keys" and "authorization" not in request.headers and request.method not in ("GET", "HEAD"):
                raise missing_key()  # (a cookie counts on GET/HEAD only)
            else:
                principal = await run_in_threadpool(authenticate, request)
        except APIError as exc:
            response = JSONResponse(error_body(exc.message, exc.type, exc.param, exc.code),
                                    status_code=exc.status_code, headers=exc.headers)
            return await response(scope, receive, send)
        state = scope.setdefault("state", {})
        state["principal"] = principal
        state["tenant_id"] = principal.tenant_id
        return await self.app(scope, receive, send)


def install(app) -> None:
    app.add_middleware(AuthMiddleware)
