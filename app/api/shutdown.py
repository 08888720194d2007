"""A request cut off by a shutdown is answered 503 ``shutting_down``, not 500.

On SIGTERM uvicorn stops accepting, waits ``DPICL_SHUTDOWN_TIMEOUT_SECONDS`` for the requests in
flight, then cancels their tasks. The ``CancelledError`` used to reach uvicorn, which logged a
traceback per request and answered each one ``500 Internal Server Error`` (a busy server shut down
in CI answered 21 of 40 requests that way). This outermost middleware answers such a request 503
with ``Retry-After`` and ``Connection: close`` when no response has started (one log line, no
traceback); a response already under way is left for uvicorn to close.

What it does not undo: the work the request started in a worker thread. A private answer whose
charge committed before the cut stays charged (the answer is never released: the safe direction);
the 503 says so. The process does not wait for that work either: after its shutdown uvicorn raises
the SIGTERM again, whose default action ends the process (tests/cli/test_serve_sigterm.py).
"""

from __future__ import annotations

import asyncio
import logging

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.asgi_send import StartTrackingSend
from app.api.errors import error_body

log = logging.getLogger("dpicl.shutdown")
CODE = "shutting_down"
MESSAGE = ("the server shut down before this request finished; retry it against a running server (privacy "
           "budget a private answer had already been charged stays spent; its answer was not released)")


class ShutdownCutoffMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.cut = 0  # requests answered 503 by a shutdown (one log line per shutdown, not per request)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        tracking_send = StartTrackingSend(send)
        try:
            await self.app(scope, receive, tracking_send)
        except asyncio.CancelledError:
            # Only uvicorn's shutdown cancels a request's task (a client that goes away is an
            # http.disconnect, not a cancellation). The task ends here: nothing awaits its result.
            self.cut += 1
            if self.cut == 1:
                log.warning("shutdown: cancelling requests still in flight after the graceful timeout "
                            "(answered 503 %s)", CODE)
            if not tracking_send.started:
                await JSONResponse(error_body(MESSAGE, "service_unavailable", None, CODE), status_code=503,
                                   headers={"Retry-After": "5", "Connection": "close"})(scope, receive, send)


def install(app: FastAPI) -> None:
    app.add_middleware(ShutdownCutoffMiddleware)
