"""Swagger UI (/docs) and ReDoc (/redoc) served offline, and ``/`` -> ``/ui``.

FastAPI's own /docs and /redoc pages load their JavaScript and CSS from a CDN, so they are blank on a machine
without internet, which is where dpicl is meant to run. The same assets ship inside the PyPI package
``fastapi-offline`` (pinned in pyproject.toml); we serve only its static files, under ``/apidocs-static``, and
build the two pages with FastAPI's own HTML helpers.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

STATIC_PREFIX = "/apidocs-static"


def assets_dir() -> Path:
    import fastapi_offline

    return Path(fastapi_offline.__file__).parent / "static"


def install_api_docs(app: FastAPI) -> None:
    """Call on an app built with ``docs_url=None, redoc_url=None``."""
    app.mount(STATIC_PREFIX, StaticFiles(directory=assets_dir()), name="apidocs-static")
    title = app.title

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url=app.openapi_url or "/openapi.json", title=f"{title} - API",
                                   swagger_js_url=f"{STATIC_PREFIX}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{STATIC_PREFIX}/swagger-ui.css",
                                   swagger_favicon_url=f"{STATIC_PREFIX}/favicon.png")

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        page = get_redoc_html(openapi_url=app.openapi_url or "/openapi.json", title=f"{title} - API reference",
                              redoc_js_url=f"{STATIC_PREFIX}/redoc.standalone.js",
                              redoc_favicon_url=f"{STATIC_PREFIX}/favicon.png", with_google_fonts=False)
        # ReDoc's footer loads its logo from cdn.redoc.ly: images from this server only, so the page never
        # reaches out (an offline machine would otherwise log a failed request on every view).
        page.headers["Content-Security-Policy"] = "img-src 'self' data:"
        return page

    @app.get("/", include_in_schema=False)
    async def root() -> RedirectResponse:
        # A person opening the server's address lands on the dashboard (which links /docs and /redoc).
        return RedirectResponse("/ui", status_code=307)
