"""Which tenant the model work of the current call belongs to, who submits it, by when it must be done,
and how many tokens it may run through the model.

Set by the API around one answer's model work (``app.answers.flow.work_for_tenant``)
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


class _WorkBudget:
    __slots__ = ("limit", "spent")

    def __init__(self, limit: int) -> None:
        self.limit, self.spent = limit, 0


_WORK: contextvars.ContextVar[_WorkBudget | None] = contextvars.ContextVar("dpicl_work", default=None)


@contextlib.contextmanager
def work_scope(max_tokens: int | None) -> Iterator[None]:
    """Model calls in this block may run at most ``max_tokens`` tokens in all (prompt rows as submitted,
    prefix reuse not deducted, so the count never depends on what a cache holds; one per row per decode
    step); a call that would pass it raises :class:`~app.llm.errors.WorkTooLarge` before it runs. The API
    sets one around each answer: the caller controls the query, the partitions and the shots, so this is
    what bounds the model time one request can take (docs/security.md). None or 0: no bound."""
    if not max_tokens:
        yield
        return
    token = _WORK.set(_WorkBudget(int(max_tokens)))
    try:
        yield
    finally:
        _WORK.reset(token)


def spend_work(tokens: int, what: str) -> None:
    """Count ``tokens`` of model work against the current :func:`work_scope` (a no-op outside one)."""
    budget = _WORK.get()
    if budget is None:
        return
    if budget.spent + tokens > budget.limit:
        from .errors import WorkTooLarge

        # The message holds the limit only: the tokens spent so far, those asked for and the call that
        # would pass it (``what``) all grow with the exemplars' lengths, private data no refusal may release.
        raise WorkTooLarge(f"this answer's model work would pass its budget of {budget.limit} tokens",
                           tokens=budget.spent + tokens, limit=budget.limit, what=what)
    budget.spent += tokens
