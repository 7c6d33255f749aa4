"""What every backend checks inside its insert transaction, beyond the primary key."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from eventsourcing.persistence import StoredEvent


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
