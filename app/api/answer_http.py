"""A private answer as HTTP: the ``?include=`` query, the budget headers, the JSON response.
The service itself is ``app.answers``; this module only translates its result."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Literal

from fastapi import Query, Request
from fastapi.responses import JSONResponse

from app.answers.flow import PrivateAnswer
from app.answers.presentation import presented

# The longest query a private answer takes (classify, generate, and the last user message of a chat
# completion): checked before any model work (a 1 MB chat message was tokenized whole before this bound).
QUERY_MAX_CHARS = 20_000

IncludeQuery = Annotated[Literal["accounting"] | None, Query(
    description="`accounting`: also return the RDP curve (`privacy.orders`, `privacy.rdp`) the ledger composes")]


def client_gone(request: Request) -> Callable[[], Awaitable[bool]]:
    """Whether the client has closed the connection: ``request.is_disconnected`` without its cost.

    Starlette receives under an anyio cancel scope cancelled in advance, and the cancel formats the
    task's repr: ~1-4 ms per call on a busy CPU, twice per answer (issue 27's profile). Here one step
    of ``receive()``: a server that has a disconnect queued (uvicorn) returns it without waiting; one
    that would wait has nothing queued, and the step is closed unfinished (nothing was consumed).
    Anything unexpected falls back to Starlette's check."""

    async def gone() -> bool:
        if getattr(request, "_is_disconnected", False):
            return True
        step = request.receive()
        try:
            step.send(None)
        except StopIteration as done:
            if isinstance(done.value, dict) and done.value.get("type") == "http.disconnect":
                request._is_disconnected = True
            return bool(getattr(request, "_is_disconnected", False))
        except Exception:  # a receive that cannot be stepped this way
            return await request.is_disconnected()
        step.close()  # it waits for a message: none is queued, the client is still there
        return False

    return gone


def answer_headers(ans: PrivateAnswer) -> dict[str, str]:
    if not ans.budgeted:
        return {"X-DPICL-Epsilon-Charged": "0"}
    return {
        "X-DPICL-Epsilon-Spent": f"{ans.epsilon_spent:.6g}",
        "X-DPICL-Epsilon-Remaining": f"{ans.epsilon_remaining:.6g}",
        **({"Idempotent-Replayed": "true"} if ans.replayed else {}),
        **({"X-DPICL-Reused": "true"} if ans.reused else {}),
    }


def respond(ans: PrivateAnswer, include: str | None) -> JSONResponse:
    return JSONResponse(presented(ans.body, include == "accounting"), headers=answer_headers(ans))
