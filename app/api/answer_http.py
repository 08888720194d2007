"""A private answer as HTTP: the ``?include=`` query, the budget headers, the JSON response.
The service itself is ``app.answers``; this module only translates its result."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Query
from fastapi.responses import JSONResponse

from app.answers.flow import PrivateAnswer
from app.answers.presentation import presented

IncludeQuery = Annotated[Literal["accounting"] | None, Query(
    description="`accounting`: also return the RDP curve (`privacy.orders`, `privacy.rdp`) the ledger composes")]


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
