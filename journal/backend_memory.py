"""In-memory recorder (``memory://``): eventsourcing's POPO one, plus stream positions."""

from __future__ import annotations

from eventsourcing.persistence import Notification
from eventsourcing.popo import POPOApplicationRecorder


class BlackOpsMemoryRecorder(POPOApplicationRecorder):
    """Private to one process; for tests and demos, never durable."""

    def select_stream(self, stream: str, after_version: int = 0) -> list[Notification]:
        with self._database_lock:
            index = self._stored_events_index[stream]
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
