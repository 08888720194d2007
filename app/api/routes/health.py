from __future__ import annotations

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from app.api.json_route import JSONRoute
from app.api.deps import RuntimeDep
from app.api.schemas import Health

router = APIRouter(route_class=JSONRoute, tags=["service"])


@router.get("/v1/health", response_model=Health, responses={
    503: {"model": Health, "description": "Not ready: the database or a model is not available (the same body)"}})
async def health(rt: RuntimeDep):
    db = await run_in_threadpool(rt.database_status)
    configured = [m.name for m in rt.settings.models] if rt.settings.load_models else []
    loaded = sorted(rt.models)
    models_ok = all(name in rt.models for name in configured)
    ok = rt.ready and db["ok"] and models_ok
    from app.api.auth import OPEN_MODE_WARNING, auth_mode

    mode = await run_in_threadpool(auth_mode, rt) if db["ok"] else rt.settings.auth_mode
    body = {
        "status": "ok" if ok else "unavailable",
        "auth": {
            "mode": mode,
            "warning": OPEN_MODE_WARNING if mode == "open" else None,
        },
        "version": rt.version,
        "ready": rt.ready,
        "database": db,
        "models": {"configured": configured, "loaded": loaded, "errors": rt.model_errors},
        "extras": {k: v for k, v in rt.extras.items() if isinstance(v, (str, int, float, bool, dict, list))},
    }
    return JSONResponse(body, status_code=200 if ok else 503)
