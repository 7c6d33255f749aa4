"""The operation lifecycle of OL-1..OL-5 as data: states, event names, allowed moves."""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class Mode(StrEnum):
    INLINE = "inline"
    DEFERRED = "deferred"


class State(StrEnum):
    """Logical lifecycle states (Finalizing and Supervising included, OL-2)."""

    RECEIVED = "received"
    ACCEPTED = "accepted"
    RUNNING = "running"
    FINALIZING = "finalizing"
    SUPERVISING = "supervising"
    RETRY_SCHEDULED = "retry_scheduled"
    COMPLETED = "completed"
    REJECTED = "rejected"
    FAILED = "failed"
    DEAD_LETTER = "dead_letter"


class EventType(StrEnum):
    """Journal event types (Part B). Dotted, stable, never renamed."""

    RECEIVED = "operation.received"
    ACCEPTED = "operation.accepted"
    ATTEMPT_STARTED = "attempt.started"
    ATTEMPT_HEARTBEAT = "attempt.heartbeat"
    ATTEMPT_FINALIZING = "attempt.finalizing"
    ATTEMPT_SUPERVISING = "attempt.supervising"
    ATTEMPT_FAILED = "attempt.failed"
    ATTEMPT_RETRY_SCHEDULED = "attempt.retry_scheduled"
    ATTEMPT_CLAIM_LOST = "attempt.claim_lost"
    ATTEMPT_INTERRUPTED = "attempt.interrupted"
    COMPLETED = "operation.completed"
    REJECTED = "operation.rejected"
    FAILED = "operation.failed"
    DEAD_LETTERED = "operation.dead_lettered"
    HELD = "operation.held"
    RELEASED = "operation.released"
    PURGED = "operation.purged"


TERMINAL: Final = frozenset({State.COMPLETED, State.REJECTED, State.FAILED, State.DEAD_LETTER})

#: OL-2: Finalizing and Supervising are stages, not Status API values.
PUBLIC_STATUS: Final[dict[State, str]] = {
    State.RECEIVED: "received",
    State.ACCEPTED: "accepted",
    State.RUNNING: "running",
    State.FINALIZING: "running",
    State.SUPERVISING: "running",
    State.RETRY_SCHEDULED: "retry_scheduled",
    State.COMPLETED: "completed",
    State.REJECTED: "rejected",
    State.FAILED: "failed",
    State.DEAD_LETTER: "dead_letter",
}

_BOTH = frozenset(Mode)
_INLINE = frozenset({Mode.INLINE})
_DEFERRED = frozenset({Mode.DEFERRED})

#: OL-3, edge by edge: (from, event) -> (to, modes allowed). Nothing else moves state.
MOVES: Final[dict[tuple[State | None, EventType], tuple[State, frozenset[Mode]]]] = {
    (None, EventType.RECEIVED): (State.RECEIVED, _BOTH),
    # Inline success / Deferred success
    (State.RECEIVED, EventType.ATTEMPT_STARTED): (State.RUNNING, _INLINE),
    (State.RECEIVED, EventType.ACCEPTED): (State.ACCEPTED, _DEFERRED),
    (State.ACCEPTED, EventType.ATTEMPT_STARTED): (State.RUNNING, _DEFERRED),
    (State.RUNNING, EventType.ATTEMPT_FINALIZING): (State.FINALIZING, _BOTH),
    (State.FINALIZING, EventType.COMPLETED): (State.COMPLETED, _BOTH),
    # business rejection: Received or Running -> Rejected
    (State.RECEIVED, EventType.REJECTED): (State.REJECTED, _BOTH),
    (State.RUNNING, EventType.REJECTED): (State.REJECTED, _BOTH),
    # retry, final failure, Deferred quarantine
    (State.RUNNING, EventType.ATTEMPT_SUPERVISING): (State.SUPERVISING, _BOTH),
    (State.SUPERVISING, EventType.ATTEMPT_RETRY_SCHEDULED): (State.RETRY_SCHEDULED, _BOTH),
    (State.RETRY_SCHEDULED, EventType.ATTEMPT_STARTED): (State.RUNNING, _BOTH),
    (State.SUPERVISING, EventType.FAILED): (State.FAILED, _BOTH),
    (State.SUPERVISING, EventType.DEAD_LETTERED): (State.DEAD_LETTER, _DEFERRED),
}

#: Events that record a fact about the running attempt without moving the state.
#: Each ends or renews the open attempt; Supervising may only follow an ended one.
ATTEMPT_NOTES: Final = frozenset(
    {
        EventType.ATTEMPT_HEARTBEAT,
        EventType.ATTEMPT_FAILED,
        EventType.ATTEMPT_CLAIM_LOST,
        EventType.ATTEMPT_INTERRUPTED,
    }
)
ATTEMPT_ENDINGS: Final = ATTEMPT_NOTES - {EventType.ATTEMPT_HEARTBEAT}

#: Retention events (OL-10): about keeping the record, not about the lifecycle. They
#: are the only events a terminal operation accepts (decisions.md, P4).
RETENTION: Final = frozenset({EventType.HELD, EventType.RELEASED, EventType.PURGED})
