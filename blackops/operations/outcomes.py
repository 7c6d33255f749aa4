"""Outcome Records as callers see them (OL-9): the document, its type and schema version."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from domain.errors import InvalidRequest, NotFound
from domain.lifecycle import Mode, State
from domain.operation import Operation
from journal.outcomes import read_outcome
from journal.store import EventStore

if TYPE_CHECKING:
    from pydantic import BaseModel

_WHY_NOT = {
    State.RECEIVED: "it has not been accepted",
    State.ACCEPTED: "it has not run yet",
    State.RUNNING: "it is still running",
    State.FINALIZING: "it is still running",
    State.SUPERVISING: "it is still running",
    State.RETRY_SCHEDULED: "it is waiting for a retry",
    State.REJECTED: "it was rejected",
    State.FAILED: "it failed",
    State.DEAD_LETTER: "it is in the dead letter state",
}


@dataclass(frozen=True, slots=True)
class OutcomeRecord:
    operation_id: str
    type_name: str | None  # "module.Qualname" of the pydantic outcome model, if any
    schema_version: int
    digest: str | None  # sha256 of the canonical document, as operation.completed says
    document: dict[str, Any] | None

    def to_model(self, model: type[BaseModel] | None = None) -> Any:
        """The outcome as its pydantic model (the recorded type unless ``model`` is given)."""
        if model is None:
            model = _import_model(self.type_name)
        return model.model_validate(self.document)

    def to_dict(self) -> dict[str, Any]:
        return {
            "operationId": self.operation_id,
            "type": self.type_name,
            "schemaVersion": self.schema_version,
            "digest": self.digest,
            "outcome": self.document,
        }


def outcome_record(store: EventStore, operation: Operation) -> OutcomeRecord:
    """The record of a Deferred Completed operation, else ``not_found`` saying why."""
    state = operation.state
    if operation.purged:
        raise NotFound(f"operation {operation.id} was purged (retention): nothing is kept")
    if state is State.COMPLETED:
        if operation.mode is Mode.INLINE:
            raise NotFound(
                f"operation {operation.id} ran Inline: Inline operations never store an "
                "Outcome Record; the outcome was returned to the caller (OL-9)"
            )
        record = read_outcome(store, operation.id)
        if record is None:
            raise NotFound(f"operation {operation.id}: its Outcome Record was purged")
        return OutcomeRecord(
            operation.id,
            record["outcome_type"],
            record["schema_version"],
            record["digest"],
            record["outcome"],
        )
    why = _WHY_NOT.get(state, "it has no events") if state else "it has no events"
    raise NotFound(
        f"operation {operation.id} has no Outcome Record: {why}; only a Deferred "
        "operation that completed stores one (OL-9)"
    )


def _import_model(type_name: str | None) -> type[BaseModel]:
    from pydantic import BaseModel

    if not type_name:
        raise InvalidRequest("this outcome was recorded without a model type")
    # Nested classes: walk the qualname from the longest importable module prefix.
    parts = type_name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            target: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            target = getattr(target, name, None)
        if isinstance(target, type) and issubclass(target, BaseModel):
            return target
    raise InvalidRequest(f"the outcome model {type_name!r} cannot be imported here")
