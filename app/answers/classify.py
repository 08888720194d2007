"""Private classification: ``POST /v1/private/classify`` and the OpenAI-compatible route for
classification sets. Validation and cost come before any model work (the budget forecast asks
``classification_cost`` the same question), then the shared flow (app/answers/flow.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from app.answers.errors import InvalidRequest, NotFound, dataset_not_found
from app.answers.flow import (
    AnswerPlan,
    Caller,
    PrivateAnswer,
    Work,
    answer,
    mechanism_error,
    query_digest,
    require_scope,
    reuse_key_of,
    typed_cost,
)
from app.runtime import Runtime
from app.store import budget_repo, datasets_repo

PUBLIC_MECHANISMS = ("synthetic_icl", "icl", "zero_shot")
_PRIVACY_FIELDS = ("epsilon", "delta", "partitions", "shots_per_partition", "adjacency")


def is_charged(mech: Any) -> bool:
    """Whether a classification answer of ``mech`` is charged to the ledger (the forecast asks the same).
    A non-private mechanism that reads exemplars (``icl``) is charged its infinite epsilon: refused."""
    return bool(mech.is_private or mech.reads_exemplars)


def classification_cost(rt: Runtime, mech: Any, params: dict[str, Any], *, account_adjacency: str,
                        n_exemplars: int) -> tuple[Any, dict[str, Any]]:
    """(parsed params, privacy cost as the mechanism reports it) of one classification answer, before
    any model work: the one path shared by ``classify`` and the budget forecast, so both see the same charge."""
    from app.mechanisms.errors import MechanismParamError

    params = {k: v for k, v in params.items() if v is not None}
    if "adjacency" not in params and mech.is_private:
        params["adjacency"] = account_adjacency
    if mech.is_private and params.get("adjacency") and params["adjacency"] != account_adjacency:
        raise InvalidRequest(f"this dataset's budget is accounted under {account_adjacency!r} adjacency",
                             param="adjacency", code="adjacency_mismatch")
    if not mech.is_private:
        if any(k in params for k in ("epsilon", "delta")):
            raise InvalidRequest(f"mechanism {mech.name!r} is not private: it takes no epsilon or delta",
                                 param="epsilon", code="not_private")
        if mech.reads_exemplars and not rt.settings.allow_nonprivate_baselines:
            raise InvalidRequest(f"mechanism {mech.name!r} puts the exemplars in the prompt without any privacy "
                                 "guarantee; it is served only when DPICL_ALLOW_NONPRIVATE_BASELINES is set",
                                 param="mechanism", code="not_private")
    try:
        parsed = mech.parse_params(params)
        cost = mech.cost(parsed, n_exemplars=n_exemplars)
    except (MechanismParamError, ValueError) as exc:
        raise mechanism_error(exc) from None
    return parsed, cost


async def classify(
    rt: Runtime,
    caller: Caller,
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

    require_scope(caller, return_internals)
    try:
        mech = get_mechanism(mechanism)
    except MechanismParamError as exc:
        raise mechanism_error(exc) from None
    try:
        lm = rt.get_model(model, "lm")
    except KeyError:
        raise NotFound(f"model {model!r} is not served here", param="model", code="model_not_found") from None

    def run(parsed: Any, exemplars: list[Any], labels: list[str], template: dict[str, Any],
            rng: np.random.Generator | None) -> Any:
        try:
            return mech.classify(lm, exemplars, query, labels, template, parsed, rng)
        except (MechanismParamError, ValueError) as exc:
            raise mechanism_error(exc) from None

    def prepare(s: Session) -> Work:
        ds = datasets_repo.get_dataset(s, dataset_id, caller.tenant_id)
        if ds is None:
            raise dataset_not_found(dataset_id)
        if ds.task != "classification":
            raise InvalidRequest(f"dataset {dataset_id!r} is a {ds.task} set; use /v1/private/generate",
                                 param="dataset_id", code="wrong_task")
        acc = budget_repo.get_account(s, dataset_id, caller.tenant_id)
        labels, template = list(ds.labels), dict(ds.template)
        exemplars = datasets_repo.load_exemplars(s, dataset_id)
        if (ds.visibility or "private") == "public" or mech.name == "synthetic_icl":
            return _public_work(mech, lm, ds, dataset_id, labels, template, exemplars, params, return_internals,
                                run)
        if acc is None:  # a private set opens its account in the transaction that creates it; a public one has none
            raise dataset_not_found(dataset_id)
        parsed, cost = classification_cost(rt, mech, params, account_adjacency=acc.adjacency,
                                           n_exemplars=len(exemplars))
        request_params = {"query_sha256": query_digest(query),
                          **json.loads(json.dumps(parsed.to_dict(), default=str)), "model": lm.name}
        # Seeded noise is for tests and audits: such an answer is never reused, nor reuses another.
        rkey = reuse_key_of("classify", mech.name, query, request_params, labels=labels, template=template) \
            if seed is None else None
        charged = is_charged(mech)  # an uncharged cost (zero_shot) is never typed: it has no adjacency
        plan = AnswerPlan(dataset_id, mech.name, typed_cost(cost) if charged else None, charged, request_params,
                          rkey, rkey is not None and bool(ds.answer_reuse) and reuse, idempotency_key,
                          return_internals, acc)

        def compute(rng: np.random.Generator | None) -> dict[str, Any]:
            t0 = time.perf_counter()
            full = run(parsed, exemplars, labels, template, rng).to_dict()
            return {
                "object": "private.classification",
                "dataset_id": dataset_id,
                "model": lm.name,
                "label": full["label"],
                "mechanism": full["mechanism"],
                "privacy": full["privacy"],
                "internals": full["internals"],  # stored for white-box audits; stripped unless asked
                "latency_ms": round((time.perf_counter() - t0) * 1000, 1),
                "reused": False,
            }

        return Work(plan, compute, lm)

    return await answer(rt, caller, prepare, seed=seed, client_gone=client_gone)


def _public_work(mech: Any, lm: Any, ds: Any, dataset_id: str, labels: list[str], template: dict[str, Any],
                 exemplars: list[Any], params: dict[str, Any], return_internals: bool,
                 run: Callable[..., Any]) -> Work:
    """A public (DP synthetic) set: ICL over its demonstrations is post-processing, charged nothing
    (the synthesize job paid once on the parent's ledger). ``synthetic_icl`` is refused on a private
    set: it would read private exemplars at a claimed epsilon of 0."""
    from app.mechanisms.baselines import synthetic_cost
    from app.mechanisms.errors import MechanismParamError

    if (ds.visibility or "private") != "public":
        raise InvalidRequest(f"synthetic_icl answers from a public synthetic set; dataset {dataset_id!r} is private "
                             "(make one with the synthesize job)", param="dataset_id", code="dataset_not_public")
    if mech.name not in PUBLIC_MECHANISMS:
        raise InvalidRequest(f"dataset {dataset_id!r} is a public synthetic set: use one of "
                             f"{', '.join(PUBLIC_MECHANISMS)} (no privacy mechanism is needed)", param="mechanism",
                             code="public_dataset")
    params = {k: v for k, v in params.items() if v is not None}
    given = next((k for k in _PRIVACY_FIELDS if k in params), None)
    if given is not None:
        raise InvalidRequest(f"mechanism {mech.name!r} on a public set takes no privacy parameters",
                             param=given, code="not_private")
    try:
        parsed = mech.parse_params(params)
    except (MechanismParamError, ValueError) as exc:
        raise mechanism_error(exc) from None
    p = dict(ds.provenance or {})
    plan = AnswerPlan(dataset_id, mech.name, None, False, {}, None, False, None, return_internals, None,
                      budgeted=False)

    def compute(rng: np.random.Generator | None) -> dict[str, Any]:
        t0 = time.perf_counter()
        full = run(parsed, exemplars, labels, template, None).to_dict()
        privacy = synthetic_cost(parsed.to_dict()) if mech.name != "zero_shot" else full["privacy"]
        privacy["mechanism"] = mech.name
        return {
            "object": "private.classification",
            "dataset_id": dataset_id,
            "model": lm.name,
            "label": full["label"],
            "mechanism": full["mechanism"],
            "privacy": privacy,
            "synthetic_source": {k: p.get(k) for k in ("parent_dataset_id", "epsilon", "delta", "adjacency",
                                                       "mechanism")},
            "internals": full["internals"],
            "latency_ms": round((time.perf_counter() - t0) * 1000, 1),
            "budget": None,
        }

    return Work(plan, compute, lm)
