"""An ASGI request's path as the router matches it: without the prefix the API is served
under (``root_path``: a proxy's ``--root-path``, a ``Mount``). Middleware that looked at the
whole path missed every route behind a prefix (found by review, stop 35)."""

from __future__ import annotations

from starlette.types import Scope


def route_path(scope: Scope) -> str:
    """The decoded path below ``root_path``."""
    return _below(str(scope.get("path", "")), str(scope.get("root_path", "")))


def raw_route_path(scope: Scope) -> str:
    """The path as sent (percent-encoding kept, so ``%2F`` stays in its segment) below
    ``root_path``."""
    raw = scope.get("raw_path")
    if not isinstance(raw, bytes):
        return route_path(scope)
    return _below(raw.decode("latin-1"), str(scope.get("root_path", "")))


def _below(path: str, prefix: str) -> str:
    return path[len(prefix) :] if prefix and path.startswith(prefix) else path
