"""Private answers: load the exemplar set, run the mechanism, charge the ledger, release.

Shared by ``POST /v1/private/classify`` and the OpenAI-compatible
``/v1/chat/completions``. The answer leaves only after its charge is committed;
the released body is stored on the ledger entry, so a retry with the same
``Idempotency-Key`` returns it without a second charge (also after a crash
between charge and release).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Callable

from fastapi.concurrency import run_in_threadpool

from app.api.auth import Principal
from app.api.errors import APIError
from app.budget.ledger import BudgetExhausted, Ledger, LedgerConflict, NoBudgetAccount
from app.runtime import Runtime
from app.store import budget_repo, datasets_repo

log = logging.getLogger("dpicl.private")

# A test-only fault: exit the process right after a charge commits (crash-recovery tests).
_CRASH_AFTER_CHARGE = "DPICL_TEST_CRASH_AFTER_CHARGE"


@dataclass
class PrivateAnswer:
    body: dict[str, Any]
    epsilon_spent: float
    epsilon_remaining: float
    replayed: bool = False
    budgeted: bool = True  # False: a public set's answer (no ledger, no budget headers)

    def headers(self) -> dict[str, str]:
        if not self.budgeted:
            return {"X-DPICL-Epsilon-Charged": "0"}
        return {
            "X-DPICL-Epsilon-Spent": f"{self.epsilon_spent:.6g}",
            "X-DPICL-Epsilon-Remaining": f"{self.epsilon_remaining:.6g}",
            **({"Idempotent-Replayed": "true"} if self.replayed else {}),
        }


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
    return APIError(422, str(exc), param=getattr(exc, "param", None), code="invalid_mechanism_params")


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
                    (ds.visibility or "private") == "public", ds.provenance)

    loaded = await run_in_threadpool(_load)
    if loaded is None:
        raise APIError(404, f"dataset {dataset_id!r} not found", param="dataset_id", code="dataset_not_found")
    task, labels, template, exemplars, acc, public, provenance = loaded
    if task != "classification":
        raise APIError(422, f"dataset {dataset_id!r} is a {task} set; use /v1/private/generate",
                       param="dataset_id", code="wrong_task")
    params = {k: v for k, v in params.items() if v is not None}
    if public or mech.name == "synthetic_icl":
        return await _classify_public(rt, principal, mech, lm, dataset_id, query, labels, template, exemplars,
                                      params, public, provenance, return_internals)
    if "adjacency" not in params and mech.is_private:
        params["adjacency"] = acc.adjacency
    if mech.is_private and params.get("adjacency") and params["adjacency"] != acc.adjacency:
        raise APIError(422, f"this dataset's budget is accounted under {acc.adjacency!r} adjacency",
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
        cost = mech.cost(parsed, n_exemplars=len(exemplars))
    except (MechanismParamError, ValueError) as exc:
        raise _mechanism_error(exc) from None
    ledger = Ledger(rt.db)
    charges = mech.is_private or mech.name != "zero_shot"
    request_params = {"query_sha256": hashlib.sha256(query.encode()).hexdigest()[:16],
                      **json.loads(json.dumps(parsed.to_dict(), default=str)), "model": lm.name}

    if charges:
        early = await replay_or_precheck(ledger, principal, dataset_id=dataset_id, cost=cost, mechanism=mech.name,
                                         params=request_params, idempotency_key=idempotency_key,
                                         return_internals=return_internals)
        if early is not None:
            return early

    rng = noise_rng(rt, seed)
    t0 = time.perf_counter()
    try:
        result = await run_for_tenant(principal, mech.classify, lm, exemplars, query, labels, template, parsed, rng)
    except (MechanismParamError, ValueError) as exc:
        raise _mechanism_error(exc) from None
    full = result.to_dict()
    body = {
        "object": "private.classification",
        "dataset_id": dataset_id,
        "model": lm.name,
        "label": result.label,
        "mechanism": result.mechanism,
        "privacy": full["privacy"],
        "internals": full["internals"],  # stored for white-box audits; stripped below unless asked
        "latency_ms": round((time.perf_counter() - t0) * 1000, 1),
    }
    if not charges:
        body["budget"] = None
        return PrivateAnswer(visible(body, return_internals), acc.epsilon_spent,
                             max(0.0, acc.epsilon_budget - acc.epsilon_spent))
    return await charge_and_release(
        ledger, principal, dataset_id=dataset_id, cost=full["privacy"], mechanism=mech.name,
        params=request_params, body=body, idempotency_key=idempotency_key, return_internals=return_internals)


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
        result = await run_for_tenant(principal, mech.classify, lm, exemplars, query, labels, template, parsed, None)
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


async def run_for_tenant(principal: Principal, fn: Callable[..., Any], *args: Any) -> Any:
    """The model work of one answer, in a worker thread, with remote (vLLM) prefix caches shared
    within the caller's tenant only (CVE-2025-46570 side channel); shared by every private route."""
    from app.llm.remote import cache_salt_scope

    def _run() -> Any:
        with cache_salt_scope(principal.tenant_id):
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
) -> PrivateAnswer | None:
    """Before any model work: an idempotent retry gets its stored answer back; a charge that cannot
    fit the budget is refused (429). None means: go on and compute the answer."""
    if idempotency_key:
        try:
            replay = await run_in_threadpool(
                ledger.replay, dataset_id=dataset_id, tenant_id=principal.tenant_id,
                idempotency_key=idempotency_key, mechanism=mechanism, params=params)
        except LedgerConflict:
            raise idempotency_conflict() from None
        if replay is not None:
            return replayed(replay, return_internals)
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
) -> PrivateAnswer:
    """Charge the ledger for a computed answer, then release it (shared by every private route)."""
    try:
        ch = await run_in_threadpool(
            ledger.charge, dataset_id=dataset_id, tenant_id=principal.tenant_id, cost=cost,
            mechanism=mechanism, params=params, response=body, key_id=principal.key_id,
            idempotency_key=idempotency_key)
    except BudgetExhausted as exc:
        raise budget_exhausted_error(exc) from None
    except LedgerConflict:
        raise idempotency_conflict() from None
    except NoBudgetAccount:
        raise APIError(404, f"dataset {dataset_id!r} not found", param="dataset_id", code="dataset_not_found") from None
    if ch.replayed_response is not None:
        return replayed(ch, return_internals)
    if os.environ.get(_CRASH_AFTER_CHARGE) == "1":
        os._exit(17)
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


def generation_entry():
    """The generation entry point (``app.api.routes.private_generate.generate``)."""
    try:
        from app.api.routes.private_generate import generate
    except ModuleNotFoundError:
        raise APIError(422, "private generation is not available on this server", param="dataset_id",
                       code="unsupported") from None
    return generate


def visible(body: dict[str, Any], return_internals: bool) -> dict[str, Any]:
    out = dict(body)
    if not return_internals:
        out.pop("internals", None)
    return out


def replayed(ch, return_internals: bool) -> PrivateAnswer:
    body = dict(ch.replayed_response)
    body["budget"] = budget_block(ch)
    return PrivateAnswer(visible(body, return_internals), ch.epsilon_spent, ch.remaining, replayed=True)
