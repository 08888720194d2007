from __future__ import annotations

from fastapi import APIRouter

from app.api.json_route import JSONRoute
from app.api.deps import RuntimeDep
from app.api.errors import APIError
from app.api.schemas import ModelList, ModelObject
from app.llm.remote.transport import public_url

router = APIRouter(route_class=JSONRoute, tags=["models"])


def _model_object(rt, name: str) -> dict:
    m = rt.models[name]
    return {
        "id": name,
        "object": "model",
        "created": int(rt.started_at),
        "owned_by": "dpicl",
        "kind": m.spec.kind,
        "backend": m.spec.backend,
        # public: a remote model's URL without its credentials (app.llm.remote.transport.public_url)
        "source": public_url(m.spec.source),
        "default": name == rt.settings.default_lm,
        "capabilities": m.capabilities().to_dict(),
    }


@router.get("/v1/models", response_model=ModelList, response_model_exclude_unset=True)
async def list_models(rt: RuntimeDep):
    return {"object": "list", "data": [_model_object(rt, n) for n in rt.models]}


@router.get("/v1/models/{model_id:path}", response_model=ModelObject, response_model_exclude_unset=True)
async def get_model(model_id: str, rt: RuntimeDep):
    if model_id not in rt.models:
        raise APIError(404, f"model {model_id!r} is not served here", param="model_id", code="model_not_found")
    return _model_object(rt, model_id)
