"""What callers get back: OperationResult (python-contract §2) and the status view."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from domain.lifecycle import Mode, State
from domain.operation import Operation


@dataclass(frozen=True, slots=True)
class Rejection:
    category: str
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class Failure:
    message: str
    error_type: str | None = None


@dataclass(frozen=True, slots=True)
class OperationResult:
    """The result of an Inline run: exactly one of outcome / rejection / failure applies."""

    operation_id: str
    status: str
    outcome: dict[str, Any] | None = None
    rejection: Rejection | None = None
    failure: Failure | None = None
    attempt: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The completion JSON of ``op run --json`` and the Inline HTTP body."""
        body: dict[str, Any] = {
            "operationId": self.operation_id,
            "status": self.status,
            "attempt": self.attempt,
        }
        if self.status == "completed":
            body["outcome"] = self.outcome
        if self.rejection is not None:
            body["rejection"] = {
                "category": self.rejection.category,
                "code": self.rejection.code,
                "message": self.rejection.message,
            }
        if self.failure is not None:
            body["failure"] = {"message": self.failure.message, "type": self.failure.error_type}
        return body


def status_view(operation: Operation) -> dict[str, Any]:
    """``GET /v1/operations/{id}``: public status only, never Finalizing/Supervising (OL-2)."""
    view: dict[str, Any] = {
        "operationId": operation.id,
        "type": operation.type,
        "tenant": operation.tenant,
        "mode": operation.mode.value if operation.mode else None,
        "status": operation.public_status,
        "attempt": operation.attempt,
        "correlationId": operation.correlation_id,
        "createdAt": operation.created_at or None,  # None: purged before tombstones kept it
        "updatedAt": operation.updated_at,
        "version": operation.version,
    }
    if operation.mode is Mode.DEFERRED and operation.attempt > 0:
        # Who holds (or last held) the attempt, and under which fencing token.
        view["worker"] = operation.worker
        view["fencingToken"] = operation.fencing_token
    if operation.redrive_of is not None:
        view["redriveOf"] = operation.redrive_of
    if operation.retry_due_at is not None and operation.public_status == "retry_scheduled":
        view["retryDueAt"] = operation.retry_due_at
    if operation.rejection is not None:
        view["rejection"] = dict(operation.rejection)
    if operation.state in (State.FAILED, State.DEAD_LETTER) and operation.last_error:
        view["failure"] = dict(operation.last_error)
    if operation.completion is not None:
        view["outcome"] = {
            "type": operation.completion.get("outcome_type"),
            "schemaVersion": operation.completion.get("outcome_schema_version"),
            "digest": operation.completion.get("outcome_digest"),
            "recorded": operation.completion.get("outcome_recorded", False),
        }
    if operation.hold is not None:
        view["hold"] = dict(operation.hold)
    if operation.purge is not None:
        view["purged"] = dict(operation.purge)
    return view
