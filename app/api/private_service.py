"""Private answers: load the exemplar set, run the mechanism, charge the ledger, release.

Shared by ``POST /v1/private/classify`` and the OpenAI-compatible
``/v1/chat/completions``. The answer leaves only after its charge is committed;
the released body is stored on the ledger entry, so a retry with the same
``Idempotency-Key`` returns it without a second charge (also after a crash
between charge and release). An identical request (same dataset, normalized query,
mechanism, parameters and model) gets the stored released answer back at no cost, marked
``reused`` (post-processing of a released answer; docs/privacy.md, "Answer reuse"),
unless the dataset opted out (``answer_reuse: false``) or the request asks ``reuse: false``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
import unicodedata
from dataclasses import dataclass
from collections.abc import Awaitable
from typing import Annotated, Any, Callable, Literal

from fastapi import Query
from fastapi.concurrency import run_in_threadpool

from app.api.auth import Principal
from app.api.errors import APIError
from app.budget.ledger import BudgetExhausted, Ledger, LedgerConflict, NoBudgetAccount
from app.runtime import Runtime
from app.store import budget_repo, datasets_repo

log = logging.getLogger("dpicl.private")

IncludeQuery = Annotated[Literal["accounting"] | None, Query(
    description="`accounting`: also return the RDP curve (`privacy.orders`, `privacy.rdp`) the ledger composes")]

# A test-only fault: exit the process right after a charge commits (crash-recovery tests).
_CRASH_AFTER_CHARGE = "DPICL_TEST_CRASH_AFTER_CHARGE"


@dataclass
class PrivateAnswer:
    body: dict[str, Any]
    epsilon_spent: float
    epsilon_remaining: float
    replayed: bool = False
    reused: bool = False
    budgeted: bool = True  # False: a public set's answer (no ledger, no budget headers)

    def headers(self) -> dict[str, str]:
        if not self.budgeted:
            return {"X-DPICL-Epsilon-Charged": "0"}
        return {
            "X-DPICL-Epsilon-Spent": f"{self.epsilon_spent:.6g}",
            "X-DPICL-Epsilon-Remaining": f"{self.epsilon_remaining:.6g}",
            **({"Idempotent-Replayed": "true"} if self.replayed else {}),
            **({"X-DPICL-Reused": "true"} if self.reused else {}),
        }


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


def budget_exhausted_error(exc: BudgetExhausted) -> APIError:
    return APIError(
        429,
        f"privacy budget exhausted: epsilon {exc.epsilon_spent:.6g} of {exc.epsilon_budget:.6g} spent, "
        f"{exc.remaining:.6g} remaining; this answer would bring it to {exc.epsilon_would_be:.6g}",
        code="budget_exhausted",
        param="epsilon",
        headers={"X-DPICL-Epsilon-Spent": f"{exc.epsilon_spent:.6g}",
                 "X-DPICL-Epsilon-Remaining": f"{exc.remaining:.6g}"},
    )


def _mechanism_error(exc: Exception) -> APIError:
    return APIError(422, str(getattr(exc, "message", exc)), param=getattr(exc, "param", None),
                    code="invalid_mechanism_params")


@dataclass(frozen=True)
class AnswerPlan:
    """One private answer after validation and costing, before any model work: what ``answer`` needs
    to replay, reuse, precheck, charge and release it (the flow shared by classify and generate)."""

    dataset_id: str
    mechanism: str
    cost: dict[str, Any] | None
    charged: bool
    request_params: dict[str, Any]
    reuse_key: str | None  # None: seeded noise (never reused, nor reusing another)
    may_reuse: bool
    idempotency_key: str | None
    return_internals: bool
    account: Any  # the dataset's budget account, for the headers of an uncharged answer
    # The HTTP client's disconnect probe (Starlette's request.is_disconnected), or None.
    client_gone: Callable[[], Awaitable[bool]] | None = None


async def _stop_if_gone(plan: AnswerPlan, when: str) -> None:
    """A client that has closed the connection is never sent this answer: stop before the model work,
    or after it but before the charge. Nothing is released, so nothing is charged (the model ran on
    private data, but an output no one receives leaks nothing); a retry with the same key starts over."""
    if plan.client_gone is not None and await plan.client_gone():
        raise APIError(499, f"the client closed the request {when}: nothing was released or charged",
                       code="client_closed_request")


async def answer(rt: Runtime, principal: Principal, plan: AnswerPlan, seed: int | None,
                 compute: Callable[[Any], Awaitable[dict[str, Any]]]) -> PrivateAnswer:
    """Idempotent replay or reuse, then the budget precheck (both before any model work), then
    ``compute(rng)`` (the model work; it returns the answer body with its ``privacy``), then the
    charge, then the release. An uncharged mechanism (zero_shot) skips the ledger."""
    ledger = Ledger(rt.db)
    if plan.charged:
        early = await replay_or_precheck(
            ledger, principal, dataset_id=plan.dataset_id, cost=plan.cost, mechanism=plan.mechanism,
            params=plan.request_params, idempotency_key=plan.idempotency_key, return_internals=plan.return_internals,
            reuse_key=plan.reuse_key if plan.may_reuse else None)
        if early is not None:
            return early
    await _stop_if_gone(plan, "before the model work")
    body = await compute(noise_rng(rt, seed))
    await _stop_if_gone(plan, "before its answer was charged")
    if not plan.charged:
        body["budget"] = None
        acc = plan.account
        spent = acc.epsilon_spent if acc is not None else 0.0
        left = max(0.0, acc.epsilon_budget - acc.epsilon_spent) if acc is not None else 0.0
        return PrivateAnswer(visible(body, plan.return_internals), spent, left)
    return await charge_and_release(
        ledger, principal, dataset_id=plan.dataset_id, cost=body["privacy"], mechanism=plan.mechanism,
        params=plan.request_params, body=body, idempotency_key=plan.idempotency_key,
        return_internals=plan.return_internals, reuse_key=plan.reuse_key, reuse=plan.may_reuse)


def noise_rng(rt: Runtime, seed: int | None):
    from app.mechanisms.rng import secure_rng, seeded_rng

    if seed is None:
        return secure_rng()
    if not rt.settings.allow_seeded_noise:
        raise APIError(422, "a noise seed is accepted only when the server allows seeded noise "
                       "(DPICL_ALLOW_SEEDED_NOISE, tests and audits only)", param="seed", code="seed_not_allowed")
    return seeded_rng(seed)


async def classify(
    rt: Runtime,
    principal: Principal,
    *,
    dataset_id: str,
    query: str,
    mechanism: str,
    params: dict[str, Any],
    model: str | None,
    return_internals: bool,
    seed: int | None,
    idempotency_key: str | None,
    reuse: bool = True,
    client_gone: Callable[[], Awaitable[bool]] | None = None,
) -> PrivateAnswer:
    from app.mechanisms import get_mechanism
    from app.mechanisms.errors import MechanismParamError

    if return_internals and not principal.has("internals"):
        raise APIError(403, "return_internals needs an API key with the 'internals' scope",
                       param="return_internals", code="insufficient_scope")
    try:
        mech = get_mechanism(mechanism)
    except MechanismParamError as exc:
        raise _mechanism_error(exc) from None
    try:
        lm = rt.get_model(model, "lm")
    except KeyError:
        raise APIError(404, f"model {model!r} is not served here", param="model", code="model_not_found") from None

    def _load():
        with rt.db.session() as s:
            ds = datasets_repo.get_dataset(s, dataset_id, principal.tenant_id)
            if ds is None:
                return None
            acc = budget_repo.get_account(s, dataset_id, principal.tenant_id)
            return (ds.task, list(ds.labels), dict(ds.template), datasets_repo.load_exemplars(s, dataset_id), acc,
                    bool(ds.answer_reuse), (ds.visibility or "private") == "public", ds.provenance)

    loaded = await run_in_threadpool(_load)
    if loaded is None:
        raise APIError(404, f"dataset {dataset_id!r} not found", param="dataset_id", code="dataset_not_found")
    task, labels, template, exemplars, acc, dataset_reuse, public, provenance = loaded
    if task != "classification":
        raise APIError(422, f"dataset {dataset_id!r} is a {task} set; use /v1/private/generate",
                       param="dataset_id", code="wrong_task")
    if public or mech.name == "synthetic_icl":
        params = {k: v for k, v in params.items() if v is not None}
        return await _classify_public(rt, principal, mech, lm, dataset_id, query, labels, template, exemplars,
                                      params, public, provenance, return_internals)
    parsed, cost = classification_cost(rt, mech, params, account_adjacency=acc.adjacency,
                                       n_exemplars=len(exemplars))
    request_params = {"query_sha256": hashlib.sha256(query.encode()).hexdigest()[:16],
                      **json.loads(json.dumps(parsed.to_dict(), default=str)), "model": lm.name}
    # Seeded noise is for tests and audits: such an answer is never reused, nor reuses another.
    rkey = reuse_key_of("classify", mech.name, query, request_params, labels=labels, template=template) \
        if seed is None else None
    plan = AnswerPlan(dataset_id, mech.name, cost, is_charged(mech), request_params, rkey,
                      rkey is not None and dataset_reuse and reuse, idempotency_key, return_internals, acc,
                      client_gone)

    async def compute(rng: Any) -> dict[str, Any]:
        t0 = time.perf_counter()
        try:
            result = await run_for_tenant(principal, mech.classify, lm, exemplars, query, labels, template, parsed,
                                          rng, lm=lm, deadline_s=rt.settings.request_deadline_seconds)
        except (MechanismParamError, ValueError) as exc:
            raise _mechanism_error(exc) from None
        full = result.to_dict()
        return {
            "object": "private.classification",
            "dataset_id": dataset_id,
            "model": lm.name,
            "label": result.label,
            "mechanism": result.mechanism,
            "privacy": full["privacy"],
            "internals": full["internals"],  # stored for white-box audits; stripped below unless asked
            "latency_ms": round((time.perf_counter() - t0) * 1000, 1),
            "reused": False,
        }

    return await answer(rt, principal, plan, seed, compute)


def is_charged(mech) -> bool:
    """Whether a classification answer of ``mech`` is charged to the ledger (the forecast asks the same)."""
    return mech.is_private or mech.name != "zero_shot"


def classification_cost(rt: Runtime, mech, params: dict[str, Any], *, account_adjacency: str,
                        n_exemplars: int) -> tuple[Any, dict[str, Any]]:
    """(parsed params, privacy cost) of one classification answer, before any model work: the one
    path shared by ``classify`` and the budget forecast, so both see the same charge."""
    from app.mechanisms.errors import MechanismParamError

    params = {k: v for k, v in params.items() if v is not None}
    if "adjacency" not in params and mech.is_private:
        params["adjacency"] = account_adjacency
    if mech.is_private and params.get("adjacency") and params["adjacency"] != account_adjacency:
        raise APIError(422, f"this dataset's budget is accounted under {account_adjacency!r} adjacency",
                       param="adjacency", code="adjacency_mismatch")
    if not mech.is_private:
        if any(k in params for k in ("epsilon", "delta")):
            raise APIError(422, f"mechanism {mech.name!r} is not private: it takes no epsilon or delta",
                           param="epsilon", code="not_private")
        if mech.name != "zero_shot" and not rt.settings.allow_nonprivate_baselines:
            raise APIError(422, f"mechanism {mech.name!r} puts the exemplars in the prompt without any privacy "
                           "guarantee; it is served only when DPICL_ALLOW_NONPRIVATE_BASELINES is set",
                           param="mechanism", code="not_private")
    try:
        parsed = mech.parse_params(params)
        cost = mech.cost(parsed, n_exemplars=n_exemplars)
    except (MechanismParamError, ValueError) as exc:
        raise _mechanism_error(exc) from None
    return parsed, cost


PUBLIC_MECHANISMS = ("synthetic_icl", "icl", "zero_shot")


async def _classify_public(rt, principal, mech, lm, dataset_id, query, labels, template, exemplars, params, public,
                           provenance, return_internals) -> PrivateAnswer:
    """A public (DP synthetic) set: ICL over its demonstrations is post-processing, charged nothing
    (the synthesize job paid once on the parent's ledger). ``synthetic_icl`` is refused on a private
    set: it would read private exemplars at a claimed epsilon of 0."""
    from app.mechanisms.baselines import synthetic_cost
    from app.mechanisms.errors import MechanismParamError

    if not public:
        raise APIError(422, f"synthetic_icl answers from a public synthetic set; dataset {dataset_id!r} is private "
                       "(make one with the synthesize job)", param="dataset_id", code="dataset_not_public")
    if mech.name not in PUBLIC_MECHANISMS:
        raise APIError(422, f"dataset {dataset_id!r} is a public synthetic set: use one of "
                       f"{', '.join(PUBLIC_MECHANISMS)} (no privacy mechanism is needed)", param="mechanism",
                       code="public_dataset")
    if any(k in params for k in ("epsilon", "delta", "partitions", "shots_per_partition", "adjacency")):
        raise APIError(422, f"mechanism {mech.name!r} on a public set takes no privacy parameters",
                       param=next(k for k in ("epsilon", "delta", "partitions", "shots_per_partition", "adjacency")
                                  if k in params), code="not_private")
    try:
        parsed = mech.parse_params(params)
    except (MechanismParamError, ValueError) as exc:
        raise _mechanism_error(exc) from None
    t0 = time.perf_counter()
    try:
        result = await run_for_tenant(principal, mech.classify, lm, exemplars, query, labels, template, parsed, None,
                                      lm=lm, deadline_s=rt.settings.request_deadline_seconds)
    except (MechanismParamError, ValueError) as exc:
        raise _mechanism_error(exc) from None
    full = result.to_dict()
    privacy = synthetic_cost(parsed.to_dict()) if mech.name != "zero_shot" else full["privacy"]
    privacy["mechanism"] = mech.name
    p = provenance or {}
    body = {
        "object": "private.classification",
        "dataset_id": dataset_id,
        "model": lm.name,
        "label": result.label,
        "mechanism": result.mechanism,
        "privacy": privacy,
        "synthetic_source": {k: p.get(k) for k in ("parent_dataset_id", "epsilon", "delta", "adjacency", "mechanism")},
        "internals": full["internals"],
        "latency_ms": round((time.perf_counter() - t0) * 1000, 1),
        "budget": None,
    }
    return PrivateAnswer(visible(body, return_internals), 0.0, 0.0, budgeted=False)


async def run_for_tenant(principal: Principal, fn: Callable[..., Any], *args: Any,
                         lm: Any = None, deadline_s: float | None = None) -> Any:
    """The model work of one answer, in a worker thread, as the caller's tenant: prefix caches
    (in-process LRU, remote vLLM cache_salt; CVE-2025-46570) and batches are shared within the
    tenant only (app/llm/tenancy.py). Shared by every private route. A model whose batch queue is
    full refuses at once (Overloaded: 503 + Retry-After) before any work; ``deadline_s`` bounds
    the time the work may wait in the queue (DeadlineExceeded: 503). Both come before the charge."""
    from app.llm.tenancy import deadline_scope, tenant_scope

    from app.api.metrics import note_mechanism

    mech_name = getattr(getattr(fn, "__self__", None), "name", None)
    if mech_name:
        note_mechanism(mech_name)
    sched = getattr(lm, "scheduler", None)
    if sched is not None:
        with deadline_scope(deadline_s):
            sched.admit()

    def _run() -> Any:
        with tenant_scope(principal.tenant_id), deadline_scope(deadline_s):
            return fn(*args)

    return await run_in_threadpool(_run)


async def replay_or_precheck(
    ledger: Ledger,
    principal: Principal,
    *,
    dataset_id: str,
    cost: dict[str, Any],
    mechanism: str,
    params: dict[str, Any],
    idempotency_key: str | None,
    return_internals: bool,
    reuse_key: str | None = None,
) -> PrivateAnswer | None:
    """Before any model work: an idempotent retry gets its stored answer back; an identical request
    (``reuse_key`` given: reuse allowed) gets the stored released answer at no cost, also when the
    budget is spent; a charge that cannot fit the budget is refused (429). None means: go on and
    compute the answer."""
    if idempotency_key:
        try:
            replay = await run_in_threadpool(
                ledger.replay, dataset_id=dataset_id, tenant_id=principal.tenant_id,
                idempotency_key=idempotency_key, mechanism=mechanism, params=params)
        except LedgerConflict:
            raise idempotency_conflict() from None
        if replay is not None:
            return replayed(replay, return_internals)
    if reuse_key:
        again = await run_in_threadpool(ledger.reuse, dataset_id=dataset_id, tenant_id=principal.tenant_id,
                                        reuse_key=reuse_key)
        if again is not None:
            return reused(again, return_internals)
    try:
        await run_in_threadpool(ledger.precheck, dataset_id=dataset_id, tenant_id=principal.tenant_id, cost=cost)
    except BudgetExhausted as exc:
        raise budget_exhausted_error(exc) from None
    except NoBudgetAccount:
        raise APIError(404, f"dataset {dataset_id!r} not found", param="dataset_id", code="dataset_not_found") from None
    return None


async def charge_and_release(
    ledger: Ledger,
    principal: Principal,
    *,
    dataset_id: str,
    cost: dict[str, Any],
    mechanism: str,
    params: dict[str, Any],
    body: dict[str, Any],
    idempotency_key: str | None,
    return_internals: bool,
    reuse_key: str | None = None,
    reuse: bool = False,
) -> PrivateAnswer:
    """Charge the ledger for a computed answer, then release it (shared by every private route).
    ``reuse_key`` is stored with the charge; with ``reuse``, an identical answer charged meanwhile is
    released instead (this one is dropped, never charged)."""
    try:
        ch = await run_in_threadpool(
            ledger.charge, dataset_id=dataset_id, tenant_id=principal.tenant_id, cost=cost,
            mechanism=mechanism, params=params, response=body, key_id=principal.key_id,
            idempotency_key=idempotency_key, reuse_key=reuse_key, reuse=reuse)
    except BudgetExhausted as exc:
        raise budget_exhausted_error(exc) from None
    except LedgerConflict:
        raise idempotency_conflict() from None
    except NoBudgetAccount:
        raise APIError(404, f"dataset {dataset_id!r} not found", param="dataset_id", code="dataset_not_found") from None
    if ch.reused:
        return reused(ch, return_internals)
    if ch.replayed_response is not None:
        return replayed(ch, return_internals)
    if os.environ.get(_CRASH_AFTER_CHARGE) == "1":
        os._exit(17)
    from app.api.metrics import count_charge

    count_charge(mechanism, cost.get("epsilon") or 0.0)
    body["budget"] = budget_block(ch)
    return PrivateAnswer(visible(body, return_internals), ch.epsilon_spent, ch.remaining)


def idempotency_conflict() -> APIError:
    return APIError(409, "this Idempotency-Key was used for a different request", param="Idempotency-Key",
                    code="idempotency_conflict")


def budget_block(ch) -> dict[str, Any]:
    return {"epsilon": ch.epsilon_budget, "delta": ch.delta_budget, "epsilon_spent": ch.epsilon_spent,
            "epsilon_remaining": ch.remaining}


async def dataset_task(rt: Runtime, principal: Principal, dataset_id: str) -> str:
    def _get():
        with rt.db.session() as s:
            ds = datasets_repo.get_dataset(s, dataset_id, principal.tenant_id)
            return ds.task if ds else None

    task = await run_in_threadpool(_get)
    if task is None:
        raise APIError(404, f"dataset {dataset_id!r} not found", param="dataset_id", code="dataset_not_found")
    return task


# The accountant's native form of a cost: RDP curves (~100 orders each). The ledger composes
# them; an answer carries them only with ``?include=accounting``.
ACCOUNTING_KEYS = ("orders", "rdp")
ACCOUNTING_PARAMS = ("rdp_without_ptr_delta",)


def noise_of(privacy: dict[str, Any]) -> dict[str, Any] | None:
    """The noise an answer got, from its cost's parameters: distribution, which parameter the
    scale is (sigma, b or a sampling temperature) and its value. None for non-private answers."""
    if not privacy.get("is_private", privacy.get("epsilon") is not None):
        return None
    mech = str(privacy.get("mechanism") or "")
    p = privacy.get("params") or {}

    def block(distribution: str, parameter: str, scale: Any, **extra: Any) -> dict[str, Any]:
        return {"distribution": distribution, "parameter": parameter, "scale": scale, **extra}

    if mech.startswith("rnm") and p.get("scale") is not None:
        dist = str(p.get("noise") or mech.removeprefix("rnm-"))
        return block(dist, "sigma" if dist == "gaussian" else "b", p["scale"])
    if mech == "ksa":
        # Gumbel on the keyword-count gaps (report-noisy-max), Gaussian in the PTR test.
        return block("gumbel", "b", p.get("gumbel_scale"),
                     ptr=block("gaussian", "sigma", p.get("ptr_noise_std")))
    if p.get("sigma") is not None:
        return block("gaussian", "sigma", p["sigma"])
    if p.get("inverse_temperature"):
        # Exponential mechanism (PoE): sampling from softmax(inverse_temperature * utility).
        return block("exponential-mechanism", "temperature", 1.0 / float(p["inverse_temperature"]))
    if p.get("temperature") is not None:
        return block("exponential-mechanism", "temperature", p["temperature"])
    return None


def compact_privacy(privacy: dict[str, Any] | None, include_accounting: bool = False) -> dict[str, Any] | None:
    """An answer's ``privacy``: epsilon, delta, adjacency, mechanism, its parameters and ``noise``;
    the RDP curve only when asked (it is always on the ledger entry)."""
    if not isinstance(privacy, dict):
        return privacy
    out = {k: v for k, v in privacy.items() if include_accounting or k not in ACCOUNTING_KEYS}
    if not include_accounting and isinstance(out.get("params"), dict):
        out["params"] = {k: v for k, v in out["params"].items() if k not in ACCOUNTING_PARAMS}
    out["noise"] = noise_of(privacy)
    return out


def presented(body: dict[str, Any], include_accounting: bool) -> dict[str, Any]:
    """The answer as released to the caller (the ledger keeps the full body)."""
    if "privacy" not in body:
        return body
    return {**body, "privacy": compact_privacy(body["privacy"], include_accounting)}


def visible(body: dict[str, Any], return_internals: bool) -> dict[str, Any]:
    out = dict(body)
    if not return_internals:
        out.pop("internals", None)
    return out


def replayed(ch, return_internals: bool) -> PrivateAnswer:
    body = dict(ch.replayed_response)
    body["budget"] = budget_block(ch)
    return PrivateAnswer(visible(body, return_internals), ch.epsilon_spent, ch.remaining, replayed=True)


def reused(ch, return_internals: bool) -> PrivateAnswer:
    """The stored answer of an identical earlier request, released again at zero cost."""
    body = dict(ch.replayed_response)
    body["reused"] = True
    first = ch.released_at.isoformat() if hasattr(ch.released_at, "isoformat") else ch.released_at
    body["reuse"] = {"ledger_entry_id": ch.entry_id, "first_released_at": first, "epsilon_charged": 0.0,
                     "why": "the released answer of an identical earlier request (post-processing: no new cost)"}
    body["budget"] = budget_block(ch)
    return PrivateAnswer(visible(body, return_internals), ch.epsilon_spent, ch.remaining, reused=True)
