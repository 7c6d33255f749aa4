"""The API's documentation pages, ``/docs`` (Swagger UI) and ``/redoc``, served from this
origin only (decisions H10).

FastAPI's own pages load their scripts from a CDN. The web console (``/ui/``) shares this
origin, and its session cookie is sent to every path of it, so a script another host serves
into ``/docs`` could read the console's pages and act with the signed-in session. Here the
scripts are files of an installed package (``fastapi-offline``'s copies of Swagger UI and
ReDoc) and ours (the page's start-up), served under ``/docs/assets/``, and each page's
Content-Security-Policy lets nothing else run or load.
"""

from __future__ import annotations

import hashlib
from functools import cache
from html import escape
from importlib.resources import files
from importlib.resources.abc import Traversable

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, Response

from blackops.errors import NotFound

ASSETS_PATH = "/docs/assets"
#: What each page may use: its own origin's scripts, styles and the schema; the viewers set
#: style attributes and ReDoc's search runs in a worker it builds from a blob.
DOCS_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; "
    "style-src 'self' 'unsafe-inline'; img-src 'self' data:; worker-src 'self' blob:; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}
_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
          ".png": "image/png"}  # fmt: skip


def _assets() -> dict[str, Traversable]:
    """Each servable file by its name under ``/docs/assets/``: the viewers' and ours."""
    vendored = files("fastapi_offline") / "static"
    ours = files("blackops.http") / "static"
    return {
        "swagger-ui-bundle.js": vendored / "swagger-ui-bundle.js",
        "swagger-ui.css": vendored / "swagger-ui.css",
        "redoc.standalone.js": vendored / "redoc.standalone.js",
        "favicon.png": vendored / "favicon.png",
        "swagger-start.js": ours / "swagger-start.js",
    }


def _page(title: str, icon: str, head: str, body: str) -> HTMLResponse:
    html = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title>"
        f'<link rel="icon" href="{icon}">{head}</head>'
        f"<body>{body}</body></html>"
    )
    return HTMLResponse(html, headers=DOCS_HEADERS)


def install(api: FastAPI) -> None:
    """Serve ``/docs``, ``/redoc`` and their assets (create the app with ``docs_url=None``,
    ``redoc_url=None``); none is in the schema, and none needs a token."""
    assets = _assets()

    @cache  # read once, on the first page view (2.8 MB the process otherwise never holds)
    def content(name: str) -> bytes:
        return assets[name].read_bytes()

    @cache
    def version(name: str) -> str:
        return hashlib.sha256(content(name)).hexdigest()[:16]

    def url(root: str, name: str) -> str:
        """An asset's address, named by its content: a browser keeps it until it changes."""
        return f"{root}{ASSETS_PATH}/{name}?v={version(name)}"

    @api.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = escape(request.scope.get("root_path", ""))
        return _page(
            f"{api.title} - Swagger UI",
            url(root, "favicon.png"),
            f'<link rel="stylesheet" href="{url(root, "swagger-ui.css")}">',
            f'<div id="swagger-ui" data-openapi-url="{root}{api.openapi_url}"></div>'
            f'<script src="{url(root, "swagger-ui-bundle.js")}"></script>'
            f'<script src="{url(root, "swagger-start.js")}"></script>',
        )

    @api.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = escape(request.scope.get("root_path", ""))
        return _page(
            f"{api.title} - ReDoc",
            url(root, "favicon.png"),
            "",
            f'<redoc spec-url="{root}{api.openapi_url}"></redoc>'
            f'<script src="{url(root, "redoc.standalone.js")}"></script>',
        )

    @api.get(ASSETS_PATH + "/{name}", include_in_schema=False)
    async def asset(name: str, v: str | None = None) -> Response:
        if name not in assets:
            raise NotFound(f"no documentation asset named {name!r}")
        # Named by its content (``?v=``, as the pages link it): kept for a year; otherwise
        # asked again each time, so an upgrade is never hidden behind a cached copy.
        current = v == version(name)
        cached = "public, max-age=31536000, immutable" if current else "no-cache"
        headers = {**DOCS_HEADERS, "Cache-Control": cached}
        media = _TYPES[name[name.rindex(".") :]]
        return Response(content(name), media_type=media, headers=headers)
