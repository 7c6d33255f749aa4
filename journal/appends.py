"""An append's request: new events for one stream at an expected version (what the store
commits and its commit queue groups; `journal.store` re-exports it)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from domain.events import NewEvent


@dataclass(frozen=True, slots=True)
class Append:
    """New events for one stream, valid only if the stream is still at ``expected_version``."""

    stream: str
    expected_version: int
    events: Sequence[NewEvent]
