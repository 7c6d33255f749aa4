"""OL-2, OL-3, OL-5: every lifecycle state x every event, for Inline and Deferred."""

from __future__ import annotations

from typing import Any

import pytest

from domain.lifecycle import PUBLIC_STATUS, EventType, Mode, State
from domain.operation import LifecycleViolation, Operation

E = EventType
AT = "2026-11-30T09:00:00.000000Z"

# Paths to reach each state, written from OL-3's table (not from the implementation).
# "start" stands for accepted (Deferred only) + attempt.started.
PATHS: dict[str, list[EventType | str]] = {
    "none": [],
    "received": [E.RECEIVED],
    "accepted": [E.RECEIVED, E.ACCEPTED],
    "running": [E.RECEIVED, "start"],
    "running_ended": [E.RECEIVED, "start", E.ATTEMPT_FAILED],
    "finalizing": [E.RECEIVED, "start", E.ATTEMPT_FINALIZING],
    "supervising": [E.RECEIVED, "start", E.ATTEMPT_FAILED, E.ATTEMPT_SUPERVISING],
    "retry_scheduled": [
        E.RECEIVED,
        "start",
        E.ATTEMPT_FAILED,
        E.ATTEMPT_SUPERVISING,
        E.ATTEMPT_RETRY_SCHEDULED,
    ],
    "completed": [E.RECEIVED, "start", E.ATTEMPT_FINALIZING, E.COMPLETED],
    "rejected": [E.RECEIVED, E.REJECTED],
    "failed": [E.RECEIVED, "start", E.ATTEMPT_FAILED, E.ATTEMPT_SUPERVISING, E.FAILED],
    "dead_letter": [
        E.RECEIVED,
        "start",
        E.ATTEMPT_FAILED,
        E.ATTEMPT_SUPERVISING,
        E.DEAD_LETTERED,
    ],
}
TERMINAL = {"completed", "rejected", "failed", "dead_letter"}
NOTES = {E.ATTEMPT_FAILED, E.ATTEMPT_CLAIM_LOST, E.ATTEMPT_INTERRUPTED, E.ATTEMPT_HEARTBEAT}

# OL-3 edges per (state, mode); notes only while an attempt runs; retention separately.
ALLOWED: dict[tuple[str, Mode], set[EventType]] = {
    ("none", Mode.INLINE): {E.RECEIVED},
    ("none", Mode.DEFERRED): {E.RECEIVED},
    ("received", Mode.INLINE): {E.ATTEMPT_STARTED, E.REJECTED},
    ("received", Mode.DEFERRED): {E.ACCEPTED, E.REJECTED},
    ("accepted", Mode.DEFERRED): {E.ATTEMPT_STARTED},
    ("running", Mode.INLINE): {E.ATTEMPT_FINALIZING, E.REJECTED, *NOTES},
    ("running", Mode.DEFERRED): {E.ATTEMPT_FINALIZING, E.REJECTED, *NOTES},
    ("running_ended", Mode.INLINE): {E.ATTEMPT_SUPERVISING},
    ("running_ended", Mode.DEFERRED): {E.ATTEMPT_SUPERVISING},
    ("finalizing", Mode.INLINE): {E.COMPLETED},
    ("finalizing", Mode.DEFERRED): {E.COMPLETED},
    ("supervising", Mode.INLINE): {E.ATTEMPT_RETRY_SCHEDULED, E.FAILED},
    ("supervising", Mode.DEFERRED): {E.ATTEMPT_RETRY_SCHEDULED, E.FAILED, E.DEAD_LETTERED},
    ("retry_scheduled", Mode.INLINE): {E.ATTEMPT_STARTED},
    ("retry_scheduled", Mode.DEFERRED): {E.ATTEMPT_STARTED},
}


def _data(op: Operation, kind: EventType, mode: Mode) -> dict[str, Any]:
    if kind is E.RECEIVED:
        return {
            "operation_type": "t.x",
            "mode": mode.value,
            "tenant": "acme",
            "correlation_id": op.id,
            "params": {},
        }
    if kind is E.ATTEMPT_STARTED:
        if mode is Mode.DEFERRED:
            return {"attempt": op.attempt + 1, **_claim(op.fencing_token + 1)}
        return {"attempt": op.attempt + 1}
    if kind is E.REJECTED:
        return {"attempt": op.attempt, "category": "validation", "code": "x", "message": ""}
    if kind is E.ATTEMPT_RETRY_SCHEDULED:
        return {"attempt": op.attempt, "due_at": AT, "delay_seconds": 0}
    if kind in (E.HELD, E.RELEASED, E.PURGED):
        return {"reason": "audit"}
    return {"attempt": op.attempt}


def _claim(token: int) -> dict[str, Any]:
    return {"fencing_token": token, "worker": "w-1", "lease_expires_at": AT}


def _build(state: str, mode: Mode) -> Operation:
    op = Operation("op-1")
    for step in PATHS[state]:
        if step == "start":
            if mode is Mode.DEFERRED:
                op.record(E.ACCEPTED, AT, {}, {})
            step = E.ATTEMPT_STARTED
        kind = EventType(step)
        op.record(kind, AT, {}, _data(op, kind, mode))
    return op


def _reachable(state: str, mode: Mode) -> bool:
    if state == "accepted" or state == "dead_letter":
        return mode is Mode.DEFERRED
    return True


CASES = [
    (state, mode, kind)
    for state in PATHS
    for mode in Mode
    if _reachable(state, mode)
    for kind in EventType
]


@pytest.mark.parametrize(("state", "mode", "kind"), CASES)
def test_every_state_and_event_ol3_ol5(state: str, mode: Mode, kind: EventType) -> None:
    """OL-3/OL-5: exactly the edges of OL-3 are accepted; terminal states take no lifecycle
    event; retention events (held, purged) are the only ones a terminal operation accepts."""
    op = _build(state, mode)
    if kind is E.HELD:
        expected = state != "none"
    elif kind is E.RELEASED:
        expected = False  # nothing is held on these paths
    elif kind is E.PURGED:
        expected = state in TERMINAL
    elif state in TERMINAL:
        expected = False
    else:
        expected = kind in ALLOWED[(state, mode)]
    before = (op.state, op.version, op.attempt)
    if expected:
        op.record(kind, AT, {}, _data(op, kind, mode))
        assert op.version == before[1] + 1
    else:
        with pytest.raises(LifecycleViolation):
            op.record(kind, AT, {}, _data(op, kind, mode))
        assert (op.state, op.version, op.attempt) == before, "a refused event changes nothing"


def test_ol1_paths_end_where_ol3_says() -> None:
    """OL-1: Received -> Running -> Finalizing -> Completed; only Deferred passes Accepted."""
    inline = _build("completed", Mode.INLINE)
    deferred = _build("completed", Mode.DEFERRED)
    assert inline.state is State.COMPLETED and deferred.state is State.COMPLETED
    assert E.ACCEPTED.value not in [e.type for e in inline.pending]
    assert [e.type for e in deferred.pending][:2] == ["operation.received", "operation.accepted"]


def test_ol2_finalizing_and_supervising_are_not_public_statuses() -> None:
    """OL-2 / Part B: the eight public values; Finalizing and Supervising read as running."""
    assert set(PUBLIC_STATUS.values()) == {
        "received",
        "accepted",
        "running",
        "retry_scheduled",
        "completed",
        "rejected",
        "failed",
        "dead_letter",
    }
    assert _build("finalizing", Mode.INLINE).public_status == "running"
    assert _build("supervising", Mode.INLINE).public_status == "running"
    assert "finalizing" not in PUBLIC_STATUS.values()
    assert "supervising" not in PUBLIC_STATUS.values()


def test_attempt_numbers_and_fencing_tokens_only_move_forward() -> None:
    """OL-8 groundwork: an attempt must be the next one; a token must exceed the last."""
    op = _build("accepted", Mode.DEFERRED)
    with pytest.raises(LifecycleViolation):
        op.record(E.ATTEMPT_STARTED, AT, {}, {"attempt": 2})
    with pytest.raises(LifecycleViolation, match="Deferred claim"):
        op.record(E.ATTEMPT_STARTED, AT, {}, {"attempt": 1})  # no token, lease or worker
    op.record(E.ATTEMPT_STARTED, AT, {}, {"attempt": 1, **_claim(5)})
    op.record(E.ATTEMPT_CLAIM_LOST, AT, {}, {"attempt": 1})
    op.record(E.ATTEMPT_SUPERVISING, AT, {}, {"attempt": 1})
    op.record(E.ATTEMPT_RETRY_SCHEDULED, AT, {}, {"attempt": 1, "due_at": AT, "delay_seconds": 0})
    with pytest.raises(LifecycleViolation):
        op.record(E.ATTEMPT_STARTED, AT, {}, {"attempt": 2, **_claim(5)})
    op.record(E.ATTEMPT_STARTED, AT, {}, {"attempt": 2, **_claim(6)})
    with pytest.raises(LifecycleViolation):
        op.record(E.ATTEMPT_FINALIZING, AT, {}, {"attempt": 1})  # not the running attempt


def test_hold_release_and_purge_rules_ol10() -> None:
    """OL-10 groundwork: a held operation is never purged; after purge nothing is accepted."""
    op = _build("completed", Mode.INLINE)
    op.record(E.HELD, AT, {}, {"reason": "litigation"})
    with pytest.raises(LifecycleViolation):
        op.record(E.HELD, AT, {}, {"reason": "again"})
    with pytest.raises(LifecycleViolation):
        op.record(E.PURGED, AT, {}, {"reason": "retention"})
    op.record(E.RELEASED, AT, {}, {"reason": "closed"})
    op.record(E.PURGED, AT, {}, {"reason": "retention"})
    for kind in EventType:
        with pytest.raises(LifecycleViolation):
            op.record(kind, AT, {}, {"reason": "x", "attempt": 1})


def test_unknown_event_types_and_modes_are_refused() -> None:
    op = Operation("op-2")
    with pytest.raises(LifecycleViolation):
        Operation.replay("op-2", [("operation.exploded", AT, {})])
    with pytest.raises(LifecycleViolation, match="mode"):
        op.record(E.RECEIVED, AT, {}, {**_data(op, E.RECEIVED, Mode.INLINE), "mode": "later"})
    assert op.version == 0
