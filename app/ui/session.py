"""The web UI's session cookie and CSRF tokens.

The cookie is a Fernet token (AES-128-CBC + HMAC-SHA256, ``cryptography``; its timestamp gives the
expiry) holding ``{"sid", "kp", "kh"}``: a random session id, and the API key's prefix and SHA-256,
never the key itself. Every request re-checks (prefix, hash) against the keys table, so a revoked
key ends its sessions at once, and a stolen cookie cannot be turned back into the API key.
Attributes: HttpOnly, SameSite=Strict, Secure (``DPICL_UI_COOKIE_SECURE``), Path=/ (the UI's
scripts poll ``GET /v1/audits/{id}`` with it; the JSON API accepts the cookie on GET/HEAD only).

CSRF: every form carries ``HMAC(csrf key, sid)``, checked on every POST (a synchronizer token bound
to the session; SameSite=Strict and the Origin check are defence in depth).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass

from cryptography.fernet import Fernet, InvalidToken
from fastapi import Request

# app/api/principal.py, not app/api/auth.py: the JSON API's auth imports this module (cookie_principal).
from app.api.principal import Principal, auth_mode, hash_key, open_principal, principal_for_hash

COOKIE = "dpicl_session"


@dataclass
class Session:
    sid: str
    key_prefix: str | None = None
    key_hash: str | None = None
    new: bool = False  # not yet sent to the browser: the response sets the cookie


def _secret(app) -> bytes:
    cached = getattr(app.state, "ui_secret", None)
    if cached is None:
        configured = app.state.runtime.settings.ui_session_secret
        cached = configured.get_secret_value().encode() if configured else secrets.token_bytes(32)
        app.state.ui_secret = cached
    return cached


def _fernet(app) -> Fernet:
    f = getattr(app.state, "ui_fernet", None)
    if f is None:
        key = hashlib.sha256(b"dpicl-ui-session|" + _secret(app)).digest()
        f = app.state.ui_fernet = Fernet(base64.urlsafe_b64encode(key))
    return f


def read_session(request: Request) -> Session | None:
    raw = request.cookies.get(COOKIE)
    if not raw:
        return None
    ttl = int(request.app.state.runtime.settings.ui_session_hours * 3600)
    try:
        token = raw.strip('"') + "=" * (-len(raw.strip('"')) % 4)
        data = json.loads(_fernet(request.app).decrypt(token.encode(), ttl=ttl))
        return Session(str(data["sid"]), data.get("kp"), data.get("kh"))
    except (InvalidToken, ValueError, KeyError, TypeError):
        return None


def new_session(key: str | None = None) -> Session:
    sid = secrets.token_urlsafe(24)
    if key is None:
        return Session(sid, new=True)
    prefix = key.strip().split("_", 2)[1]
    return Session(sid, prefix, hash_key(key.strip()), new=True)


def set_cookie(request: Request, response, session: Session) -> None:
    settings = request.app.state.runtime.settings
    token = _fernet(request.app).encrypt(
        json.dumps({"sid": session.sid, "kp": session.key_prefix, "kh": session.key_hash}).encode()).decode().rstrip("=")
    # (no '=' padding: a cookie value with '=' would be sent quoted)
    response.set_cookie(COOKIE, token, max_age=int(settings.ui_session_hours * 3600), path="/", httponly=True,
                        secure=settings.ui_cookie_secure, samesite="strict")


def clear_cookie(request: Request, response) -> None:
    response.delete_cookie(COOKIE, path="/", httponly=True, secure=request.app.state.runtime.settings.ui_cookie_secure,
                           samesite="strict")


def csrf_token(request: Request, session: Session) -> str:
    key = hashlib.sha256(b"dpicl-ui-csrf|" + _secret(request.app)).digest()
    return hmac.new(key, session.sid.encode(), hashlib.sha256).hexdigest()


def csrf_ok(request: Request, session: Session | None, token: str | None) -> bool:
    if session is None or session.new or not token:
        return False
    # Origin, when the browser sends one, must be this server (defence in depth beside the token).
    origin = request.headers.get("origin")
    if origin and origin != "null":
        host = request.headers.get("host", "")
        if origin.split("://", 1)[-1] != host:
            return False
    return hmac.compare_digest(csrf_token(request, session), token)


def session_principal(request: Request, session: Session | None) -> Principal | None:
    """The caller of a /ui page: everyone in open mode, else the session's key (if still active)."""
    rt = request.app.state.runtime
    if auth_mode(rt) == "open":
        return open_principal()
    if session is None or not session.key_prefix or not session.key_hash:
        return None
    return principal_for_hash(rt, session.key_prefix, session.key_hash)


def cookie_principal(request: Request) -> Principal | None:
    """For the JSON API's GET routes (app.api.auth): the principal of a valid UI session cookie, or None."""
    if COOKIE not in request.cookies:
        return None
    s = read_session(request)
    if s is None or not s.key_prefix or not s.key_hash:
        return None
    return principal_for_hash(request.app.state.runtime, s.key_prefix, s.key_hash)
