"""The API's documentation pages, ``/docs`` (Swagger UI) and ``/redoc``, served whole from here.

FastAPI's own pages load their scripts from a CDN, so offline (the usual GPU cluster) they are
blank. These load the copies fastapi-offline ships (Swagger UI, ReDoc, MIT licensed), which the
service serves under ``/docs-assets``; no font or icon comes from elsewhere either. ReDoc's
footer draws its vendor's logo from a CDN whatever its options: that address is blanked in the
script served, and the logo (an image that hides itself when it cannot load) is left out.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import fastapi_offline
from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles

ASSETS_DIR = Path(fastapi_offline.__file__).parent / "static"
ASSETS_URL = "/docs-assets"
REDOC_LOGO_URL = b"https://cdn.redoc.ly/redoc/logo-mini.svg"


@cache
def redoc_script() -> bytes:
    """ReDoc's script with its footer logo's CDN address blanked (read once)."""
    return (ASSETS_DIR / "redoc.standalone.js").read_bytes().replace(REDOC_LOGO_URL, b"")


def install_docs(app: FastAPI) -> None:
    """Serve ``/docs`` and ``/redoc`` with their assets from the package (build ``app`` with
    ``docs_url=None, redoc_url=None`` so FastAPI's CDN pages are not there too)."""

    @app.get(f"{ASSETS_URL}/redoc.standalone.js", include_in_schema=False)
    async def redoc_js() -> Response:  # before the mount, which would serve the file as is
        headers = {"Cache-Control": "public, max-age=86400"}
        return Response(redoc_script(), media_type="text/javascript", headers=headers)

    app.mount(ASSETS_URL, StaticFiles(directory=ASSETS_DIR), name="docs-assets")

    async def page(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        draw = PAGES[request.scope["route"].path]
        return draw(f"{root}{app.openapi_url}", f"{root}{ASSETS_URL}", app.title)

    for path in PAGES:
        app.add_api_route(path, page, include_in_schema=False)


def swagger_ui(document: str, assets: str, title: str) -> HTMLResponse:
    """Swagger UI's page for the OpenAPI ``document``, its files from ``assets``."""
    files = {"js": "swagger-ui-bundle.js", "css": "swagger-ui.css", "favicon": "favicon.png"}
    urls: dict[str, Any] = {f"swagger_{kind}_url": f"{assets}/{n}" for kind, n in files.items()}
    return get_swagger_ui_html(
        openapi_url=document, title=f"{title} - Swagger UI", oauth2_redirect_url=None, **urls
    )


def redoc(document: str, assets: str, title: str) -> HTMLResponse:
    """ReDoc's page for the OpenAPI ``document``, its files from ``assets``, no web fonts."""
    return get_redoc_html(
        openapi_url=document,
        title=f"{title} - ReDoc",
        redoc_js_url=f"{assets}/redoc.standalone.js",
        redoc_favicon_url=f"{assets}/favicon.png",
        with_google_fonts=False,
    )


PAGES: dict[str, Callable[[str, str, str], HTMLResponse]] = {"/docs": swagger_ui, "/redoc": redoc}
