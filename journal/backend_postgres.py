"""PostgreSQL recorder: eventsourcing's, plus reading one stream with its positions."""

from __future__ import annotations

from eventsourcing.persistence import Notification
from eventsourcing.postgres import PostgresApplicationRecorder
from psycopg.sql import SQL, Identifier


class BlackOpsPostgresRecorder(PostgresApplicationRecorder):
    """Positions are the table's ``notification_id`` (a bigserial, committed in order
    because eventsourcing locks the table for every insert)."""

    def select_stream(self, stream: str, after_version: int = 0) -> list[Notification]:
        statement = SQL(
            "SELECT notification_id, originator_id, originator_version, topic, state "
            "FROM {schema}.{table} WHERE originator_id = %s AND originator_version > %s "
            "ORDER BY originator_version"
        ).format(
            schema=Identifier(self.datastore.schema),
            table=Identifier(self.events_table_name),
        )
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(statement, (stream, after_version), prepare=True)
            return [
                Notification(
                    id=row["notification_id"],
                    originator_id=row["originator_id"],
                    originator_version=row["originator_version"],
                    topic=row["topic"],
                    state=bytes(row["state"]),
                )
                for row in curs.fetchall()
            ]
