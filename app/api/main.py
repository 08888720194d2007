"""The FastAPI application: ``create_app(settings)``."""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool

from app import __version__
from app.api import body_limit, input_guard
from app.api.errors import install_error_handlers
from app.api.routes import (
    audits,
    budget_forecast,
    datasets,
    health,
    models,
    openai_compat,
    privacy,
    private,
    private_generate,
    samples,
)
from app.config import Settings, get_settings
from app.jobs import service as jobs_service
from app.runtime import Runtime
from app.ui import routes as ui_routes

log = logging.getLogger("dpicl.api")

# Every router, registered explicitly: a module that fails to import fails start-up instead of
# silently removing a feature.
ROUTERS = [health.router, models.router, privacy.router, datasets.router, private.router, private_generate.router,
           budget_forecast.router, openai_compat.router, audits.router, samples.router,
           ui_routes.router]  # the web dashboard (/ui, app/ui)


def _strict_json_bodies(router) -> None:
    """Every route that takes a JSON body parses it with app.jsonbody.loads (a repeated key is a 422): a router
    made without ``route_class=JSONRoute`` fails start-up instead of silently letting the last key win."""
    from fastapi.routing import APIRoute

    from app.api.json_route import JSONRoute

    for route in router.routes:
        if isinstance(route, APIRoute) and not isinstance(route, JSONRoute):
            raise RuntimeError(f"{route.path}: its router needs route_class=JSONRoute (app/api/json_route.py)")


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
        docs_url=None,  # served offline by app/api/apidocs.py (FastAPI's pages load from a CDN)
        redoc_url=None,
    )
    app.state.startup_hooks = []
    app.state.shutdown_hooks = []
    install_error_handlers(app)
    from app.api import auth_middleware, log_redact, metrics, shutdown

    log_redact.install()  # a key sent in a URL never reaches the access log (docs/security.md)

    # Middleware: the last installed runs first. Outermost to innermost: metrics (times every answer, 401s
    # included), the key (before anything reads the body or looks at the input: no key, no work), bad bytes
    # in paths and queries (422), the body limit (413 before or while the body is read). Around them all, the
    # shutdown cut-off: a request cancelled by SIGTERM's graceful timeout is a 503, not a 500.
    body_limit.install(app, settings)  # DPICL_MAX_BODY_BYTES / DPICL_MAX_UPLOAD_BYTES: 413 (docs/security.md)
    input_guard.install(app)  # NUL / lone surrogates in paths, queries and bodies: 422 (docs/security.md)
    auth_middleware.install(app)  # the key before the body (docs/security.md#who-may-call-what)
    metrics.install(app)  # GET /metrics and the request-latency middleware
    shutdown.install(app)  # 503 shutting_down for a request cut off at shutdown (app/api/shutdown.py)
    for r in ROUTERS:
        _strict_json_bodies(r)
        app.include_router(r)
    # Start-up/shutdown work of the job runner (appends to app.state.startup_hooks).
    jobs_service.install(app)
    from app.api.openapi import install_openapi

    install_openapi(app, settings)
    from app.api.apidocs import install_api_docs

    install_api_docs(app)
    return app
