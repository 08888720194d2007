"""The FastAPI application: ``create_app(settings)``."""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool

from app import __version__
from app.api.errors import install_error_handlers
from app.api.routes import health, models
from app.config import Settings, get_settings
from app.runtime import Runtime

log = logging.getLogger("dpicl.api")

ROUTERS = [health.router, models.router]
# Feature routers, mounted when their module is present.
OPTIONAL_ROUTERS = (
    "app.api.routes.privacy",
    "app.api.routes.datasets",
    "app.api.routes.private",
    "app.api.routes.private_generate",
    "app.api.routes.openai_compat",
    "app.api.routes.audits",
)
# Feature packages that need start-up/shutdown work export ``install(app)``
# (e.g. the in-process job runner appends to app.state.startup_hooks).
OPTIONAL_INSTALLERS = ("app.jobs.service",)


def _optional_routers() -> list:
    """Routers of feature packages; each module exports ``router``."""
    import importlib

    out = []
    for mod in OPTIONAL_ROUTERS:
        try:
            out.append(importlib.import_module(mod).router)
        except ModuleNotFoundError as exc:
            if not (exc.name and mod.startswith(exc.name)):
                raise
    return out


def create_app(settings: Settings | None = None, *, runtime: Runtime | None = None) -> FastAPI:
    """Build the app. ``runtime`` may be passed pre-built (tests share loaded models)."""
    settings = settings or (runtime.settings if runtime else get_settings())

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        rt = runtime or await run_in_threadpool(Runtime.create, settings)
        app.state.runtime = rt
        # Models load before uvicorn accepts traffic: /v1/health is 200 only when ready.
        await run_in_threadpool(rt.load_models)
        hooks: list[Any] = app.state.startup_hooks
        for hook in hooks:
            await hook(app, rt)
        rt.ready = True
        from app.api.auth import auth_mode

        if await run_in_threadpool(auth_mode, rt) == "open":
            log.warning("dpicl is running OPEN (no API keys): every caller has every scope. Local use only; "
                        "create an admin key with `dpicl keys create --scopes admin` to require keys.")
        log.info("dpicl %s ready (database %s, models %s)", __version__, rt.db.dialect, sorted(rt.models))
        try:
            yield
        finally:
            rt.ready = False
            for hook in reversed(app.state.shutdown_hooks):
                await hook(app, rt)
            if runtime is None:
                rt.close()

    app = FastAPI(
        title="dpicl",
        version=__version__,
        description="Differentially private in-context learning, served and audited.",
        lifespan=lifespan,
    )
    app.state.startup_hooks = []
    app.state.shutdown_hooks = []
    install_error_handlers(app)
    from app.api import metrics

    metrics.install(app)  # GET /metrics and the request-latency middleware
    for r in ROUTERS + _optional_routers():
        app.include_router(r)
    import importlib

    for mod in OPTIONAL_INSTALLERS:
        try:
            installer = importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            if not (exc.name and mod.startswith(exc.name)):
                raise
            continue
        installer.install(app)
    return app
