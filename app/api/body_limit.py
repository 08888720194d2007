"""Bounded request bodies: 413 before a body is read, and while a chunked body streams in.

Pure ASGI middleware. A request whose ``Content-Length`` is over its route's limit is answered
413 at once, without reading a byte of the body. A body without a length (chunked) is counted
as the server hands it over: the read that passes the limit raises ``BodyTooLarge`` (a
Starlette ``HTTPException``, which FastAPI's body parsing re-raises unchanged), answered 413,
so at most one chunk beyond the limit is ever buffered. The 413 closes the connection: the
rest of the body is never read.

Two limits (app/config.py): ``DPICL_MAX_UPLOAD_BYTES`` for the routes that take exemplar sets
(``POST /v1/datasets``, JSON or JSONL; ``POST /v1/audits``, whose canary config may carry
exemplars inline), ``DPICL_MAX_BODY_BYTES`` for every other route (answers, privacy
calculators, /ui forms). docs/security.md, "Input limits".
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.asgi_send import StartTrackingSend
from app.api.errors import error_body

# (method, path) of the routes held to the upload limit.
UPLOAD_ROUTES = frozenset({("POST", "/v1/datasets"), ("POST", "/v1/audits")})
CODE = "body_too_large"


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int, setting: str) -> None:
        super().__init__(413, f"the request body is larger than {limit} bytes ({setting})")
        self.limit = limit
        self.setting = setting


def too_large_response(exc: BodyTooLarge) -> JSONResponse:
    # Connection: close: the server stops reading a body it will never use.
    return JSONResponse(error_body(str(exc.detail), "invalid_request_error", "body", CODE), status_code=413,
                        headers={"Connection": "close"})


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, *, max_body_bytes: int, max_upload_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.max_upload_bytes = max_upload_bytes

    def limit_for(self, scope: Scope) -> tuple[int, str]:
        path = scope.get("path", "").rstrip("/") or "/"
        if (scope.get("method", ""), path) in UPLOAD_ROUTES:
            return self.max_upload_bytes, "DPICL_MAX_UPLOAD_BYTES"
        return self.max_body_bytes, "DPICL_MAX_BODY_BYTES"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit, setting = self.limit_for(scope)
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:  # the HTTP parser refuses these; nothing to add
                    break
                if declared > limit:
                    await too_large_response(BodyTooLarge(limit, setting))(scope, receive, send)
                    return
                break

        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit, setting)
            return message

        tracking_send = StartTrackingSend(send)
        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge as exc:
            # Read outside FastAPI's handlers (a route's own ``request.body()`` under a middleware that
            # lets it escape): answer it here unless a response has begun.
            if tracking_send.started:
                raise
            await too_large_response(exc)(scope, receive, send)


def install(app: FastAPI, settings) -> None:
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=settings.max_body_bytes,
                       max_upload_bytes=settings.max_upload_bytes)

    @app.exception_handler(BodyTooLarge)
    async def _too_large(_req: Request, exc: BodyTooLarge) -> JSONResponse:
        return too_large_response(exc)
