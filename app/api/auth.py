"""API keys, tenants and scopes.

Keys look like ``dpicl_<prefix>_<secret>``; the database keeps the prefix (to find
the row) and a SHA-256 of the whole key (compared in constant time). A key is
shown once, at creation, and never logged.

``DPICL_AUTH_MODE``: ``required`` (every non-public route needs a key), ``open``
(no keys; everything is the default tenant with every scope: local use only) or
``auto`` (open until the first key is created, then required). Open mode is
flagged in /v1/health and logged at start-up.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool

from app.api.errors import APIError
from app.store import keys_repo
from app.store.base import DEFAULT_TENANT, new_id

SCOPES = ("infer", "audit", "internals", "admin")
# Shown by /v1/health (auth.warning) and as the banner of every /ui page in open mode.
OPEN_MODE_WARNING = ("running OPEN: no API key required, every caller is the default tenant with every scope "
                     "(local use only; create a key with `dpicl keys create --scopes admin`)")


@dataclass(frozen=True)
class Principal:
    tenant_id: str
    scopes: frozenset[str]
    key_id: str | None = None
    open_mode: bool = False

    def has(self, scope: str) -> bool:
        return scope in self.scopes


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def create_key(session, *, tenant_id: str, name: str, scopes: list[str]) -> tuple[str, object]:
    """Create a key; returns (plaintext key, row). The plaintext is not stored."""
    bad = [s for s in scopes if s not in SCOPES]
    if bad or not scopes:
        raise ValueError(f"scopes must be a non-empty subset of {', '.join(SCOPES)}")
    prefix = secrets.token_hex(6)
    key = f"dpicl_{prefix}_{secrets.token_urlsafe(32)}"
    row = keys_repo.add_key(session, id=new_id("key"), tenant_id=tenant_id, name=name, prefix=prefix,
                            secret_hash=hash_key(key), scopes=sorted(set(scopes)))
    return key, row


class _AuthModeCache:
    """Whether any active key exists (``auto`` mode), re-read at most every 2 s."""

    def __init__(self) -> None:
        self.value: bool | None = None
        self.at = 0.0

    def keys_exist(self, rt) -> bool:
        now = time.monotonic()
        if self.value is None or now - self.at > 2.0:
            with rt.db.session() as s:
                self.value = keys_repo.active_count(s) > 0
            self.at = now
        return self.value


def auth_mode(rt) -> str:
    """The effective mode: 'open' or 'keys'."""
    mode = rt.settings.auth_mode
    if mode == "open":
        return "open"
    if mode == "required":
        return "keys"
    cache = rt.extras.setdefault("_auth_cache", _AuthModeCache())
    return "keys" if cache.keys_exist(rt) else "open"


def _authenticate(request: Request) -> Principal:
    rt = request.app.state.runtime
    if auth_mode(rt) == "open":
        return Principal(DEFAULT_TENANT, frozenset(SCOPES), None, open_mode=True)
    header = request.headers.get("authorization", "")
    if not header and request.method in ("GET", "HEAD"):
        # The web UI polls job status with its session cookie (HttpOnly, SameSite=Strict): read-only
        # requests only, so a cookie can never submit, cancel or charge anything through the JSON API.
        from app.ui.session import cookie_principal

        p = cookie_principal(request)
        if p is not None:
            return p
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise APIError(401, "missing API key: send 'Authorization: Bearer <key>'", code="missing_api_key",
                       headers={"WWW-Authenticate": "Bearer"})
    token = token.strip()
    parts = token.split("_", 2)
    if len(parts) != 3 or parts[0] != "dpicl":
        raise APIError(401, "invalid API key", code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})
    p = principal_for_hash(rt, parts[1], hash_key(token))
    if p is None:
        raise APIError(401, "invalid or revoked API key", code="invalid_api_key",
                       headers={"WWW-Authenticate": "Bearer"})
    return p


def principal_for_hash(rt, prefix: str, secret_hash: str) -> Principal | None:
    """The principal of the active key with this prefix and SHA-256, or None (unknown, wrong, revoked).
    The web UI's session cookie carries (prefix, hash), never the key, and is checked here on every request."""
    with rt.db.session() as s:
        row = keys_repo.find_by_prefix(s, prefix)
        ok = row is not None and hmac.compare_digest(row.secret_hash, secret_hash)
        if not ok or row.revoked_at is not None:
            return None
        return Principal(row.tenant_id, frozenset(row.scopes), row.id)


def principal_for_key(rt, token: str) -> Principal | None:
    """The principal of a plaintext key (the /ui login form), or None."""
    parts = token.strip().split("_", 2)
    if len(parts) != 3 or parts[0] != "dpicl":
        return None
    return principal_for_hash(rt, parts[1], hash_key(token.strip()))


def get_principal(request: Request) -> Principal:
    p = getattr(request.state, "principal", None)
    if p is None:
        p = _authenticate(request)
        request.state.principal = p
        request.state.tenant_id = p.tenant_id
    return p


PrincipalDep = Annotated[Principal, Depends(get_principal)]


def require(*scopes: str):
    """A dependency that needs a key with any of ``scopes`` (or open mode)."""

    async def _dep(request: Request) -> Principal:
        # Open mode by configuration needs no database: decided here, on the event loop. Otherwise
        # the key lookup (a database read) runs in a worker thread, as a sync dependency would.
        if request.app.state.runtime.settings.auth_mode == "open":
            p = get_principal(request)
        else:
            p = await run_in_threadpool(get_principal, request)
        if not any(p.has(s) for s in scopes):
            raise APIError(403, f"this API key lacks the scope {' or '.join(repr(s) for s in scopes)}",
                           code="insufficient_scope")
        return p

    return _dep
