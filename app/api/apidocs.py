"""Swagger UI (/docs) and ReDoc (/redoc) served offline, and ``/`` -> ``/ui``.

FastAPI's own /docs and /redoc pages load their JavaScript and CSS from a CDN, so they are blank on a machine
without internet, which is where dpicl is meant to run. The same assets ship inside the PyPI package
``fastapi-offline`` (pinned in pyproject.toml); we serve only its static files, under ``/apidocs-static``, and
build the two pages with FastAPI's own HTML helpers.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Path as PathParam
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse

from app.api.errors import error_body

STATIC_PREFIX = "/apidocs-static"
# The only files served (a fixed list: no path from the request reaches the file system).
ASSETS = {"swagger-ui-bundle.js": "text/javascript", "swagger-ui.css": "text/css",
          "redoc.standalone.js": "text/javascript", "favicon.png": "image/png"}


def assets_dir() -> Path:
    import fastapi_offline

    return Path(fastapi_offline.__file__).parent / "static"


def install_api_docs(app: FastAPI) -> None:
    """Call on an app built with ``docs_url=None, redoc_url=None``."""
    title = app.title
    folder = assets_dir()

    @app.get(STATIC_PREFIX + "/{name}", include_in_schema=False)
    async def asset(name: str = PathParam(max_length=64)):
        if name not in ASSETS:
            return JSONResponse(error_body(f"no API-docs asset {name!r}", "not_found_error", "name"), status_code=404)
        return FileResponse(folder / name, media_type=ASSETS[name],
                            headers={"Cache-Control": "public, max-age=86400"})

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
