"""Who is calling: API keys, tenants, scopes and the effective auth mode (no web framework here).

Keys look like ``dpicl_<prefix>_<secret>``; the database keeps the prefix (to find the row) and a
SHA-256 of the whole key (compared in constant time). A key is shown once, at creation, and never logged.

``DPICL_AUTH_MODE``: ``required`` (every non-public route needs a key), ``open`` (no keys; everything
is the default tenant with every scope: local use only) or ``auto`` (open until the first key is
created, then keyed for good: the database records that a key has existed, so revoking every key
does not open the server again; only ``DPICL_AUTH_MODE=open`` does). Open mode is flagged in
/v1/health and logged at start-up.

Both the JSON API (app/api/auth.py, app/api/auth_middleware.py) and the web UI's session cookie
(app/ui/session.py) build on this module, which imports neither of them.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass

from app.store import keys_repo
from app.store.base import DEFAULT_TENANT, new_id

# The scopes of the JSON API; "any scope" on a route means any of these.
SCOPES = ("infer", "audit", "internals", "admin")
# Scraping GET /metrics (cross-tenant totals): a key of its own, which opens nothing else (admin may too).
METRICS_SCOPE = "metrics"
ALL_SCOPES = SCOPES + (METRICS_SCOPE,)
# Shown by /v1/health (auth.warning) and as the banner of every /ui page in open mode.
OPEN_MODE_WARNING = ("running OPEN: no API key required, every caller is the default tenant with every scope "
                     "(local use only; create a key with `dpicl keys create --scopes admin`)")
# How long auto mode trusts a "no key has ever existed" answer before asking the database again.
# "Keyed" is never re-read: it cannot become false (keys_repo.ever_keyed).
UNKEYED_RECHECK_SECONDS = 2.0


@dataclass(frozen=True)
class Principal:
    tenant_id: str
    scopes: frozenset[str]
    key_id: str | None = None
    open_mode: bool = False

    def has(self, scope: str) -> bool:
        return scope in self.scopes


def open_principal() -> Principal:
    """Everyone, in open mode: the default tenant with every scope."""
    return Principal(DEFAULT_TENANT, frozenset(ALL_SCOPES), None, open_mode=True)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def create_key(session, *, tenant_id: str, name: str, scopes: list[str]) -> tuple[str, object]:
    """Create a key; returns (plaintext key, row). The plaintext is not stored. The first key makes
    the database keyed for good (keys_repo.add_key)."""
    bad = [s for s in scopes if s not in ALL_SCOPES]
    if bad or not scopes:
        raise ValueError(f"scopes must be a non-empty subset of {', '.join(ALL_SCOPES)}")
    prefix = secrets.token_hex(6)
    key = f"dpicl_{prefix}_{secrets.token_urlsafe(32)}"
    row = keys_repo.add_key(session, id=new_id("key"), tenant_id=tenant_id, name=name, prefix=prefix,
                            secret_hash=hash_key(key), scopes=sorted(set(scopes)))
    return key, row


class _AuthModeCache:
    """Whether this database is keyed (``auto`` mode). True is final (the fact is monotonic, in this
    process and in every replica, since it lives in the database); False is re-read at most every
    UNKEYED_RECHECK_SECONDS, so another process's first key takes effect here within that time."""

    def __init__(self) -> None:
        self.value: bool | None = None
        self.at = 0.0
        self._lock = threading.Lock()

    def fresh(self) -> bool | None:
        """The cached answer if it needs no database read, else None."""
        if self.value is True:
            return True
        if self.value is False and time.monotonic() - self.at <= UNKEYED_RECHECK_SECONDS:
            return False
        return None

    def keys_exist(self, rt) -> bool:
        known = self.fresh()
        if known is not None:
            return known
        with rt.db.session() as s:
            keyed = keys_repo.ever_keyed(s)
        with self._lock:
            self.value = bool(self.value) or keyed  # never back from True
            self.at = time.monotonic()
        return self.value


def _cache(rt) -> _AuthModeCache:
    return rt.extras.setdefault("_auth_cache", _AuthModeCache())


def auth_mode(rt) -> str:
    """The effective mode: 'open' or 'keys' (may read the database: call it off the event loop)."""
    mode = rt.settings.auth_mode
    if mode == "open":
        return "open"
    if mode == "required":
        return "keys"
    return "keys" if _cache(rt).keys_exist(rt) else "open"


def cached_auth_mode(rt) -> str | None:
    """auth_mode without a database read, or None when one is needed (then call auth_mode in a thread)."""
    mode = rt.settings.auth_mode
    if mode == "open":
        return "open"
    if mode == "required":
        return "keys"
    known = _cache(rt).fresh()
    return None if known is None else ("keys" if known else "open")


def principal_for_hash(rt, prefix: str, secret_hash: str) -> Principal | None:
    """The principal of the active key with this prefix and SHA-256, or None (unknown, wrong, revoked).
    The web UI's session cookie carries (prefix, hash), never the key, and is checked here on every request."""
    with rt.db.session() as s:
        row = keys_repo.find_by_prefix(s, prefix)
        ok = row is not None and hmac.compare_digest(row.secret_hash, secret_hash)
        if not ok or row.revoked_at is not None:
            return None
        return Principal(row.tenant_id, frozenset(row.scopes), row.id)


def split_key(token: str) -> str | None:
    """The prefix of a well-formed key, else None."""
    parts = token.split("_", 2)
    if len(parts) != 3 or parts[0] != "dpicl" or not parts[1]:
        return None
    return parts[1]


def principal_for_key(rt, token: str) -> Principal | None:
    """The principal of a plaintext key (a Bearer header, the /ui login form), or None."""
    token = token.strip()
    prefix = split_key(token)
    if prefix is None:
        return None
    return principal_for_hash(rt, prefix, hash_key(token))
