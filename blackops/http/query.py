"""Each API query parameter is named once. Every one the API declares takes a single value,
and FastAPI keeps only the last of a repeated name: ``?status=completed&status=rejected``
answered the rejected operations alone, a filter silently dropped (found by a defect hunt,
stop 35; the in-process API refuses a list as a filter). A repeated name is now refused,
before routing, as ``invalid_request`` (decisions H15); a name the API declares nowhere is
ignored, repeated or not (a proxy's or a browser's cache-busting parameter)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Receive, Scope, Send

from blackops.http.responses import error_response
from blackops.http.scopes import route_path
from domain.errors import InvalidRequest

#: Names are quoted in the refusal up to this length.
_NAME_SHOWN = 64


def repeated_name(query: bytes, declared: Collection[str]) -> str | None:
    """The first parameter name of ``declared`` that ``query`` holds twice (as the router
    decodes names), or ``None``."""
    seen: set[str] = set()
    for name, _ in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
        if name in seen and name in declared:
            return name
        seen.add(name)
    return None


def declared_query_names(document: dict[str, Any]) -> frozenset[str]:
    """Every query parameter name an operation of the OpenAPI ``document`` declares."""
    return frozenset(
        parameter["name"]
        for methods in document.get("paths", {}).values()
        for operation in methods.values()
        if isinstance(operation, dict)
        for parameter in operation.get("parameters", [])
        if parameter.get("in") == "query"
    )


class OneValueEach:
    """Refuses an API request (``/v1/...``) whose query names a declared parameter twice.
    ``document`` gives the published OpenAPI document (read at the first request: every
    route is in place by then)."""

    def __init__(self, app: ASGIApp, document: Callable[[], dict[str, Any]]) -> None:
        self.app = app
        self._document = document
        self._declared: frozenset[str] | None = None

    def declared(self) -> frozenset[str]:
        if self._declared is None:
            self._declared = declared_query_names(self._document())
        return self._declared

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        query = scope.get("query_string", b"") if scope["type"] == "http" else b""
        api = query and route_path(scope).startswith("/v1/")
        name = repeated_name(query, self.declared()) if api else None
        if name is None:
            await self.app(scope, receive, send)
            return
        shown = name if len(name) <= _NAME_SHOWN else name[:_NAME_SHOWN] + "..."
        refusal = InvalidRequest(f"query.{shown}: given more than once; it takes one value")
        await error_response(refusal)(scope, receive, send)
