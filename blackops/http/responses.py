"""Answers in the taxonomy's shape: JSON bodies, ``{"error": {"code", "message"}}`` for every
refusal (python-contract §3), and the exception handlers that produce them."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException
from starlette.routing import BaseRoute, compile_path
from starlette.types import Scope

from blackops.http.head import answers_head
from blackops.http.scopes import route_path, segments_path, served_path
from blackops.jsonbody import render_json
from blackops.operations.results import OperationResult
from domain.errors import HTTP_STATUS, BackendUnavailable, BlackOpsError, InvalidRequest
from domain.json_text import scalar_text

log = logging.getLogger("blackops.http")
#: Framework-level refusals (no route, wrong method) in the taxonomy's body shape.
_FRAMEWORK_CODES = {401: "unauthorized", 403: "forbidden", 404: "not_found"}


class JSON(JSONResponse):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return render_json(content)


def error_response(error: BlackOpsError, **extra: Any) -> JSON:
    headers = {"WWW-Authenticate": "Bearer"} if error.code == "unauthorized" else None
    # A message quoting input with a lone surrogate would not render, and the answer would
    # become another error; spelled out (``\udXXX``), the refusal stays the one raised.
    body = {"error": {"code": error.code, "message": scalar_text(error.message)}}
    return JSON({**body, **extra}, status_code=error.http_status, headers=headers)


def result_response(result: OperationResult) -> JSON:
    """Inline answers: 200 with the outcome; a rejection is ``rejected`` (422) whatever
    its category, so it never reads as bad input (``rejection.category/code`` say which
    rule); a failure is ``operation_failed``."""
    body = result.to_dict()
    if result.rejection is not None:
        error = {"code": "rejected", "message": result.rejection.message or result.rejection.code}
        return JSON({"error": error, **body}, status_code=HTTP_STATUS["rejected"])
    if result.failure is not None:
        error = {"code": "operation_failed", "message": result.failure.message}
        return JSON({"error": error, **body}, status_code=HTTP_STATUS["operation_failed"])
    return JSON(body, status_code=200)


def accepted(view: dict[str, Any], request: Request) -> JSON:
    """202 with a control-plane Operation and its Location (under the API's prefix; the
    body's ``location`` is the API path, as every answer names routes)."""
    location = served_path(request.scope, view["location"])
    return JSON(view, status_code=202, headers={"Location": location})


def install_error_handlers(api: FastAPI) -> None:
    @api.exception_handler(BlackOpsError)
    async def blackops_error(_: Request, error: BlackOpsError) -> Response:
        if isinstance(error, BackendUnavailable) and error.detail:
            # Driver text names hosts and ports: the server log has it, the caller does not.
            log.warning("backend unavailable: %s (%s)", error.message, error.detail)
        return error_response(error)

    @api.exception_handler(HTTPException)
    async def framework_error(request: Request, error: HTTPException) -> Response:
        code = _FRAMEWORK_CODES.get(error.status_code, "invalid_request")
        body = {"error": {"code": code, "message": scalar_text(str(error.detail))}}
        headers = dict(error.headers or {})
        if error.status_code == 405:
            # Every method the path has, not only those of the one route that matched.
            headers["Allow"] = ", ".join(allowed_methods(api, request.scope))
        return JSON(body, status_code=error.status_code, headers=headers)

    @api.exception_handler(Exception)
    async def unexpected_error(request: Request, error: Exception) -> Response:
        # A bug, not an input problem: log it in full, tell the caller nothing internal.
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        message = "an internal error occurred; the server log has the details"
        return JSON({"error": {"code": "internal_error", "message": message}}, status_code=500)

    @api.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, error: RequestValidationError) -> Response:
        where = ", ".join(".".join(str(p) for p in e["loc"]) for e in error.errors()[:3])
        return error_response(InvalidRequest(f"invalid request: {where}"))


def every_route(api: FastAPI) -> Iterator[BaseRoute]:
    """Every route ``api`` serves, those its included routers hold too (``include_router``
    keeps them under the route it adds)."""
    routes = list(api.routes)
    while routes:
        route = routes.pop()
        included = getattr(route, "original_router", None)
        if included is not None:
            routes.extend(included.routes)
        else:
            yield route


def allowed_methods(api: FastAPI, scope: Scope) -> list[str]:
    """The methods the published document gives the path template the request's path
    matches: by its segments (an instance id ``a%2Fb`` is one), else as the router decodes
    it (``/v1/journal%2Fexport`` is the export it runs)."""
    table: list[tuple[re.Pattern[str], list[str]]] | None = getattr(api.state, "allow", None)
    if table is None:
        table = [
            (compile_path(template)[0], sorted(method.upper() for method in methods))
            for template, methods in api.openapi()["paths"].items()
        ]
        api.state.allow = table
    found: set[str] = set()
    for path in (segments_path(scope), route_path(scope)):
        found = {method for pattern, methods in table if pattern.match(path) for method in methods}
        if found:
            break
    else:  # a route left out of the document (the console's pages): the router's own
        path = route_path(scope)
        for route in every_route(api):
            regex = getattr(route, "path_regex", None)
            if regex is not None and regex.match(path):
                found.update(getattr(route, "methods", None) or ())
    if "GET" in found and answers_head(scope):
        found.add("HEAD")  # blackops/http/head.py answers it for a GET that writes nothing
    return sorted(found)
