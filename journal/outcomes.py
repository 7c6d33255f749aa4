"""Outcome Records (OL-9): one stream per Deferred Completed operation.

The record is its own stream (``outcome:<operation id>``, one ``outcome.recorded``
event) appended in the same transaction as ``operation.completed``. Keeping it apart
from the lifecycle stream lets outcome retention end before journal retention (OL-10):
the lifecycle keeps the outcome's digest, so what remains still verifies.
"""

from __future__ import annotations

from typing import Any, Final

from domain.events import NewEvent
from journal.store import Append, EventStore

OUTCOME_RECORDED: Final = "outcome.recorded"


def outcome_stream(operation_id: str) -> str:
    return f"outcome:{operation_id}"


def outcome_append(
    operation_id: str, at: str, context: dict[str, Any], record: dict[str, Any]
) -> Append:
    """The record as a new stream (version 1): a second record for one operation is refused."""
    event = NewEvent(OUTCOME_RECORDED, at, context, {"operation_id": operation_id, **record})
    return Append(outcome_stream(operation_id), 0, [event])


def read_outcome(store: EventStore, operation_id: str) -> dict[str, Any] | None:
    """The record's data, or None when there is none (or it was purged)."""
    events = store.read_stream(outcome_stream(operation_id))
    if not events or events[0].type != OUTCOME_RECORDED:
        return None
    return events[0].data
