"""SQLite recorder: eventsourcing's, plus stream reads with positions and a gap check."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eventsourcing.persistence import IntegrityError, Notification, StoredEvent
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteCursor

from journal.backend_common import notification, predecessors


class BlackOpsSQLiteRecorder(SQLiteApplicationRecorder):
    """Positions are SQLite ``rowid`` values, as eventsourcing's notification ids."""

    def _insert_events(
        self, c: SQLiteCursor, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        positions = super()._insert_events(c, stored_events, **kwargs)
        # Checked after the insert, inside the same write transaction: a read first
        # would risk SQLITE_BUSY_SNAPSHOT when another writer commits in between.
        for stream, version in predecessors(stored_events):
            c.execute(
                f"SELECT 1 FROM {self.events_table_name} "
                "WHERE originator_id = ? AND originator_version = ?",
                (stream, version),
            )
            if c.fetchone() is None:
                raise IntegrityError(f"stream {stream!r} has no version {version}")
        return positions

    def select_stream(self, stream: str, after_version: int = 0) -> list[Notification]:
        statement = (
            f"SELECT rowid, originator_id, originator_version, topic, state "
            f"FROM {self.events_table_name} "
            "WHERE originator_id = ? AND originator_version > ? ORDER BY originator_version"
        )
        with self.datastore.transaction(commit=False) as cursor:
            cursor.execute(statement, (stream, after_version))
            return [notification(row, "rowid") for row in cursor.fetchall()]
