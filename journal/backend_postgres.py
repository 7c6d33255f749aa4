"""PostgreSQL recorder: eventsourcing's, plus stream reads with positions and a gap check."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eventsourcing.persistence import IntegrityError, Notification, StoredEvent
from eventsourcing.postgres import PostgresApplicationRecorder
from psycopg import Cursor
from psycopg.rows import DictRow
from psycopg.sql import SQL, Composed, Identifier

from journal.backend_common import notification, predecessors


class BlackOpsPostgresRecorder(PostgresApplicationRecorder):
    """Positions are the table's ``notification_id`` (a bigserial, committed in order
    because eventsourcing locks the table for every insert)."""

    def _insert_events(
        self, curs: Cursor[DictRow], stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> None:
        """eventsourcing's pre-insert hook, inside the insert transaction.

        The gap check runs here because an error raised later, in the insert step, is
        held back by the recorder until after its transaction block has exited. A
        predecessor version never disappears once stored, so checking before the
        table lock is as good as after it; staleness is the primary key's job.
        """
        super()._insert_events(curs, stored_events, **kwargs)
        needed = list(predecessors(stored_events))
        if not needed:
            return
        statement = self._sql(
            "SELECT count(*) AS found FROM {schema}.{table} t "
            "JOIN unnest(%s::text[], %s::bigint[]) AS p(id, v) "
            "ON t.originator_id = p.id AND t.originator_version = p.v"
        )
        curs.execute(statement, ([s for s, _ in needed], [v for _, v in needed]))
        row = curs.fetchone()
        if row is None or row["found"] != len(needed):
            raise IntegrityError("an append would leave a gap in a stream's versions")

    def select_stream(self, stream: str, after_version: int = 0) -> list[Notification]:
        statement = self._sql(
            "SELECT notification_id, originator_id, originator_version, topic, state "
            "FROM {schema}.{table} WHERE originator_id = %s AND originator_version > %s "
            "ORDER BY originator_version"
        )
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(statement, (stream, after_version), prepare=True)
            return [notification(row, "notification_id") for row in curs.fetchall()]

    def _sql(self, text: str) -> Composed:
        """A statement on this recorder's events table (``{schema}.{table}``)."""
        return SQL(text).format(  # our own literals, never user text
            schema=Identifier(self.datastore.schema), table=Identifier(self.events_table_name)
        )
