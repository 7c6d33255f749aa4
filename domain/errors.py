"""The one error taxonomy (python-contract §3): a stable ``code`` and its HTTP status."""

from __future__ import annotations

from typing import Final

#: Every code a surface may answer, with its HTTP status. The first block is
#: python-contract §3 verbatim; the second holds our documented extensions
#: (docs/decisions.md, P1-P3).
HTTP_STATUS: Final[dict[str, int]] = {
    "invalid_params": 400,
    "invalid_request": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "unknown_instance": 404,
    "not_found": 404,
    "instance_exists": 409,
    "instance_terminal": 409,
    "dependency_conflict": 409,
    "resource_busy": 409,
    "document_too_large": 413,
    "event_queue_full": 429,
    "backend_unavailable": 503,
    # Extensions (docs/decisions.md).
    "conflict": 409,
    "rejected": 422,
    "operation_failed": 500,
    "internal_error": 500,
    # The checkpoint signer found the journal under its last signed checkpoint rewritten
    # or truncated, and signs nothing (decisions A4).
    "journal_rewritten": 409,
}


class BlackOpsError(Exception):
    """Base of every error a BlackOps surface raises on purpose.

    ``code`` is stable and machine-readable; ``message`` is short, human-readable
    and never carries params, payloads or stack traces.
    """

    code: str

    def __init__(self, code: str, message: str) -> None:
        if code not in HTTP_STATUS:
            raise ValueError(f"unknown error code {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def http_status(self) -> int:
        return HTTP_STATUS[self.code]

    def to_body(self) -> dict[str, dict[str, str]]:
        """The HTTP / CLI JSON error body: ``{"error": {"code", "message"}}``."""
        return {"error": {"code": self.code, "message": self.message}}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"


class InvalidRequest(BlackOpsError):
    """Malformed input: names, ids, flags, headers (documents: its `DocumentError`)."""

    def __init__(self, message: str, code: str = "invalid_request") -> None:
        super().__init__(code, message)


class NotFound(BlackOpsError):
    def __init__(self, message: str, code: str = "not_found") -> None:
        super().__init__(code, message)


class Unauthorized(BlackOpsError):
    def __init__(self, message: str = "a valid bearer token is required") -> None:
        super().__init__("unauthorized", message)


class Forbidden(BlackOpsError):
    def __init__(self, message: str) -> None:
        super().__init__("forbidden", message)


class Conflict(BlackOpsError):
    def __init__(self, message: str) -> None:
        super().__init__("conflict", message)


class ResourceBusy(BlackOpsError):
    """A concurrent change or an unfinished check: try again shortly."""

    def __init__(self, message: str) -> None:
        super().__init__("resource_busy", message)


class DependencyConflict(BlackOpsError):
    """Another resource depends on this one, or this one on something unfit."""

    def __init__(self, message: str) -> None:
        super().__init__("dependency_conflict", message)


class FencingError(Conflict):
    """An append at a version (or token) that is no longer current.

    The journal refuses it; nothing is merged and nothing is retried. The caller
    must reload the aggregate and decide again.
    """

    def __init__(self, stream: str, expected_version: int) -> None:
        super().__init__(
            f"stream {stream!r} is no longer at version {expected_version}: "
            "another writer committed first"
        )
        self.stream = stream
        self.expected_version = expected_version


class BackendUnavailable(BlackOpsError):
    """The journal cannot be reached. ``detail`` holds the driver's own words (hosts,
    ports, reasons) for logs and operators; it is never put in an HTTP answer."""

    def __init__(
        self, message: str = "the journal store cannot be reached", detail: str = ""
    ) -> None:
        super().__init__("backend_unavailable", message)
        self.detail = detail
