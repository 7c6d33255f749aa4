"""How routes describe themselves in ``/openapi.json``: the shared error body and the
statuses each route can answer, so the document says exactly what the service does.

Every route declares ``responses=errors(...)`` with the refusals it can give (every
authenticated route can answer 401 and 503; one that reads a path parameter, 404; one
that takes a body, 400 and 413). The error body is the taxonomy's (python-contract §3).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from domain.errors import HTTP_STATUS

ErrorCode = Literal[
    "invalid_params",
    "invalid_request",
    "unauthorized",
    "forbidden",
    "unknown_instance",
    "not_found",
    "instance_exists",
    "instance_terminal",
    "dependency_conflict",
    "resource_busy",
    "document_too_large",
    "event_queue_full",
    "backend_unavailable",
    "conflict",
    "rejected",
    "operation_failed",
    "internal_error",
]


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="forbid")
    code: ErrorCode
    message: str


class ErrorBody(BaseModel):
    """``{"error": {"code", "message"}}``; some answers add fields (an Inline run's
    rejection or failure carries the operation's completion beside it)."""

    model_config = ConfigDict(extra="allow")
    error: ErrorDetail


_WHAT = {
    400: "Malformed input (invalid_request, invalid_params)",
    401: "No valid bearer token (unauthorized)",
    403: "The caller's role is too low here (forbidden)",
    404: "Not found, or not visible to this caller (not_found, unknown_instance)",
    409: "A conflict with the current state",
    413: "A document over its limits (document_too_large)",
    422: "A business rejection (rejected)",
    429: "Too many unconsumed events (event_queue_full)",
    500: "The operation failed, or an internal error",
    503: "The journal store cannot be reached (backend_unavailable)",
}
#: What every authenticated route can answer.
AUTHENTICATED = (401, 503)


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` of a route: each status with the shared error body."""
    chosen = sorted({*AUTHENTICATED, *statuses})
    unknown = [s for s in chosen if s not in _WHAT]
    if unknown:
        raise ValueError(f"no description for status {unknown}")
    return {status: {"model": ErrorBody, "description": _WHAT[status]} for status in chosen}


def codes_for(status: int) -> list[str]:
    """The taxonomy codes an HTTP status carries (for docs and tests)."""
    return sorted(code for code, value in HTTP_STATUS.items() if value == status)
