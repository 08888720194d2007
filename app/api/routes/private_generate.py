"""``POST /v1/private/generate``: a generated text from a private exemplar set (HTTP only; the
service is ``app.answers.generate.generate``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Request
from pydantic import ConfigDict, Field, model_validator

from app.api.json_route import JSONRoute
from app.api.auth import Principal, require
from app.api.deps import RuntimeDep
from app.api.errors import APIError
from app.answers.generate import MAX_TOKENS_LIMIT, generate
from app.api.answer_http import QUERY_MAX_CHARS, IncludeQuery, client_gone, respond
from app.api.schemas import AdjacencyName, GenerateMechanism, GenerationAnswer, GenerationMechanismList
from app.jsonbody import JSONBody

router = APIRouter(route_class=JSONRoute, prefix="/v1/private", tags=["private inference"])


class GenerateRequest(JSONBody):
    # Exactly one of query / instruction (null counts as absent), as the validator below checks.
    model_config = ConfigDict(extra="forbid", json_schema_extra={"oneOf": [
        {"required": ["query"], "properties": {"query": {"type": "string"}, "instruction": {"type": "null"}}},
        {"required": ["instruction"], "properties": {"instruction": {"type": "string"}, "query": {"type": "null"}}},
    ]})

    dataset_id: str = Field(min_length=1, max_length=64)
    query: str | None = Field(default=None, min_length=1, max_length=QUERY_MAX_CHARS,
                              description="the input to answer (or give `instruction`)")
    instruction: str | None = Field(default=None, min_length=1, max_length=QUERY_MAX_CHARS,
                                    description="a generation instruction, used as the query")
    mechanism: GenerateMechanism = Field(default="esa", description="see GET /v1/private/generate/mechanisms")
    epsilon: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    delta: float | None = Field(default=None, gt=0, lt=1, allow_inf_nan=False)
    adjacency: AdjacencyName | None = None
    max_tokens: int = Field(default=32, ge=1, le=MAX_TOKENS_LIMIT)
    params: dict[str, Any] = Field(default_factory=dict, description="mechanism parameters (GET /v1/private/generate/mechanisms)")
    model: str | None = None
    embedder: str | None = None
    return_internals: bool = False
    seed: int | None = Field(default=None, ge=0, le=2**53 - 1, description="noise seed; only when DPICL_ALLOW_SEEDED_NOISE")
    reuse: bool = Field(default=True, description="false: a fresh answer, charged, even when an identical "
                                                  "request's answer was released before")

    @model_validator(mode="after")
    def _one_query(self) -> "GenerateRequest":
        if self.query is None and self.instruction is None:
            raise ValueError("query: give `query` (or `instruction`)")
        if self.query is not None and self.instruction is not None:
            raise ValueError("instruction: give `query` or `instruction`, not both")
        return self


@router.post("/generate", response_model=GenerationAnswer)
async def private_generate(
    request: Request,
    body: GenerateRequest,
    rt: RuntimeDep,
    principal: Annotated[Principal, Depends(require("infer"))],
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key", max_length=200)] = None,
    include: IncludeQuery = None,
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
        embedder=body.embedder, reuse=body.reuse, client_gone=client_gone(request),
    )
    return respond(ans, include)


@router.get("/generate/mechanisms", response_model=GenerationMechanismList, response_model_exclude_unset=True)
async def generation_mechanisms(_: Annotated[Principal, Depends(require("infer", "audit", "admin"))]):
    from app.mechanisms.generation import GENERATION_MECHANISMS

    return {"object": "list", "data": [
        {"name": m.name, "is_private": m.is_private, "params": list(m.params), "needs_embedder": m.needs_embedder,
         "description": m.description}
        for m in GENERATION_MECHANISMS.values()]}
