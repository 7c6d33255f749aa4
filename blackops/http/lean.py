"""Lean routes: a documented route answered by a plain Starlette route placed in front of it.

FastAPI re-derives, on every request, how to read each declared parameter and dependency
of a route (about a third of the event loop's time on a submit, decisions F130). For the
hottest routes a hand-written endpoint calls the same dependencies in the same order and
checks the same headers, and is matched first; the FastAPI route stays in the app, so the
OpenAPI document is generated from it as before. A lean endpoint must answer exactly as
the documented route does (``tests/http/test_lean_routes.py`` compares the two).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.routing import Match, Route
from starlette.types import Scope

Endpoint = Callable[[Request], Awaitable[Response]]


class LeanRoute(Route):
    """A Starlette route that names itself in the scope, as FastAPI's routes do (the
    request timer labels a request by ``scope["route"].path``)."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child_scope = super().matches(scope)
        if match is not Match.NONE:
            child_scope["route"] = self
        return match, child_scope


def serve_lean(api: FastAPI, method: str, path: str, endpoint: Endpoint) -> None:
    """Answer ``method path`` with ``endpoint``, ahead of the route that documents it."""
    api.router.routes.insert(
        0, LeanRoute(path, endpoint, methods=[method], include_in_schema=False)
    )
