from __future__ import annotations

from typing import Annotated, Iterator

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from app.runtime import Runtime


def get_runtime(request: Request) -> Runtime:
    return request.app.state.runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


def get_session(request: Request) -> Iterator[Session]:
    rt: Runtime = request.app.state.runtime
    with rt.db.session() as s:
        yield s


SessionDep = Annotated[Session, Depends(get_session)]


def get_tenant(request: Request) -> str:
    """The caller's tenant. Until API keys land every caller is the default tenant."""
    from app.store.base import DEFAULT_TENANT

    return getattr(request.state, "tenant_id", DEFAULT_TENANT)


TenantDep = Annotated[str, Depends(get_tenant)]
