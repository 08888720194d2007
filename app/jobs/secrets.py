"""Credentials of audited targets: never stored in plain text, never returned.

A remote audit target (canary_mia ``config.target``) gives the key of the gateway it
audits in one of two ways:

- ``api_key_env``: the name of an environment variable (``DPICL_TARGET_KEY`` or
  ``DPICL_TARGET_KEY_<NAME>``), read by the process that runs the job: the server
  with the in-process runner, each ``dpicl worker`` otherwise. Nothing secret is
  stored. The prefix keeps a submitter from sending any other variable of the
  server (``DPICL_DATABASE_URL``, cloud credentials...) as a bearer token to a URL
  of their choice.
- ``api_key``: the key itself. At submit it is encrypted with the server key
  ``DPICL_SECRETS_KEY`` (Fernet: AES-128-CBC + HMAC-SHA256, from ``cryptography``),
  stored as ``api_key_sealed`` together with the target URL it was given for, and
  decrypted at run time only for that URL. The plain key is never written: the
  stored config, the request hash (HMAC of the key) and every response hold no
  trace of it. Without ``DPICL_SECRETS_KEY`` an inline key is refused with a 422.

Rotation: ``DPICL_SECRETS_KEY`` is a comma-separated list of Fernet keys; the first
encrypts, every one decrypts (``MultiFernet``). Put the new key first on the server
and every worker, keep the old ones while stored jobs that were sealed with them may
still run, then drop them.

Every job resource (``POST``/``GET /v1/audits``, webhooks, and so the CLI's output and JUnit
files) shows these fields as ``"[redacted]"`` (:func:`redact`, called by
:func:`app.jobs.config_view.public_config`, which also summarises inline texts); the list has no config.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, SecretStr, model_validator

from app.jsonbody import JSONBody

from app.jobs.errors import JobConfigError, JobError

if TYPE_CHECKING:
    from app.config import Settings

REDACTED = "[redacted]"
SECRET_FIELDS = frozenset({"api_key", "api_key_sealed"})
ENV_PREFIX = "DPICL_TARGET_KEY"
ENV_PATTERN = r"^DPICL_TARGET_KEY(_[A-Z0-9_]+)?$"
NO_SERVER_KEY = ("an inline api_key is stored only encrypted, and this server has no key to encrypt it: give "
                 "api_key_env (the name of a DPICL_TARGET_KEY_* variable set on the server and workers) instead, "
                 "or set DPICL_SECRETS_KEY on the server and workers (docs/jobs.md, 'Credentials')")


class SecretUnavailable(JobError):
    """The process that runs the job cannot produce the target's key (variable unset, server key missing)."""

    code = "secret_unavailable"


class TargetCredentials(JSONBody):
    """The key of a remote target: inline (encrypted at rest) or by environment variable. A mixin of target
    configs; a ``url`` field beside it is what a sealed key is bound to."""

    api_key: SecretStr | None = Field(default=None, description="the gateway key (admin + infer, + internals for "
                                      "white-box); encrypted at rest with DPICL_SECRETS_KEY, never returned")
    api_key_env: str | None = Field(default=None, pattern=ENV_PATTERN, description="instead of api_key: the "
                                    "name of a DPICL_TARGET_KEY_* environment variable on the server and workers")
    api_key_sealed: str | None = Field(default=None, description="set by the server (the encrypted api_key); "
                                       "refused at submit")

    @model_validator(mode="after")
    def _one_key(self) -> TargetCredentials:
        given = [n for n in ("api_key", "api_key_env", "api_key_sealed") if getattr(self, n) is not None]
        if len(given) > 1:
            raise ValueError(f"give one of api_key and api_key_env, not {' and '.join(given)}")
        return self


def _fernet(settings: Settings):
    """MultiFernet over DPICL_SECRETS_KEY (first encrypts, all decrypt), or None when unset."""
    if settings.secrets_key is None:
        return None
    from cryptography.fernet import Fernet, MultiFernet

    keys = [k.strip() for k in settings.secrets_key.get_secret_value().split(",") if k.strip()]
    return MultiFernet([Fernet(k) for k in keys])


def credentials(model: BaseModel, path: str = "config") -> Iterator[tuple[str, TargetCredentials]]:
    """Every TargetCredentials inside a config model, with its param path (``config.target``)."""
    if isinstance(model, TargetCredentials):
        yield path, model
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            yield from credentials(value, f"{path}.{name}")


def check(model: BaseModel, settings: Settings) -> None:
    """Submit-time checks (422 naming the field): the variable is set here, an inline key can be encrypted."""
    for path, c in credentials(model):
        if c.api_key_sealed is not None:
            raise JobConfigError("api_key_sealed is set by the server; give api_key or api_key_env",
                                 param=f"{path}.api_key_sealed")
        if c.api_key_env is not None and not os.environ.get(c.api_key_env):
            raise JobConfigError(f"the environment variable {c.api_key_env} is not set on this server; set it on "
                                 "the server and every worker, or give api_key", param=f"{path}.api_key_env")
        if c.api_key is not None and _fernet(settings) is None:
            raise JobConfigError(NO_SERVER_KEY, param=f"{path}.api_key")


def seal(model: BaseModel, settings: Settings) -> None:
    """Replace every inline api_key by its encryption (bound to the target's url), in place."""
    for path, c in credentials(model):
        if c.api_key is None:
            continue
        f = _fernet(settings)
        if f is None:  # check() refused it already; never store the key unencrypted
            raise JobConfigError(NO_SERVER_KEY, param=f"{path}.api_key")
        payload = json.dumps({"v": 1, "key": c.api_key.get_secret_value(), "url": getattr(c, "url", None)})
        c.api_key_sealed = f.encrypt(payload.encode()).decode()
        c.api_key = None


def resolve(c: TargetCredentials, settings: Settings) -> str | None:
    """The plain key at run time (in memory only), or None when the target has none."""
    if c.api_key is not None:  # a model built in process (library use), never a stored config
        return c.api_key.get_secret_value()
    if c.api_key_env is not None:
        value = os.environ.get(c.api_key_env)
        if not value:
            raise SecretUnavailable(f"the environment variable {c.api_key_env} (config.target.api_key_env) is not "
                                    "set on the worker that runs this job; set it on every worker")
        return value
    if c.api_key_sealed is None:
        return None
    from cryptography.fernet import InvalidToken

    f = _fernet(settings)
    if f is None:
        raise SecretUnavailable("the target's api_key is stored encrypted, and this worker has no DPICL_SECRETS_KEY "
                                "to decrypt it; set the server's DPICL_SECRETS_KEY on every worker")
    try:
        payload = json.loads(f.decrypt(c.api_key_sealed.encode()))
    except InvalidToken:
        raise SecretUnavailable("none of the keys in this worker's DPICL_SECRETS_KEY decrypts the target's api_key "
                                "(was the key it was sealed with dropped in a rotation?); resubmit the job") from None
    if payload.get("url") != getattr(c, "url", None):
        raise SecretUnavailable("the stored api_key was sealed for another target url; resubmit the job")
    return str(payload["key"])


def hash_view(config: Any, settings: Settings) -> Any:
    """``config`` with every inline api_key replaced by its HMAC under the server key, for the request hash
    (idempotency) that is stored: equal keys give equal hashes, and the stored hash reveals nothing of the key."""
    if isinstance(config, dict):
        out = {}
        for k, v in config.items():
            if k == "api_key" and isinstance(v, str):
                mac_key = (settings.secrets_key.get_secret_value().split(",")[0].strip().encode()
                           if settings.secrets_key is not None else b"")
                v = "hmac-sha256:" + hmac.new(mac_key, v.encode(), hashlib.sha256).hexdigest()
            out[k] = hash_view(v, settings)
        return out
    if isinstance(config, list):
        return [hash_view(v, settings) for v in config]
    return config


def redact(obj: Any) -> Any:
    """A copy of ``obj`` with the value of every secret field (api_key, api_key_sealed) shown as ``[redacted]``."""
    if isinstance(obj, dict):
        return {k: (REDACTED if k in SECRET_FIELDS and v is not None else redact(v)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [redact(v) for v in obj]
    return obj


def redact_text(text: str, *secrets: str | None) -> str:
    """``text`` with each of ``secrets`` replaced (messages that might quote a key)."""
    for s in secrets:
        if s and len(s) >= 4:
            text = text.replace(s, "***")
    return text

