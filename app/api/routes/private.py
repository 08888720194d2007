"""``POST /v1/private/classify``: a classification answer from a private exemplar set."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Request
from pydantic import ConfigDict, Field

from app.api.json_route import JSONRoute
from app.jsonbody import JSONBody

from app.answers.classify import classify as classify_answer
from app.api.answer_http import QUERY_MAX_CHARS, IncludeQuery, client_gone, respond
from app.api.auth import Principal, require
from app.api.deps import RuntimeDep
from app.api.schemas import AdjacencyName, ClassificationAnswer, ClassifyMechanism, MechanismList

router = APIRouter(route_class=JSONRoute, prefix="/v1/private", tags=["private inference"])


class ClassifyRequest(JSONBody):
    model_config = ConfigDict(extra="forbid")

    dataset_id: str = Field(min_length=1, max_length=64)
    query: str = Field(min_length=1, max_length=QUERY_MAX_CHARS)
    mechanism: ClassifyMechanism = Field(default="rnm", description="see GET /v1/private/mechanisms")
    epsilon: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    delta: float | None = Field(default=None, gt=0, lt=1, allow_inf_nan=False)
    partitions: int | None = Field(default=None, ge=1, le=1000)
    shots_per_partition: int | None = Field(default=None, ge=1, le=1000)
    adjacency: AdjacencyName | None = None
    calibrate: bool | None = Field(default=None, description="contextual calibration of the label scores")
    model: str | None = None
    return_internals: bool = False
    seed: int | None = Field(default=None, ge=0, le=2**53 - 1, description="noise seed; only when DPICL_ALLOW_SEEDED_NOISE")
    reuse: bool = Field(default=True, description="false: a fresh answer, charged, even when an identical "
                                                  "request's answer was released before")
    params: dict[str, Any] = Field(default_factory=dict, description="further mechanism parameters")

    def mechanism_params(self) -> dict[str, Any]:
        common = {k: getattr(self, k) for k in ("epsilon", "delta", "partitions", "shots_per_partition",
                                                "adjacency", "calibrate")}
        return {**self.params, **{k: v for k, v in common.items() if v is not None}}


@router.post("/classify", response_model=ClassificationAnswer)
async def classify(
    request: Request,
    body: ClassifyRequest,
    rt: RuntimeDep,
    principal: Annotated[Principal, Depends(require("infer"))],
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key", max_length=200)] = None,
    include: IncludeQuery = None,
):
    ans = await classify_answer(
        rt, principal, dataset_id=body.dataset_id, query=body.query, mechanism=body.mechanism,
        params=body.mechanism_params(), model=body.model, return_internals=body.return_internals, seed=body.seed,
        idempotency_key=idempotency_key, reuse=body.reuse, client_gone=client_gone(request),
    )
    return respond(ans, include)


@router.get("/mechanisms", response_model=MechanismList, response_model_exclude_unset=True)
async def mechanisms(_: Annotated[Principal, Depends(require("infer", "audit", "admin"))]):
    from app.mechanisms import get_mechanism, mechanism_names

    return {"object": "list", "data": [
        {"name": n, "is_private": get_mechanism(n).is_private} for n in mechanism_names()]}
