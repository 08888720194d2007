"""A send that remembers whether the response has started: until it has, a middleware can still answer an
error itself (app/api/body_limit.py, app/api/shutdown.py); after, only the connection can be closed."""

from __future__ import annotations

from starlette.types import Message, Send


class StartTrackingSend:
    __slots__ = ("send", "started")

    def __init__(self, send: Send) -> None:
        self.send = send
        self.started = False

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
        await self.send(message)
