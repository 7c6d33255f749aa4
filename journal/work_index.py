"""The due-work index: which Deferred operations a worker may claim, and from when.

A projection of the journal, kept in the **same transaction** as every append (so it
never lags and never double-counts) with its tracked position, and rebuildable from
position 0. One row per Deferred operation that is not terminal:

- ``operation.accepted``       -> row created, due at acceptance
- ``attempt.started``          -> due when the claim's lease expires (token, worker)
- ``attempt.retry_scheduled``  -> due at the retry time
- a terminal event             -> row deleted

Heartbeats move ``due_at`` forward outside the journal (decisions O4); a rebuild
resets it to the claim's original expiry, which at worst lets another worker claim
early, and fencing refuses the old holder's commit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from domain.json_text import load_canonical
from domain.lifecycle import EventType

NAME = "due_work"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_TERMINAL_TOPICS = frozenset(
    {
        EventType.COMPLETED.value,
        EventType.REJECTED.value,
        EventType.FAILED.value,
        EventType.DEAD_LETTERED.value,
    }
)
_TOPICS = frozenset(
    {
        EventType.ACCEPTED.value,
        EventType.ATTEMPT_STARTED.value,
        EventType.ATTEMPT_RETRY_SCHEDULED.value,
        *_TERMINAL_TOPICS,
    }
)
#: Events after which a worker may have something new to claim (wakes workers).
WAKING_TOPICS = frozenset({EventType.ACCEPTED.value, EventType.ATTEMPT_RETRY_SCHEDULED.value})


def micros(instant: str) -> int:
    """RFC 3339 ``...Z`` -> integer microseconds since the epoch (sortable, exact)."""
    return moment_micros(datetime.fromisoformat(instant.replace("Z", "+00:00")))


def moment_micros(moment: datetime) -> int:
    """An aware datetime -> integer microseconds since the epoch, exactly."""
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


@dataclass(slots=True)
class RowChange:
    """The net effect of one append on one operation's row."""

    operation_id: str
    create: tuple[str, str] | None = None  # (operation_type, tenant) when accepted here
    due_at: int | None = None
    fencing_token: int | None = None
    worker: str | None = None
    set_worker: bool = False
    delete: bool = False


def changes(events: Iterable[tuple[str, str, bytes]]) -> list[RowChange]:
    """Net row changes for ``(stream, topic, state)`` triples in append order."""
    by_id: dict[str, RowChange] = {}
    for stream, topic, state in events:
        if topic not in _TOPICS:
            continue
        if topic in _TERMINAL_TOPICS:
            change = by_id.setdefault(stream, RowChange(stream))
            if change.create is not None:  # accepted and ended in one append: no row
                del by_id[stream]
            else:
                change.delete = True
            continue
        body = load_canonical(state)
        data = body["data"]
        if topic == EventType.ATTEMPT_STARTED.value and "lease_expires_at" not in data:
            continue  # an Inline attempt: no lease, no row
        change = by_id.setdefault(stream, RowChange(stream))
        if topic == EventType.ACCEPTED.value:
            context = body["context"]
            change.create = (context["operation_type"], context["tenant"])
            change.due_at = micros(body["at"])
            change.fencing_token = 0
        elif topic == EventType.ATTEMPT_STARTED.value:
            change.due_at = micros(data["lease_expires_at"])
            change.fencing_token = data["fencing_token"]
            change.worker, change.set_worker = data["worker"], True
        else:  # retry scheduled
            change.due_at = micros(data["due_at"])
            change.worker, change.set_worker = None, True
    return list(by_id.values())


@dataclass(slots=True)
class WorkRow:
    operation_id: str
    operation_type: str
    tenant: str
    due_at: int
    fencing_token: int
    worker: str | None
