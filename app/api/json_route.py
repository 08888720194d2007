"""Every route parses its JSON body with ``app.jsonbody.loads``: a repeated key is a 422 naming it.

FastAPI reads a JSON body with ``await request.json()`` (Starlette: plain ``json.loads``, the last of two
equal keys wins). ``JSONRoute`` is the ``route_class`` of every router (``app.api.main.create_app`` refuses
to start with a route of another class); it hands the handler a request whose ``json()`` refuses a repeated
key. FastAPI turns that exception into its 400 "error parsing the body", which ``app.api.errors`` answers as
a 422 naming the key (its ``__cause__`` is the DuplicateKeyError).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute

from app.jsonbody import loads


class StrictJSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = loads(await self.body())
        return self._json


class JSONRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            return await handler(StrictJSONRequest(request.scope, request.receive))

        return strict
