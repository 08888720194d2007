"""The flow of one private answer, shared by every mechanism and every route.

    read      one transaction: the dataset, its account and exemplars, then (charged answers) an
              idempotent replay, an identical earlier answer to reuse, or the budget precheck
    work      no transaction open: the mechanism runs in a worker thread as the caller's tenant
    charge    one transaction: lock the account, compose, write the entry with the released body
    release   the body leaves only after its charge committed

The answer leaves only after its charge is committed; the released body is stored on the ledger
entry, so a retry with the same ``Idempotency-Key`` returns it without a second charge (also after a
crash between charge and release). An identical request (same dataset, normalized query, mechanism,
parameters and model) gets the stored released answer back at no cost, marked ``reused``
(post-processing of a released answer; docs/privacy.md, "Answer reuse"), unless the dataset opted
out (``answer_reuse: false``) or the request asks ``reuse: false``. A model call never runs inside a
database transaction (it can take seconds: a held SQLite write lock or an idle PostgreSQL
transaction would stall every other request). That is also why the unit of work is the service's,
not a request-scoped session dependency: one session per phase, opened in the worker thread that
runs it; repositories and the ledger never commit, the phase does.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import unicodedata
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import anyio.to_thread
import numpy as np
from sqlalchemy.orm import Session

from app.answers.errors import (
    BudgetExhaustedError,
    ClientGone,
    Conflict,
    Forbidden,
    InvalidRequest,
    dataset_not_found,
)
from app.answers.presentation import visible
from app.budget.ledger import BudgetExhausted, ChargeRequest, ChargeResult, Ledger, LedgerConflict, NoBudgetAccount
from app.privacy.accountant import PrivacyCost
from app.runtime import Runtime

# A test-only fault: exit the process right after a charge commits (crash-recovery tests).
_CRASH_AFTER_CHARGE = "DPICL_TEST_CRASH_AFTER_CHARGE"

# Observers of the flow (the HTTP layer's metrics register here): called as fn(event, data) with
# ("mechanism", {"name"}) when a model work starts, ("charge", {"mechanism", "epsilon"}) per charge and
# ("stage", {"stage", "seconds", "cpu_seconds"}) after each of an answer's read, work and charge: its wall
# time and the CPU time of the thread that ran it (the model thread's own time is the scheduler's metric).
# Wall well above CPU means waiting: for a lock, the GIL, a core, the model thread (issue 27).
OBSERVERS: list[Callable[[str, dict[str, Any]], None]] = []


def _notify(event: str, **data: Any) -> None:
    for fn in list(OBSERVERS):
        fn(event, data)


def _stage(stage: str, seconds: float, cpu_seconds: float) -> None:
    if OBSERVERS:
        _notify("stage", stage=stage, seconds=seconds, cpu_seconds=cpu_seconds)


class Caller(Protocol):
    """Who asks: the API's Principal satisfies it (tenant, key, scopes)."""

    @property
    def tenant_id(self) -> str: ...

    @property
    def key_id(self) -> str | None: ...

    def has(self, scope: str) -> bool: ...


@dataclass
class PrivateAnswer:
    body: dict[str, Any]
    epsilon_spent: float
    epsilon_remaining: float
    replayed: bool = False
    reused: bool = False
    budgeted: bool = True  # False: a public set's answer (no ledger, no budget headers)


@dataclass(frozen=True)
class AnswerPlan:
    """One private answer after validation and costing, before any model work: what ``answer`` needs
    to replay, reuse, precheck, charge and release it."""

    dataset_id: str
    mechanism: str
    cost: PrivacyCost | None
    charged: bool
    request_params: dict[str, Any]
    reuse_key: str | None  # None: seeded noise (never reused, nor reusing another)
    may_reuse: bool
    idempotency_key: str | None
    return_internals: bool
    account: Any  # the dataset's budget account row (read in the read transaction), or None
    budgeted: bool = True  # False: a public (synthetic) set, no ledger at all


@dataclass(frozen=True)
class Released:
    """What the model work produced: the answer body (its ``privacy`` as the caller sees it) and the
    typed privacy event the ledger charges for it (None: nothing private was read)."""

    body: dict[str, Any]
    event: PrivacyCost | None


@dataclass(frozen=True)
class Work:
    """The read phase's outcome: the plan, and the model work as a plain function of the noise
    generator (it runs in a worker thread)."""

    plan: AnswerPlan
    compute: Callable[[np.random.Generator | None], Released]
    lm: Any  # the model the work runs on (its batch scheduler admits the work first)


def normalize_query(query: str) -> str:
    """The query as answer reuse compares it: Unicode NFC, whitespace runs collapsed, ends stripped
    (the prompt templates strip the query too); case and punctuation are kept."""
    return " ".join(unicodedata.normalize("NFC", query).split())


def reuse_key_of(route: str, mechanism: str, query: str, params: dict[str, Any], **extra: Any) -> str:
    """sha256 of what makes two private requests identical: the route, the mechanism, the normalized
    query, every resolved mechanism parameter (defaults filled in) and the model. The dataset is the
    ledger entry's own column, so the key is looked up within one dataset only."""
    p = {k: v for k, v in params.items() if k != "query_sha256"}
    doc = {"v": 1, "route": route, "mechanism": mechanism, "query": normalize_query(query), "params": p, **extra}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def query_digest(query: str) -> str:
    return hashlib.sha256(query.encode()).hexdigest()[:16]


def mechanism_error(exc: Exception) -> InvalidRequest:
    """A mechanism's parameter error (it names the field) as a refused request."""
    return InvalidRequest(str(getattr(exc, "message", exc)), param=getattr(exc, "param", None),
                          code="invalid_mechanism_params")


def budget_exhausted(exc: BudgetExhausted) -> BudgetExhaustedError:
    return BudgetExhaustedError(
        f"privacy budget exhausted: epsilon {exc.epsilon_spent:.6g} of {exc.epsilon_budget:.6g} spent, "
        f"{exc.remaining:.6g} remaining; this answer would bring it to {exc.epsilon_would_be:.6g}",
        epsilon_spent=exc.epsilon_spent, epsilon_remaining=exc.remaining)


def idempotency_conflict() -> Conflict:
    return Conflict("this Idempotency-Key was used for a different request", param="Idempotency-Key",
                    code="idempotency_conflict")


def noise_rng(rt: Runtime, seed: int | None) -> np.random.Generator:
    from app.mechanisms.rng import secure_rng, seeded_rng

    if seed is None:
        return secure_rng()
    if not rt.settings.allow_seeded_noise:
        raise InvalidRequest("a noise seed is accepted only when the server allows seeded noise "
                             "(DPICL_ALLOW_SEEDED_NOISE, tests and audits only)", param="seed",
                             code="seed_not_allowed")
    return seeded_rng(seed)


async def run_sync(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a worker thread (context variables copied), as FastAPI's threadpool does."""
    return await anyio.to_thread.run_sync(lambda: fn(*args))


def work_for_tenant(caller: Caller, fn: Callable[..., Any], *args: Any, lm: Any = None,
                    deadline_s: float | None = None, mechanism: str | None = None,
                    max_tokens: int | None = None) -> Any:
    """The model work of one answer, in the calling (worker) thread, as the caller's tenant: prefix
    caches (in-process LRU, remote vLLM cache_salt; CVE-2025-46570) and batches are shared within the
    tenant only (app/llm/tenancy.py). A model whose batch queue is full refuses at once
    (Overloaded: 503 + Retry-After) before any work; ``deadline_s`` bounds the time the work may
    wait in the queue (DeadlineExceeded: 503); ``max_tokens`` bounds the tokens it may run through the
    model (WorkTooLarge: 422, app.answers.private). All come before the charge."""
    from app.llm.tenancy import deadline_scope, tenant_scope, work_scope

    if mechanism:
        _notify("mechanism", name=mechanism)
    sched = getattr(lm, "scheduler", None)
    with tenant_scope(caller.tenant_id), deadline_scope(deadline_s), work_scope(max_tokens):
        if sched is not None:
            sched.admit()
        return fn(*args)


def answer_token_budget(configured: int | None, lm: Any) -> int | None:
    """The tokens one answer may run through ``lm``: the setting, else twice what the model runs in one
    batch at most (its ``max_batch_tokens``: 8192 on a CPU, from free memory on CUDA; a remote model's
    declared ``options.max_batch_tokens``, default 8192); None: no bound (a model without one)."""
    if configured is not None:
        return configured
    per_batch = getattr(lm, "max_batch_tokens", None)
    return 2 * int(per_batch) if isinstance(per_batch, int) and per_batch > 0 else None


def _early(ledger: Ledger, s: Session, caller: Caller, plan: AnswerPlan) -> PrivateAnswer | None:
    """Before any model work: an idempotent retry gets its stored answer back; an identical request
    (reuse allowed) gets the stored released answer at no cost, also when the budget is spent; a
    charge that cannot fit the budget is refused. None means: go on and compute the answer."""
    assert plan.cost is not None
    if plan.idempotency_key:
        try:
            replay = ledger.replay(s, dataset_id=plan.dataset_id, tenant_id=caller.tenant_id,
                                   idempotency_key=plan.idempotency_key, mechanism=plan.mechanism,
                                   params=plan.request_params, account=plan.account)
        except LedgerConflict:
            raise idempotency_conflict() from None
        if replay is not None:
            return replayed(replay, plan.return_internals)
    if plan.reuse_key and plan.may_reuse:
        again = ledger.reuse(s, dataset_id=plan.dataset_id, tenant_id=caller.tenant_id, reuse_key=plan.reuse_key,
                             account=plan.account)
        if again is not None:
            return reused(again, plan.return_internals)
    try:
        ledger.precheck(s, dataset_id=plan.dataset_id, tenant_id=caller.tenant_id, cost=plan.cost,
                        account=plan.account)
    except BudgetExhausted as exc:
        raise budget_exhausted(exc) from None
    except NoBudgetAccount:
        raise dataset_not_found(plan.dataset_id) from None
    return None


async def _stop_if_gone(client_gone: Callable[[], Awaitable[bool]] | None, when: str) -> None:
    """A client that has closed the connection is never sent this answer: stop before the model work,
    or after it but before the charge. Nothing is released, so nothing is charged (the model ran on
    private data, but an output no one receives leaks nothing); a retry with the same key starts over."""
    if client_gone is not None and await client_gone():
        raise ClientGone(f"the client closed the request {when}: nothing was released or charged",
                         code="client_closed_request")


async def answer(rt: Runtime, caller: Caller, prepare: Callable[[Session], Work], *, seed: int | None,
                 client_gone: Callable[[], Awaitable[bool]] | None = None) -> PrivateAnswer:
    """Read (``prepare`` in the read transaction, then replay / reuse / precheck), model work,
    charge, release: see the module docstring. The read and the model work run in one worker
    thread, one after the other (one thread hop fewer per answer); the read's transaction is closed
    before the model work starts."""
    ledger = Ledger()
    await _stop_if_gone(client_gone, "before the model work")

    def _read_and_work() -> tuple[Work, PrivateAnswer | None, Released | None]:
        t0, c0 = time.perf_counter(), time.thread_time()
        with rt.db.session() as s:
            work = prepare(s)
            early = _early(ledger, s, caller, work.plan) if work.plan.charged else None
        t1, c1 = time.perf_counter(), time.thread_time()
        _stage("read", t1 - t0, c1 - c0)
        if early is not None:
            return work, early, None
        rng = noise_rng(rt, seed) if work.plan.budgeted else None
        done = work_for_tenant(caller, work.compute, rng, lm=work.lm, mechanism=work.plan.mechanism,
                               deadline_s=rt.settings.request_deadline_seconds,
                               max_tokens=answer_token_budget(rt.settings.max_answer_tokens, work.lm))
        _stage("work", time.perf_counter() - t1, time.thread_time() - c1)
        return work, None, done

    work, early, done = await run_sync(_read_and_work)
    if early is not None:
        return early
    plan = work.plan
    assert done is not None
    released: Released = done
    body = released.body
    if not plan.budgeted:
        return PrivateAnswer(visible(body, plan.return_internals), 0.0, 0.0, budgeted=False)
    await _stop_if_gone(client_gone, "before its answer was charged")
    if not plan.charged:
        body["budget"] = None
        acc = plan.account
        spent = acc.epsilon_spent if acc is not None else 0.0
        left = max(0.0, acc.epsilon_budget - acc.epsilon_spent) if acc is not None else 0.0
        return PrivateAnswer(visible(body, plan.return_internals), spent, left)
    if released.event is None:  # a charged plan whose run read nothing private: a bug, never released
        raise RuntimeError(f"mechanism {plan.mechanism!r} returned no privacy event for a charged answer")
    return await run_sync(_charge_and_release, rt, caller, plan, body, released.event)


def _charge_and_release(rt: Runtime, caller: Caller, plan: AnswerPlan, body: dict[str, Any],
                        cost: PrivacyCost) -> PrivateAnswer:
    """Charge the computed answer in one transaction (shared with the other answers of its account
    waiting to be charged: app.budget.combiner), then release it. The charge is the typed event of the
    work that was done (data-independent: it equals the precheck's cost). With reuse allowed, an
    identical answer charged meanwhile is released instead (this one is dropped, never charged)."""
    t0, c0 = time.perf_counter(), time.thread_time()
    try:
        ch = rt.charges.charge(dataset_id=plan.dataset_id, tenant_id=caller.tenant_id, request=ChargeRequest(
            cost=cost, mechanism=plan.mechanism, params=plan.request_params, response=body, key_id=caller.key_id,
            idempotency_key=plan.idempotency_key, reuse_key=plan.reuse_key, reuse=plan.may_reuse))
    except BudgetExhausted as exc:
        raise budget_exhausted(exc) from None
    except LedgerConflict:
        raise idempotency_conflict() from None
    except NoBudgetAccount:
        raise dataset_not_found(plan.dataset_id) from None
    _stage("charge", time.perf_counter() - t0, time.thread_time() - c0)
    if ch.reused:
        return reused(ch, plan.return_internals)
    if ch.replayed_response is not None:
        return replayed(ch, plan.return_internals)
    if os.environ.get(_CRASH_AFTER_CHARGE) == "1":
        os._exit(17)
    _notify("charge", mechanism=plan.mechanism, epsilon=cost.epsilon)
    body["budget"] = budget_block(ch)
    return PrivateAnswer(visible(body, plan.return_internals), ch.epsilon_spent, ch.remaining)


def budget_block(ch: ChargeResult) -> dict[str, Any]:
    return {"epsilon": ch.epsilon_budget, "delta": ch.delta_budget, "epsilon_spent": ch.epsilon_spent,
            "epsilon_remaining": ch.remaining}


def replayed(ch: ChargeResult, return_internals: bool) -> PrivateAnswer:
    body = dict(ch.replayed_response or {})
    body["budget"] = budget_block(ch)
    return PrivateAnswer(visible(body, return_internals), ch.epsilon_spent, ch.remaining, replayed=True)


def reused(ch: ChargeResult, return_internals: bool) -> PrivateAnswer:
    """The stored answer of an identical earlier request, released again at zero cost."""
    body = dict(ch.replayed_response or {})
    body["reused"] = True
    first = ch.released_at.isoformat() if hasattr(ch.released_at, "isoformat") else ch.released_at
    body["reuse"] = {"ledger_entry_id": ch.entry_id, "first_released_at": first, "epsilon_charged": 0.0,
                     "why": "the released answer of an identical earlier request (post-processing: no new cost)"}
    body["budget"] = budget_block(ch)
    return PrivateAnswer(visible(body, return_internals), ch.epsilon_spent, ch.remaining, reused=True)


def require_scope(caller: Caller, return_internals: bool) -> None:
    if return_internals and not caller.has("internals"):
        raise Forbidden("return_internals needs an API key with the 'internals' scope",
                        param="return_internals", code="insufficient_scope")



async def dataset_task(rt: Runtime, caller: Caller, dataset_id: str) -> str:
    """The task of a dataset the caller may see (the OpenAI-compatible route dispatches on it)."""
    from app.store import datasets_repo

    def _get() -> str | None:
        with rt.db.session() as s:
            ds = datasets_repo.get_dataset(s, dataset_id, caller.tenant_id)
            return str(ds.task) if ds is not None else None

    task = await run_sync(_get)
    if task is None:
        raise dataset_not_found(dataset_id)
    return task
