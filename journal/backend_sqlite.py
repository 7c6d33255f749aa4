"""SQLite recorder: eventsourcing's, plus reading one stream with its positions."""

from __future__ import annotations

from eventsourcing.persistence import Notification
from eventsourcing.sqlite import SQLiteApplicationRecorder


class BlackOpsSQLiteRecorder(SQLiteApplicationRecorder):
    """Positions are SQLite ``rowid`` values, as eventsourcing's notification ids."""

    def select_stream(self, stream: str, after_version: int = 0) -> list[Notification]:
        statement = (
            f"SELECT rowid, originator_id, originator_version, topic, state "
            f"FROM {self.events_table_name} "
            "WHERE originator_id = ? AND originator_version > ? ORDER BY originator_version"
        )
        with self.datastore.transaction(commit=False) as cursor:
            cursor.execute(statement, (stream, after_version))
            return [
                Notification(
                    id=row["rowid"],
                    originator_id=row["originator_id"],
                    originator_version=row["originator_version"],
                    topic=row["topic"],
                    state=bytes(row["state"]),
                )
                for row in cursor.fetchall()
            ]
