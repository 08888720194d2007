"""Private generation: ``POST /v1/private/generate`` and the OpenAI-compatible route for generation
sets. Validate, cost before any model work (the budget forecast asks ``generation_cost`` the same
question), then the shared flow (app/answers/flow.py).

Exemplar text never appears in a response, error or log: internals hold exemplar indices and
numbers, and the candidates of ESA are zero-shot. ``full_context`` (every exemplar in the prompt, no
guarantee) is served only when ``DPICL_ALLOW_NONPRIVATE_BASELINES`` is set; ``zero_shot`` reads no
exemplar and is never charged.
"""

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

DEFAULT_DELTA = 1e-6  # per answer; ESA/clip-softmax/PoE also carry RDP curves the ledger composes
MAX_TOKENS_LIMIT = 512


def is_charged_generation(mech: Any) -> bool:
    """Whether a generation answer of ``mech`` is charged (``zero_shot`` reads no exemplar; the forecast asks the same)."""
    return bool(mech.reads_exemplars)


def generation_cost(rt: Runtime, mech: Any, exemplars: list[Any], query: str, *, epsilon: float | None,
                    delta: float | None, adjacency: str | None, account_adjacency: str | None,
                    max_tokens: int | None, template: dict[str, Any], params: dict[str, Any]
                    ) -> tuple[Any, dict[str, Any]]:
    """(request, privacy cost as the mechanism reports it) of one generation answer, before any model
    work: the one path shared by ``generate`` and the budget forecast. The charge is this cost
    (data-independent: max_tokens steps)."""
    from app.mechanisms.errors import MechanismParamError
    from app.mechanisms.generation import GenerationRequest

    if account_adjacency is not None:
        if adjacency is None:
            adjacency = account_adjacency
        elif mech.is_private and str(adjacency).strip().lower().replace("_", "-") != account_adjacency:
            raise InvalidRequest(f"this dataset's budget is accounted under {account_adjacency!r} adjacency",
                                 param="adjacency", code="adjacency_mismatch")
    if mech.is_private and epsilon is None:
        epsilon = 1.0
    try:
        req = GenerationRequest.build(
            exemplars if mech.reads_exemplars else [], query,
            epsilon=epsilon, delta=DEFAULT_DELTA if delta is None else delta,
            adjacency=adjacency or rt.settings.default_adjacency, max_tokens=max_tokens or 32,
            template=template, params=params,
        )
        cost = mech.cost(req)
    except (MechanismParamError, ValueError) as exc:
        raise mechanism_error(exc) from None
    return req, cost


async def generate(
    rt: Runtime,
    caller: Caller,
    *,
    dataset_id: str,
    query: str,
    mechanism: str,
    params: dict[str, Any],
    model: str | None,
    max_tokens: int | None,
    return_internals: bool,
    seed: int | None,
    idempotency_key: str | None,
    embedder: str | None = None,
    reuse: bool = True,
    client_gone: Callable[[], Awaitable[bool]] | None = None,
) -> PrivateAnswer:
    """One private generation, charged before release. ``params`` may carry ``epsilon``, ``delta``
    and ``adjacency`` beside the mechanism's own parameters (the OpenAI-compatible route passes
    them so)."""
    from app.mechanisms.errors import MechanismParamError
    from app.mechanisms.generation import get_generation_mechanism

    require_scope(caller, return_internals)
    try:
        mech = get_generation_mechanism(mechanism)
    except MechanismParamError as exc:
        raise mechanism_error(exc) from None
    if mech.name == "full_context" and not rt.settings.allow_nonprivate_baselines:
        raise InvalidRequest("mechanism 'full_context' puts the exemplars in the prompt without any privacy "
                             "guarantee; it is served only when DPICL_ALLOW_NONPRIVATE_BASELINES is set",
                             param="mechanism", code="not_private")
    try:
        lm = rt.get_model(model, "lm")
    except KeyError:
        raise NotFound(f"model {model!r} is not served here", param="model", code="model_not_found") from None
    emb = None
    if mech.needs_embedder:
        try:
            emb = rt.get_model(embedder, "embedder")
        except KeyError:
            raise NotFound(f"embedder {embedder!r} is not served here", param="embedder",
                           code="model_not_found") from None
    if mech.needs_decode_session and not hasattr(lm, "start_decode"):
        raise InvalidRequest(f"mechanism {mech.name!r} needs full-vocabulary logits step by step; model "
                             f"{lm.name!r} cannot give them", param="model", code="capability_missing")
    params = {k: v for k, v in dict(params or {}).items() if v is not None}
    epsilon = params.pop("epsilon", None)
    delta = params.pop("delta", None)
    adjacency = params.pop("adjacency", None)
    if not mech.is_private and (epsilon is not None or delta is not None):
        raise InvalidRequest(f"mechanism {mech.name!r} is not private: it takes no epsilon or delta",
                             param="epsilon", code="not_private")

    def prepare(s: Session) -> Work:
        ds = datasets_repo.get_dataset(s, dataset_id, caller.tenant_id)
        if ds is None:
            raise dataset_not_found(dataset_id)
        if ds.task != "generation":
            raise InvalidRequest(f"dataset {dataset_id!r} is a {ds.task} set; use /v1/private/classify",
                                 param="dataset_id", code="wrong_task")
        acc = budget_repo.get_account(s, dataset_id, caller.tenant_id)
        template = dict(ds.template or {})
        exemplars = datasets_repo.load_exemplars(s, dataset_id) if mech.reads_exemplars else []
        req, cost = generation_cost(rt, mech, exemplars, query, epsilon=epsilon, delta=delta, adjacency=adjacency,
                                    account_adjacency=acc.adjacency if acc is not None else None,
                                    max_tokens=max_tokens, template=template, params=params)
        request_params = {
            "query_sha256": query_digest(query),
            "epsilon": req.epsilon, "delta": req.delta, "adjacency": req.adjacency, "max_tokens": req.max_tokens,
            **json.loads(json.dumps(dict(req.params), default=str)), "model": lm.name,
        }
        # Seeded noise (tests, audits) is never reused, nor reuses another answer.
        rkey = reuse_key_of("generate", mech.name, query, request_params, template=template,
                            embedder=emb.name if emb is not None else None) if seed is None else None
        charged = is_charged_generation(mech)  # an uncharged cost (zero_shot) is never typed: it has no adjacency
        plan = AnswerPlan(dataset_id, mech.name, typed_cost(cost) if charged else None, charged, request_params,
                          rkey, rkey is not None and bool(ds.answer_reuse) and reuse, idempotency_key,
                          return_internals, acc)

        def compute(rng: np.random.Generator | None) -> dict[str, Any]:
            t0 = time.perf_counter()
            try:
                result = mech.run(req, lm, emb, rng)
            except (MechanismParamError, ValueError) as exc:
                raise mechanism_error(exc) from None
            full = result.to_dict(include_internals=True)
            return {
                "object": "private.generation",
                "dataset_id": dataset_id,
                "model": lm.name,
                "text": result.text,
                "mechanism": result.mechanism,
                "finish_reason": result.finish_reason,
                "usage": {"completion_tokens": result.tokens},
                "privacy": full["privacy"],
                "internals": full["internals"],  # stored with the charge for white-box audits; stripped unless asked
                "latency_ms": round((time.perf_counter() - t0) * 1000, 1),
                "reused": False,
            }

        return Work(plan, compute, lm)

    return await answer(rt, caller, prepare, seed=seed, client_gone=client_gone)
