"""Which tenant the model work of the current call belongs to, who submits it, and by when it must be done.

Set by the API around one answer's model work (``app.answers.flow.run_for_tenant``)
and read by the backends: the ``hf`` prefix LRU and the batch scheduler key on the tenant
(one tenant's cached prefixes and batch rows never meet another's), the remote backend
derives vLLM's ``cache_salt`` from it (CVE-2025-46570). Outside any scope the tenant is
``None`` (library use, tests, the CLI): one shared scope, as before tenants existed.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator

_TENANT: contextvars.ContextVar[str | None] = contextvars.ContextVar("dpicl_tenant", default=None)
_SUBMITTER: contextvars.ContextVar[str | None] = contextvars.ContextVar("dpicl_submitter", default=None)
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("dpicl_deadline", default=None)


@contextlib.contextmanager
def tenant_scope(tenant: str | None) -> Iterator[None]:
    """Within this block, model work belongs to ``tenant`` (caches and batches are shared within it only)."""
    token = _TENANT.set(None if tenant is None else str(tenant))
    try:
        yield
    finally:
        _TENANT.reset(token)


def current_tenant() -> str | None:
    return _TENANT.get()


@contextlib.contextmanager
def submitter_scope(submitter: str | None) -> Iterator[None]:
    """Within this block, model work is submitted on behalf of ``submitter`` (an audit job sets
    ``job:<id>``): the batch scheduler takes turns between submitters, so one submitter with many calls
    queued cannot starve another's (app/llm/scheduler.py). Outside any scope each thread submits for itself."""
    token = _SUBMITTER.set(None if submitter is None else str(submitter))
    try:
        yield
    finally:
        _SUBMITTER.reset(token)


def current_submitter() -> str | None:
    return _SUBMITTER.get()


@contextlib.contextmanager
def deadline_scope(seconds: float | None) -> Iterator[None]:
    """Model work started in this block must finish within ``seconds`` (monotonic clock) or fail;
    None: no deadline of the caller's own (the scheduler's default applies). Nested scopes keep
    the earlier deadline."""
    if seconds is None:
        yield
        return
    new = time.monotonic() + float(seconds)
    old = _DEADLINE.get()
    token = _DEADLINE.set(new if old is None else min(old, new))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def current_deadline() -> float | None:
    """The monotonic time by which the current model work must be done, or None."""
    return _DEADLINE.get()
