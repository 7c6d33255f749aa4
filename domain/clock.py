"""The one time abstraction: every timestamp in the journal comes from a Clock."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    """Injected time. ``now`` is timezone-aware UTC; ``sleep`` waits on this clock's terms."""

    def now(self) -> datetime: ...

    def sleep(self, seconds: float) -> None: ...


def format_instant(moment: datetime) -> str:
    """RFC 3339 UTC with microseconds and a ``Z``: fixed width, so it sorts as text."""
    if moment.tzinfo is None:
        raise ValueError("instants must be timezone-aware")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
