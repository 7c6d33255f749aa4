"""Loading and saving Operation aggregates: the journal is their only state."""

from __future__ import annotations

from domain.errors import NotFound
from domain.events import RecordedEvent
from domain.lifecycle import EventType
from domain.operation import Operation
from journal.store import Append, EventStore


class OperationJournal:
    """Operations as streams (the stream id is the operation id)."""

    def __init__(self, store: EventStore) -> None:
        self.store = store

    def events(self, operation_id: str) -> list[RecordedEvent]:
        events = self.store.read_stream(operation_id)
        if not events or not events[0].type.startswith("operation."):
            raise NotFound(f"operation {operation_id} does not exist")
        return events

    def load(self, operation_id: str) -> Operation:
        return fold(operation_id, self.events(operation_id))

    def load_many(self, operation_ids: list[str]) -> dict[str, Operation]:
        """Several operations in one read; ids without an operation stream are left out."""
        found = self.store.read_streams(operation_ids)
        return {
            stream: fold(stream, events)
            for stream, events in found.items()
            if events and events[0].type.startswith("operation.")
        }

    def save(self, *operations: Operation) -> list[list[int]]:
        """Append every operation's pending events in one transaction (group commit).

        Each is appended at the version it was loaded at; a concurrent writer makes
        the whole save fail with FencingError and nothing is written.
        """
        return self.store.append(*(pending_append(operation) for operation in operations))


#: Events that do not move an operation's lifecycle: a hold only blocks purges (Part B).
RETENTION_MARKS = frozenset({EventType.HELD.value, EventType.RELEASED.value})
#: Events whose append must not be rebased past a hold: they are retention's own.
_RETENTION_EVENTS = RETENTION_MARKS | {EventType.PURGED.value}


def rebased_past_holds(store: EventStore, refused: Append) -> Append | None:
    """``refused`` (an operation's events refused because its stream moved) at the stream's
    version now, when all that was appended since its version is holds and releases; else
    None, and the refusal stands (another claimant, another end: a real race).

    The events stay as they were made: a hold does not change what the lifecycle allows,
    and a lease's owner is refused only when its fencing token is no longer current
    (Part B, Leases); a hold never makes it stale. Retention's own events (a hold, a
    release, a tombstone) are never rebased: whether they apply depends on the holds.
    """
    if any(event.type in _RETENTION_EVENTS for event in refused.events):
        return None
    events = store.read_stream(refused.stream)
    since = [event for event in events if event.version > refused.expected_version]
    if not since or any(event.type not in RETENTION_MARKS for event in since):
        return None
    return Append(refused.stream, since[-1].version, refused.events)


def pending_append(operation: Operation) -> Append:
    """The operation's pending events as an append at the version it was loaded at."""
    pending = operation.take_pending()
    return Append(operation.id, operation.version - len(pending), pending)


def fold(operation_id: str, events: list[RecordedEvent]) -> Operation:
    if events[0].type == EventType.PURGED.value:  # its earlier events were deleted
        return Operation.from_tombstone(operation_id, events[0].at, events[0].data)
    operation = Operation.replay(operation_id, ((e.type, e.at, e.data) for e in events))
    operation.origin = events[0].context
    return operation
