"""Each API query parameter is named once. Every one the API declares takes a single value,
and FastAPI keeps only the last of a repeated name: ``?status=completed&status=rejected``
answered the rejected operations alone, a filter silently dropped (found by a defect hunt,
stop 35; the in-process API refuses a list as a filter). A repeated name is now refused,
before routing, as ``invalid_request`` (decisions H15)."""

from __future__ import annotations

from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Receive, Scope, Send

from blackops.http.responses import error_response
from blackops.http.scopes import route_path
from domain.errors import InvalidRequest

#: Names are quoted in the refusal up to this length.
_NAME_SHOWN = 64


def repeated_name(query: bytes) -> str | None:
    """The first parameter name ``query`` holds twice (as the router decodes names), or
    ``None``."""
    seen: set[str] = set()
    for name, _ in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
        if name in seen:
            return name
        seen.add(name)
    return None


class OneValueEach:
    """Refuses an API request (``/v1/...``) whose query names a parameter twice."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        query = scope.get("query_string", b"") if scope["type"] == "http" else b""
        name = repeated_name(query) if query and route_path(scope).startswith("/v1/") else None
        if name is None:
            await self.app(scope, receive, send)
            return
        shown = name if len(name) <= _NAME_SHOWN else name[:_NAME_SHOWN] + "..."
        refusal = InvalidRequest(f"query.{shown}: given more than once; it takes one value")
        await error_response(refusal)(scope, receive, send)
