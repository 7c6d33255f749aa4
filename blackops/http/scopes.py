"""An ASGI request's path as the router matches it: without the prefix the API is served
under (``root_path``: a proxy's ``--root-path``, a ``Mount``). Middleware that looked at the
whole path missed every route behind a prefix (found by review, stop 35)."""

from __future__ import annotations

from urllib.parse import quote, unquote

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
    return _raw_below(raw.decode("latin-1"), str(scope.get("root_path", "")))


def segments_path(scope: Scope) -> str:
    """The path below ``root_path`` as its segments read: each percent-decoded, an encoded
    ``/`` kept as ``%2F`` inside its segment. For routes whose ids may hold ``/`` (an
    instance's): the decoded path splits an id ``a%2Fb`` in two, and the path as sent hides
    a route word spelled ``%65xport`` (found by a defect hunt, stop 37)."""
    segments = raw_route_path(scope).split("/")
    return "/".join(unquote(segment).replace("/", "%2F") for segment in segments)


def served_path(scope: Scope, path: str) -> str:
    """``path`` (an API path such as ``/v1/operations/ID``) as a client behind the same prefix
    must request it: a ``Location`` or ``Link`` header without the prefix sent a client whose
    base URL has a path to a 404 (found by a defect hunt, stop 35; the 202s and 201s by stop
    37's review)."""
    return quote(str(scope.get("root_path", "")), safe="/") + path


def _below(path: str, prefix: str) -> str:
    return path[len(prefix) :] if prefix and path.startswith(prefix) else path


def _raw_below(raw: str, prefix: str) -> str:
    """``raw`` (percent-encoded) below the decoded ``prefix``: past the first segments that
    decode to it. A client percent-encodes a space or a letter of the prefix (``/my%20api``
    under ``Mount("/my api")``): compared as strings, the prefix stayed in the path, and a
    HEAD of an instance's receipt ran the GET (found by review, stop 38)."""
    if not prefix or raw.startswith(prefix):
        return _below(raw, prefix)
    at = 0
    while (at := raw.find("/", at + 1)) != -1:
        if unquote(raw[:at]) == prefix:
            return raw[at:]
    return raw
