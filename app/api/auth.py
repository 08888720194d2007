"""Authentication of the JSON API: who the caller is (401) and what its key may do (403).

The key is resolved by app/api/auth_middleware.py before a route reads its body, and left in
``request.state.principal``; the dependencies here read it and check scopes. Keys, scopes and the
auth modes are described in app/api/principal.py; who may call each route is app/api/access.py.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool

from app.api.errors import APIError
from app.api.principal import (
    ALL_SCOPES,
    METRICS_SCOPE,
    OPEN_MODE_WARNING,
    SCOPES,
    Principal,
    auth_mode,
    create_key,
    hash_key,
    open_principal,
    principal_for_hash,
    principal_for_key,
    split_key,
)
from app.ui.session import cookie_principal

__all__ = ["ALL_SCOPES", "METRICS_SCOPE", "OPEN_MODE_WARNING", "SCOPES", "Principal", "PrincipalDep", "auth_mode",
           "authenticate", "create_key", "get_principal", "hash_key", "missing_key", "principal_for_hash",
           "principal_for_key", "require"]

_BEARER = {"WWW-Authenticate": "Bearer"}


def missing_key() -> APIError:
    return APIError(401, "missing API key: send 'Authorization: Bearer <key>'", code="missing_api_key",
                    headers=_BEARER)


def authenticate(request: Request) -> Principal:
    """The caller of a request (reads the database: call it off the event loop), or a 401 APIError."""
    rt = request.app.state.runtime
    if auth_mode(rt) == "open":
        return open_principal()
    headers = request.headers.getlist("authorization")
    if len(headers) > 1:
        # One request, one key: a proxy or log in front may read the last header where we would read the first.
        raise APIError(401, "send one Authorization header (this request has several)", code="invalid_api_key",
                       headers=_BEARER)
    header = headers[0] if headers else ""
    if not header and request.method in ("GET", "HEAD"):
        # The web UI polls job status with its session cookie (HttpOnly, SameSite=Strict): read-only
        # requests only, so a cookie can never submit, cancel or charge anything through the JSON API.
        p = cookie_principal(request)
        if p is not None:
            return p
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise missing_key()
    token = token.strip()
    if split_key(token) is None:
        raise APIError(401, "invalid API key", code="invalid_api_key", headers=_BEARER)
    p = principal_for_key(rt, token)
    if p is None:
        raise APIError(401, "invalid or revoked API key", code="invalid_api_key", headers=_BEARER)
    return p


def get_principal(request: Request) -> Principal:
    p = getattr(request.state, "principal", None)
    if p is None:  # an app built without AuthMiddleware: authenticate here
        p = authenticate(request)
        request.state.principal = p
        request.state.tenant_id = p.tenant_id
    return p


PrincipalDep = Annotated[Principal, Depends(get_principal)]


def require(*scopes: str):
    """A dependency that needs a key with any of ``scopes`` (or open mode)."""

    async def _dep(request: Request) -> Principal:
        # Open mode by configuration needs no database: decided here, on the event loop. Otherwise
        # the key lookup (a database read) runs in a worker thread, as a sync dependency would.
        # The AuthMiddleware has usually resolved the key already (request.state.principal): no hop then.
        if request.app.state.runtime.settings.auth_mode == "open" or \
                getattr(request.state, "principal", None) is not None:
            p = get_principal(request)
        else:
            p = await run_in_threadpool(get_principal, request)
        if not any(p.has(s) for s in scopes):
            raise APIError(403, f"this API key lacks the scope {' or '.join(repr(s) for s in scopes)}",
                           code="insufficient_scope")
        return p

    return _dep
