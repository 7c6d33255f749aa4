"""What every backend recorder shares: the gap check and reading rows as Notifications."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from eventsourcing.persistence import Notification, StoredEvent


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


def notification(row: Mapping[str, Any], position_column: str) -> Notification:
    """A stored row with its global position (``rowid`` / ``notification_id``)."""
    return Notification(
        id=row[position_column],
        originator_id=row["originator_id"],
        originator_version=row["originator_version"],
        topic=row["topic"],
        state=bytes(row["state"]),
    )
