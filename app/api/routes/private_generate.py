"""``POST /v1/private/generate``: a generated text from a private exemplar set.

Same flow as ``/v1/private/classify`` (``app.api.private_service``): validate,
compute the cost before any model work (the mechanisms calibrate from public
parameters only), precheck the budget, run the mechanism in a worker thread,
charge the ledger, release. ``generate`` below is the one entry point that
also serves the OpenAI-compatible route for generation datasets.

Exemplar text never appears in a response, error or log: internals hold
exemplar indices and numbers, and the candidates of ESA are zero-shot.
``full_context`` (every exemplar in the prompt, no guarantee) is served only
when ``DPICL_ALLOW_NONPRIVATE_BASELINES`` is set; ``zero_shot`` reads no
exemplar and is never charged.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.api.auth import Principal, require
from app.api.deps import RuntimeDep
from app.api.errors import APIError
from app.api.private_service import (
    PrivateAnswer,
    charge_and_release,
    noise_rng,
    replay_or_precheck,
    run_for_tenant,
    visible,
)
from app.runtime import Runtime
from app.store import budget_repo, datasets_repo

log = logging.getLogger("dpicl.private.generate")

router = APIRouter(prefix="/v1/private", tags=["private inference"])

DEFAULT_DELTA = 1e-6  # per answer; ESA/clip-softmax/PoE also carry RDP curves the ledger composes
MAX_TOKENS_LIMIT = 512


class GenerateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dataset_id: str = Field(min_length=1, max_length=64)
    query: str | None = Field(default=None, min_length=1, max_length=20_000,
                              description="the input to answer (or give `instruction`)")
    instruction: str | None = Field(default=None, min_length=1, max_length=20_000,
                                    description="a generation instruction, used as the query")
    mechanism: str = Field(default="esa", description="esa | ksa | clip_softmax | poe | mozo | zero_shot | full_context")
    epsilon: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    delta: float | None = Field(default=None, gt=0, lt=1, allow_inf_nan=False)
    adjacency: str | None = None
    max_tokens: int = Field(default=32, ge=1, le=MAX_TOKENS_LIMIT)
    params: dict[str, Any] = Field(default_factory=dict, description="mechanism parameters (GET /v1/private/generate/mechanisms)")
    model: str | None = None
    embedder: str | None = None
    return_internals: bool = False
    seed: int | None = Field(default=None, ge=0, description="noise seed; only when DPICL_ALLOW_SEEDED_NOISE")

    @model_validator(mode="after")
    def _one_query(self) -> "GenerateRequest":
        if self.query is None and self.instruction is None:
            raise ValueError("query: give `query` (or `instruction`)")
        if self.query is not None and self.instruction is not None:
            raise ValueError("instruction: give `query` or `instruction`, not both")
        return self


def _mech_error(exc: Exception) -> APIError:
    return APIError(422, str(getattr(exc, "message", exc)), param=getattr(exc, "param", None),
                    code="invalid_mechanism_params")





async def generate(
    rt: Runtime,
    principal: Principal,
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
) -> PrivateAnswer:
    """One private generation, charged before release. ``params`` may carry ``epsilon``, ``delta``
    and ``adjacency`` beside the mechanism's own parameters (the OpenAI-compatible route passes
    them so)."""
    from app.budget.ledger import Ledger
    from app.mechanisms.errors import MechanismParamError
    from app.mechanisms.generation import GenerationRequest, get_generation_mechanism

    if return_internals and not principal.has("internals"):
        raise APIError(403, "return_internals needs an API key with the 'internals' scope",
                       param="return_internals", code="insufficient_scope")
    try:
        mech = get_generation_mechanism(mechanism)
    except MechanismParamError as exc:
        raise _mech_error(exc) from None
    if mech.name == "full_context" and not rt.settings.allow_nonprivate_baselines:
        raise APIError(422, "mechanism 'full_context' puts the exemplars in the prompt without any privacy "
                       "guarantee; it is served only when DPICL_ALLOW_NONPRIVATE_BASELINES is set",
                       param="mechanism", code="not_private")
    try:
        lm = rt.get_model(model, "lm")
    except KeyError:
        raise APIError(404, f"model {model!r} is not served here", param="model", code="model_not_found") from None
    emb = None
    if mech.needs_embedder:
        try:
            emb = rt.get_model(embedder, "embedder")
        except KeyError:
            raise APIError(404, f"embedder {embedder!r} is not served here", param="embedder",
                           code="model_not_found") from None
    if mech.needs_decode_session and not hasattr(lm, "start_decode"):
        raise APIError(422, f"mechanism {mech.name!r} needs full-vocabulary logits step by step; model "
                       f"{lm.name!r} cannot give them", param="model", code="capability_missing")
    params = {k: v for k, v in dict(params or {}).items() if v is not None}
    epsilon = params.pop("epsilon", None)
    delta = params.pop("delta", None)
    adjacency = params.pop("adjacency", None)
    if not mech.is_private and (epsilon is not None or delta is not None):
        raise APIError(422, f"mechanism {mech.name!r} is not private: it takes no epsilon or delta",
                       param="epsilon", code="not_private")

    def _load():
        with rt.db.session() as s:
            ds = datasets_repo.get_dataset(s, dataset_id, principal.tenant_id)
            if ds is None:
                return None
            acc = budget_repo.get_account(s, dataset_id, principal.tenant_id)
            exemplars = datasets_repo.load_exemplars(s, dataset_id) if mech.reads_exemplars else []
            return ds.task, dict(ds.template or {}), exemplars, ds.exemplar_count, acc

    loaded = await run_in_threadpool(_load)
    if loaded is None:
        raise APIError(404, f"dataset {dataset_id!r} not found", param="dataset_id", code="dataset_not_found")
    task, template, exemplars, n_exemplars, acc = loaded
    if task != "generation":
        raise APIError(422, f"dataset {dataset_id!r} is a {task} set; use /v1/private/classify",
                       param="dataset_id", code="wrong_task")
    if acc is not None:
        if adjacency is None:
            adjacency = acc.adjacency
        elif mech.is_private and str(adjacency).strip().lower().replace("_", "-") != acc.adjacency:
            raise APIError(422, f"this dataset's budget is accounted under {acc.adjacency!r} adjacency",
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
        raise _mech_error(exc) from None

    charges = mech.name != "zero_shot"
    ledger = Ledger(rt.db)
    request_params = {
        "query_sha256": hashlib.sha256(query.encode()).hexdigest()[:16],
        "epsilon": req.epsilon, "delta": req.delta, "adjacency": req.adjacency, "max_tokens": req.max_tokens,
        **json.loads(json.dumps(dict(req.params), default=str)), "model": lm.name,
    }
    if charges:
        early = await replay_or_precheck(ledger, principal, dataset_id=dataset_id, cost=cost, mechanism=mech.name,
                                         params=request_params, idempotency_key=idempotency_key,
                                         return_internals=return_internals)
        if early is not None:
            return early

    rng = noise_rng(rt, seed)

    t0 = time.perf_counter()
    try:
        # The one call a ledger wraps: everything model-side happens here, in a worker thread.
        result = await run_for_tenant(principal, mech.run, req, lm, emb, rng)
    except (MechanismParamError, ValueError) as exc:
        raise _mech_error(exc) from None
    full = result.to_dict(include_internals=True)
    body = {
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
    }
    if not charges:
        body["budget"] = None
        spent = acc.epsilon_spent if acc is not None else 0.0
        left = max(0.0, acc.epsilon_budget - acc.epsilon_spent) if acc is not None else 0.0
        return PrivateAnswer(visible(body, return_internals), spent, left)
    return await charge_and_release(
        ledger, principal, dataset_id=dataset_id, cost=full["privacy"], mechanism=mech.name,
        params=request_params, body=body, idempotency_key=idempotency_key, return_internals=return_internals)


@router.post("/generate")
async def private_generate(
    body: GenerateRequest,
    rt: RuntimeDep,
    principal: Annotated[Principal, Depends(require("infer"))],
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key", max_length=200)] = None,
):
    params = {**body.params, "epsilon": body.epsilon, "delta": body.delta, "adjacency": body.adjacency}
    for reserved in ("epsilon", "delta", "adjacency"):
        if body.params.get(reserved) is not None:
            raise APIError(422, f"give {reserved} at the top level, not inside params", param=f"params.{reserved}",
                           code="invalid_value")
    ans = await generate(
        rt, principal, dataset_id=body.dataset_id, query=body.query or body.instruction or "",
        mechanism=body.mechanism, params=params, model=body.model, max_tokens=body.max_tokens,
        return_internals=body.return_internals, seed=body.seed, idempotency_key=idempotency_key,
        embedder=body.embedder,
    )
    return JSONResponse(ans.body, headers=ans.headers())


@router.get("/generate/mechanisms")
async def generation_mechanisms(_: Annotated[Principal, Depends(require("infer", "audit", "admin"))]):
    from app.mechanisms.generation import GENERATION_MECHANISMS

    return {"object": "list", "data": [
        {"name": m.name, "is_private": m.is_private, "params": list(m.params), "needs_embedder": m.needs_embedder,
         "description": m.description}
        for m in GENERATION_MECHANISMS.values()]}
