from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query, Request

from app.runtime import Runtime


async def get_runtime(request: Request) -> Runtime:
    # async: a plain attribute read, not worth FastAPI's thread hop for sync dependencies
    return request.app.state.runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


def get_tenant(request: Request) -> str:
    """The caller's tenant, from its API key (the default tenant in open mode)."""
    from app.api.auth import get_principal

    return get_principal(request).tenant_id


TenantDep = Annotated[str, Depends(get_tenant)]


# Page offsets: bounded so that no integer a client sends reaches the database unchecked
# (an unbounded offset overflowed SQLite's 64-bit INTEGER: a 500 instead of a 422).
MAX_OFFSET = 2**31 - 1
Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET, description="rows to skip (0 to 2**31 - 1)")]
