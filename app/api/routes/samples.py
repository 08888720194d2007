"""``/v1/samples``: the sample tasks that ship with dpicl (app/icl/samples.py), listed and loaded as private
exemplar sets of the caller's tenant, so a new user can start from realistic sizes without writing a script."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path
from fastapi.concurrency import run_in_threadpool
from pydantic import ConfigDict, Field

from app.api.json_route import JSONRoute
from app.api.auth import SCOPES, require
from app.api.dataset_schemas import BudgetIn, DatasetMeta
from app.api.dataset_service import store_dataset
from app.api.deps import RuntimeDep, TenantDep
from app.api.errors import APIError
from app.api.schemas import DatasetObject, SampleList
from app.icl.samples import SAMPLES, load_sample, sample_names
from app.jsonbody import JSONBody, VisibleText

router = APIRouter(route_class=JSONRoute, prefix="/v1/samples", tags=["datasets"])

SampleName = Annotated[str, Path(max_length=100, description=f"one of {', '.join(sorted(SAMPLES))}")]


class SampleLoad(JSONBody):
    model_config = ConfigDict(extra="forbid")
    name: VisibleText | None = Field(default=None, min_length=1, max_length=200,
                             description="name of the new dataset (default: the sample's name)")
    budget: BudgetIn | None = None
    answer_reuse: bool = True


def _sample(name: str):
    try:
        return load_sample(name)
    except ValueError as exc:
        raise APIError(404, str(exc), param="name", code="sample_not_found") from None


@router.get("", response_model=SampleList, response_model_exclude_unset=True,
            dependencies=[Depends(require(*SCOPES))], summary="The bundled sample tasks")
async def list_samples() -> dict[str, Any]:
    data = await run_in_threadpool(lambda: [load_sample(n).summary() for n in sample_names()])
    return {"object": "list", "data": data}


@router.post("/{name}/load", status_code=201, response_model=DatasetObject, response_model_exclude_unset=True,
             dependencies=[Depends(require("admin"))], summary="Load a sample task as a new private dataset")
async def load(name: SampleName, rt: RuntimeDep, tenant: TenantDep, body: SampleLoad | None = None) -> dict[str, Any]:
    sample = _sample(name)
    body = body or SampleLoad()
    meta = DatasetMeta(name=body.name or sample.name, task=sample.task,  # type: ignore[arg-type]
                       labels=list(sample.labels) if sample.labels else None, budget=body.budget,
                       answer_reuse=body.answer_reuse)
    if len(sample.exemplars) > rt.settings.max_exemplars:
        raise APIError(422, f"the sample has {len(sample.exemplars)} exemplars, more than DPICL_MAX_EXEMPLARS "
                       f"({rt.settings.max_exemplars})", param="name", code="too_many_exemplars")
    rows = list(sample.exemplars)
    return await run_in_threadpool(store_dataset, rt, tenant, meta, rows, dict(sample.template))
