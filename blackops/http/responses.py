"""Answers in the taxonomy's shape: JSON bodies, ``{"error": {"code", "message"}}`` for every
refusal (python-contract §3), and the exception handlers that produce them."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from blackops.jsonbody import render_json
from blackops.operations.results import OperationResult
from domain.errors import HTTP_STATUS, BackendUnavailable, BlackOpsError, InvalidRequest

log = logging.getLogger("blackops.http")
#: A rejected operation answers with its category's status and taxonomy code.
REJECTION_CODES = {
    "validation": "invalid_params",
    "authorization": "forbidden",
    "not_found": "not_found",
    "conflict": "conflict",
    "business_rule": "rejected",
}
#: Framework-level refusals (no route, wrong method) in the taxonomy's body shape.
_FRAMEWORK_CODES = {401: "unauthorized", 403: "forbidden", 404: "not_found"}


class JSON(JSONResponse):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return render_json(content)


def error_response(error: BlackOpsError, **extra: Any) -> JSON:
    headers = {"WWW-Authenticate": "Bearer"} if error.code == "unauthorized" else None
    return JSON({**error.to_body(), **extra}, status_code=error.http_status, headers=headers)


def result_response(result: OperationResult) -> JSON:
    """Inline answers: 200 with the outcome; rejection/failure mapped to the taxonomy."""
    body = result.to_dict()
    if result.rejection is not None:
        code = REJECTION_CODES[result.rejection.category]
        error = {"code": code, "message": result.rejection.message or result.rejection.code}
        return JSON({"error": error, **body}, status_code=HTTP_STATUS[code])
    if result.failure is not None:
        error = {"code": "operation_failed", "message": result.failure.message}
        return JSON({"error": error, **body}, status_code=HTTP_STATUS["operation_failed"])
    return JSON(body, status_code=200)


def accepted(view: dict[str, Any]) -> JSON:
    """202 with a control-plane Operation and its Location."""
    return JSON(view, status_code=202, headers={"Location": view["location"]})


def install_error_handlers(api: FastAPI) -> None:
    @api.exception_handler(BlackOpsError)
    async def blackops_error(_: Request, error: BlackOpsError) -> Response:
        if isinstance(error, BackendUnavailable) and error.detail:
            # Driver text names hosts and ports: the server log has it, the caller does not.
            log.warning("backend unavailable: %s (%s)", error.message, error.detail)
        return error_response(error)

    @api.exception_handler(HTTPException)
    async def framework_error(_: Request, error: HTTPException) -> Response:
        code = _FRAMEWORK_CODES.get(error.status_code, "invalid_request")
        body = {"error": {"code": code, "message": str(error.detail)}}
        return JSON(body, status_code=error.status_code, headers=error.headers)

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
