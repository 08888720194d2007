"""API key secrets never reach the server log (docs/security.md, "What never leaves").

The server reads a key from the Authorization header only, which nothing logs. But a client may put its
key in a URL (``?api_key=dpicl_..._<secret>``, a path segment): uvicorn's access log writes every request
line with its query string, so the secret would land in the log. This filter, on uvicorn's loggers,
replaces the secret part of every key-shaped string in a record with ``[redacted]``; the prefix stays (it
names the key, as ``dpicl keys list`` shows it, and opens nothing).
"""

from __future__ import annotations

import logging
import re

__all__ = ["KeyRedactor", "install", "redact"]

# app.api.principal.create_key: dpicl_<12 hex>_<token_urlsafe>. The prefix is matched loosely (any
# alphanumerics), the secret as every URL-safe character after it.
_KEY = re.compile(r"(dpicl_[0-9A-Za-z]{1,64}_)[0-9A-Za-z_-]+")
LOGGERS = ("uvicorn.access", "uvicorn.error", "uvicorn", "dpicl.api")


def redact(text: str) -> str:
    return _KEY.sub(r"\1[redacted]", text) if "dpicl_" in text else text


class KeyRedactor(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: redact(v) if isinstance(v, str) else v for k, v in record.args.items()}
        return True


_FILTER = KeyRedactor()


def install() -> None:
    """On uvicorn's loggers (a logger's filter sees the records logged on it: the access log's). Idempotent;
    uvicorn's logging configuration, applied after, adds handlers and keeps filters."""
    for name in LOGGERS:
        lg = logging.getLogger(name)
        if _FILTER not in lg.filters:
            lg.addFilter(_FILTER)
