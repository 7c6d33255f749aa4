"""Journal event records: what is appended, and what is read back with its position."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event about to be appended: its version and position come from the journal."""

    type: str
    at: str
    context: dict[str, Any]
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class RecordedEvent:
    """An event as the canonical journal holds it."""

    position: int
    stream: str
    version: int
    type: str
    at: str
    context: dict[str, Any]
    data: dict[str, Any]

    def to_observed(self) -> dict[str, Any]:
        """The Observed JSONL line (python-contract §7), as a document."""
        return {
            "position": self.position,
            "stream": self.stream,
            "version": self.version,
            "type": self.type,
            "at": self.at,
            "context": self.context,
            "data": self.data,
        }
