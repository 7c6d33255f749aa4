"""In-memory recorder (``memory://``): eventsourcing's POPO one, plus stream positions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eventsourcing.persistence import IntegrityError, Notification, StoredEvent
from eventsourcing.popo import POPOApplicationRecorder

from journal.backend_common import predecessors


class BlackOpsMemoryRecorder(POPOApplicationRecorder):
    """Private to one process; for tests and demos, never durable."""

    def _assert_uniqueness(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> None:
        super()._assert_uniqueness(stored_events, **kwargs)
        for stream, version in predecessors(stored_events):  # called under the lock
            if version not in self._stored_events_index.get(stream, {}):
                raise IntegrityError(f"stream {stream!r} has no version {version}")

    def select_stream(self, stream: str, after_version: int = 0) -> list[Notification]:
        with self._database_lock:
            # .get, not [...]: the index is a defaultdict and reads must not grow it.
            index = self._stored_events_index.get(stream, {})
            found = []
            for version in sorted(v for v in index if v > after_version):
                offset = index[version]
                stored = self._stored_events[offset]
                found.append(
                    Notification(
                        id=offset + 1,
                        originator_id=stored.originator_id,
                        originator_version=stored.originator_version,
                        topic=stored.topic,
                        state=stored.state,
                    )
                )
            return found

    def create_table(self) -> None:
        """Memory holds no tables: there is nothing to create."""
