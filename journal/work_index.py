"""The due-work index: which Deferred operations a worker may claim, and from when.

A projection of the journal, kept in the **same transaction** as every append (so it
never lags and never double-counts) with its tracked position, and rebuildable from
position 0. One row per Deferred operation that is not terminal:

- ``operation.accepted``       -> row created, due at acceptance
- ``attempt.started``          -> due when the claim's lease expires (token, worker)
- ``attempt.retry_scheduled``  -> due at the retry time
- a terminal event             -> row deleted

Workflow instances (``workflow.*``) have rows too, of type ``workflow:<uid>``: due at
creation, at the end of a running context's lease, at ``data.wake_at`` after a
context stopped (timer, retry, event, termination) and, once terminal, when the
retention period ends (the purge timer); ``workflow.purged`` deletes the row.

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
from domain.workflow import RETENTION_SECONDS, Topic
from domain.workflow import TERMINAL_TOPICS as _WORKFLOW_TERMINAL

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
#: Workflow instance events that move an instance's row (``data.wake_at`` says when).
_WORKFLOW_WAKES = frozenset(
    {
        Topic.STEP_RETRY_SCHEDULED,
        Topic.STEP_SUSPENDED,
        Topic.EVENT_ACCEPTED,
        Topic.TERMINATION_REQUESTED,
    }
)
_WORKFLOW_TOPICS = frozenset(
    {Topic.CREATED, Topic.CONTEXT_STARTED, Topic.PURGED, *_WORKFLOW_WAKES, *_WORKFLOW_TERMINAL}
)
#: Events after which a worker may have something new to claim, or a context it runs
#: must stop (wakes workers).
WORKFLOW_WAKING_TOPICS = frozenset(
    {Topic.CREATED, Topic.EVENT_ACCEPTED, Topic.TERMINATION_REQUESTED}
)
#: Events after which a worker may have a Deferred operation to claim.
OPERATION_WAKING_TOPICS = frozenset(
    {EventType.ACCEPTED.value, EventType.ATTEMPT_RETRY_SCHEDULED.value}
)
WAKING_TOPICS = OPERATION_WAKING_TOPICS | WORKFLOW_WAKING_TOPICS
_WORKFLOW_ROW_PREFIX = "workflow:"
#: Begins an accepted operation type among an announcement's names (no topic begins so).
ACCEPTED_TYPE_MARK = "="
#: An announcement names the types it accepted up to this many characters in all (each
#: name with its ``=`` and its comma).
ANNOUNCED_TYPES_MAX_CHARS = 1024


def workflow_row_type(workflow: str) -> str:
    """The ``operation_type`` column of a workflow instance's row: its resource."""
    return f"{_WORKFLOW_ROW_PREFIX}{workflow}"


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


def accepted_type_names(rows: Iterable[RowChange]) -> list[str]:
    """The operation types ``rows`` accept, as an announcement names them (decisions F164);
    none when they would not all fit (a listener then assumes any type)."""
    types = {row.create[0] for row in rows if row.create is not None}
    names = sorted(ACCEPTED_TYPE_MARK + t for t in types if not t.startswith(_WORKFLOW_ROW_PREFIX))
    size = sum(map(len, names)) + len(names)  # each name with its "=" and its comma
    if size > ANNOUNCED_TYPES_MAX_CHARS or any("," in name for name in names):
        return []
    return names


def announced_types(names: frozenset[str]) -> frozenset[str] | None:
    """The operation types an announcement's names say it accepted; ``None`` when it does
    not say (too many to name, or a writer from before F164)."""
    return frozenset(n[1:] for n in names if n.startswith(ACCEPTED_TYPE_MARK)) or None


def changes(events: Iterable[tuple[str, str, bytes]]) -> list[RowChange]:
    """Net row changes for ``(stream, topic, state)`` triples in append order."""
    by_id: dict[str, RowChange] = {}
    for stream, topic, state in events:
        if topic in _WORKFLOW_TOPICS:
            _workflow_change(by_id, stream, topic, state)
            continue
        if topic not in _TOPICS:
            continue
        if topic in _TERMINAL_TOPICS:
            _remove_row(by_id, stream)
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


def _remove_row(by_id: dict[str, RowChange], stream: str) -> None:
    change = by_id.setdefault(stream, RowChange(stream))
    if change.create is not None:  # created and ended in one append: no row at all
        del by_id[stream]
    else:
        change.delete = True


def _workflow_change(by_id: dict[str, RowChange], stream: str, topic: str, state: bytes) -> None:
    """An instance's row: due at creation, at its lease's end while a context runs, and
    at ``wake_at`` after a context stops (timer, retry, lifetime) or an event wakes it."""
    if topic == Topic.PURGED:
        _remove_row(by_id, stream)
        return
    body = load_canonical(state)
    data = body["data"]
    if topic == Topic.EVENT_ACCEPTED and data.get("wake_at") is None:
        return
    change = by_id.setdefault(stream, RowChange(stream))
    if topic == Topic.CREATED:
        change.create = (workflow_row_type(data["workflow"]), body["context"]["tenant"])
        change.due_at = micros(body["at"])
        change.fencing_token = 0
    elif topic == Topic.CONTEXT_STARTED:
        change.due_at = micros(data["lease_expires_at"])
        change.fencing_token = data["fencing_token"]
        change.worker, change.set_worker = data["worker"], True
    elif topic in _WORKFLOW_TERMINAL:
        # The row stays as the retention timer: due when the history may be purged.
        change.due_at = micros(body["at"]) + RETENTION_SECONDS * 1_000_000
        change.worker, change.set_worker = None, True
    else:
        change.due_at = micros(data["wake_at"])
        if topic == Topic.TERMINATION_REQUESTED:
            change.fencing_token = data["fencing_token"]
        change.worker, change.set_worker = None, True


@dataclass(slots=True)
class WorkRow:
    operation_id: str
    operation_type: str
    tenant: str
    due_at: int
    fencing_token: int
    worker: str | None
