"""Observers for the replay tests (importable as ``replay_observers:...`` by the CLI)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from replay.observed import ObservedEvent

SEEN: list[int] = []


def record_position(event: ObservedEvent) -> None:
    """A plain callable observer: appends positions to $REPLAY_OUT (one per line)."""
    with open(os.environ["REPLAY_OUT"], "a") as out:
        out.write(f"{event.position}\n")


class CountingObserver:
    """A class: the CLI makes one; it writes its counts to $REPLAY_OUT at each event."""

    def __init__(self) -> None:
        self.by_type: dict[str, int] = {}

    def observe(self, event: ObservedEvent) -> Any:
        self.by_type[event.type] = self.by_type.get(event.type, 0) + 1
        with open(os.environ["REPLAY_OUT"], "w") as out:
            json.dump(self.by_type, out)


def fail_at_third(event: ObservedEvent) -> None:
    """Records positions to $REPLAY_OUT like `record_position`, and raises on the third."""
    path = os.environ["REPLAY_OUT"]
    seen = Path(path).read_text().count("\n") if os.path.exists(path) else 0
    if seen == 2:
        raise RuntimeError("cannot take this one")
    with open(path, "a") as out:
        out.write(f"{event.position}\n")


def exit_at_first(event: ObservedEvent) -> None:
    """Calls ``sys.exit(7)`` (a BaseException that is no Exception) on the first event."""
    import sys

    sys.exit(7)


def cancelled_at_first(event: ObservedEvent) -> None:
    """Raises ``asyncio.CancelledError`` (a BaseException) on the first event."""
    import asyncio

    raise asyncio.CancelledError
