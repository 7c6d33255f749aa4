"""What every backend recorder shares: the gap check and reading rows as Notifications."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import repeat
from typing import Any, NamedTuple

from eventsourcing.persistence import Notification, StoredEvent

#: Positions are 64-bit signed integers in every backend.
MAX_POSITION = 2**63 - 1


class StoredRow(NamedTuple):
    """An event as stored, undecoded, by position: what readers of the whole journal page
    through (export, verify, the tree). Read as a Notification is (same attribute names),
    but made from the row's tuple in one C call: a frozen dataclass per event cost more
    than the SELECT itself (decisions F160)."""

    id: int
    originator_id: str
    originator_version: int
    topic: str
    state: bytes


def stored_rows(rows: list[tuple[Any, ...]]) -> list[StoredRow]:
    """`StoredRow` of each row a ``SELECT position, stream, version, topic, state`` fetched:
    ``tuple.__new__`` in one C-level map (``StoredRow._make`` is a Python call per row, and
    checks the row's length, which those five columns fix)."""
    return list(map(tuple.__new__, repeat(StoredRow), rows))


def predecessors(stored_events: Sequence[StoredEvent]) -> Iterable[tuple[str, int]]:
    """``(stream, version)`` that must already exist for this append to leave no gap.

    An append at ``expected_version`` writes ``expected_version + 1`` onwards; the
    primary key refuses a stale one, and this check refuses one from the future
    (``expected_version`` beyond the stream's end). Version 0 needs nothing.
    """
    first: dict[str, int] = {}
    for event in stored_events:
        stream = str(event.originator_id)
        first[stream] = min(first.get(stream, event.originator_version), event.originator_version)
    return [(stream, version - 1) for stream, version in first.items() if version > 1]


def new_streams(stored_events: Sequence[StoredEvent]) -> dict[str, int]:
    """Streams this append starts (its first version is 1), with how many events it writes.

    Such a stream must have no rows at all: after a retention purge its early versions
    are deleted under a tombstone, and the primary key alone would let version 1 be
    written again. Every backend refuses that append (a stream is never rewritten).
    """
    first: dict[str, int] = {}
    count: dict[str, int] = {}
    for event in stored_events:
        stream = str(event.originator_id)
        first[stream] = min(first.get(stream, event.originator_version), event.originator_version)
        count[stream] = count.get(stream, 0) + 1
    return {stream: count[stream] for stream, version in first.items() if version == 1}


def notification(row: Mapping[str, Any], position_column: str) -> Notification:
    """A stored row with its global position (``rowid`` / ``notification_id``)."""
    state = row["state"]
    return Notification(
        id=row[position_column],
        originator_id=row["originator_id"],
        originator_version=row["originator_version"],
        topic=row["topic"],
        # A state changed behind the journal's back to NULL or text (SQLite keeps any type)
        # is handed on as it is: its reader names the row, and bytes(None) would raise here.
        state=bytes(state) if isinstance(state, bytes | bytearray | memoryview) else state,
    )
