"""The PostgreSQL append as it was before the append function (main at 885737b): nine
pipelined statements. Kept only as the judge of a differential test
(tests/journal/test_append_function.py): the function must write what these wrote."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eventsourcing.persistence import DataError, IntegrityError, StoredEvent
from psycopg.errors import DivisionByZero
from psycopg.sql import SQL, Composed, Identifier

from journal import retention_index, work_index
from journal.backend_common import new_streams, predecessors


class PipelinedAppend:
    """``insert_events`` for a ``BlackOpsPostgresRecorder``, the old way."""

    def __init__(self, recorder: Any) -> None:
        self.recorder = recorder
        schema = recorder.datastore.schema
        names = {
            "schema": Identifier(schema),
            "table": Identifier(recorder.events_table_name),
        }
        self.insert_with_leaves = SQL(
            "WITH ins AS (INSERT INTO {schema}.{table} AS t "
            "(originator_id, originator_version, topic, state) "
            "SELECT originator_id, originator_version, topic, state "
            "FROM unnest(%b::text[], %b::bigint[], %b::text[], %b::bytea[]) "
            "AS r(originator_id, originator_version, topic, state) "
            "RETURNING notification_id, originator_id, originator_version, topic, state), "
            "leaves AS (INSERT INTO {schema}.blackops_leaves (position, leaf) "
            "SELECT notification_id, sha256('\\x00'::bytea "
            "|| substring(state from 1 for octet_length(state) - 1) "
            "|| convert_to(',\"position\":' || notification_id::text "
            '|| \',"stream":"\' || originator_id::text '
            '|| \'","type":"\' || topic '
            "|| '\",\"version\":' || originator_version::text || '}}', 'UTF8')) FROM ins), "
            "tracked AS (INSERT INTO {positions} (name, position) "
            "SELECT %s, max(notification_id) FROM ins "
            "ON CONFLICT (name) DO UPDATE SET position = excluded.position) "
            "SELECT notification_id FROM ins ORDER BY notification_id"
        ).format(**names, positions=SQL(recorder.work.positions))
        gap_one = (
            "EXISTS (SELECT 1 FROM {schema}.{table} "
            "WHERE originator_id = %s AND originator_version = %s)"
        )
        gap_many = (
            "(SELECT count(*) FROM {schema}.{table} t "
            "JOIN unnest(%s::text[], %s::bigint[]) AS p(id, v) "
            "ON t.originator_id = p.id AND t.originator_version = p.v) = %s"
        )
        fresh = "(SELECT count(*) FROM {schema}.{table} WHERE originator_id = ANY(%s)) = 0"
        settings = (
            "set_config('idle_in_transaction_session_timeout', '10s', true), "
            f"set_config('lock_timeout', '{int(recorder.datastore.lock_timeout)}s', true)"
        )

        def checks(gaps: int, starts: bool) -> Composed:
            tests = [gap_one] if gaps == 1 else [gap_many] if gaps else []
            tests += [fresh] if starts else []
            verdict = " AND ".join(tests)
            found = f", 1 / (CASE WHEN {verdict} THEN 1 ELSE 0 END) AS found" if tests else ""
            return SQL("SELECT " + settings + found).format(**names)

        self.checks = {(g, s): checks(g, s) for g in (0, 1, 2) for s in (False, True)}
        self.lock = SQL("LOCK TABLE {schema}.{table} IN EXCLUSIVE MODE").format(**names)
        self.notify = SQL("SELECT pg_notify(%s, %s)")

    def insert_events(self, stored_events: Sequence[StoredEvent], **_: Any) -> list[int]:
        triples = [(str(s.originator_id), s.topic, s.state) for s in stored_events]
        changes = work_index.changes(triples)
        kept = retention_index.changes(triples)
        wake = ",".join(sorted({s.topic for s in stored_events} & work_index.WAKING_TOPICS))
        rows = (
            [stream for stream, _, _ in triples],
            [s.originator_version for s in stored_events],
            [topic for _, topic, _ in triples],
            [state for _, _, state in triples],
        )
        needed = list(predecessors(stored_events))
        fresh = list(new_streams(stored_events))
        arguments: tuple[Any, ...] = ()
        if len(needed) == 1:
            arguments = needed[0]
        elif needed:
            arguments = ([s for s, _ in needed], [v for _, v in needed], len(needed))
        if fresh:
            arguments = (*arguments, fresh)
        recorder = self.recorder
        try:
            with (
                recorder.datastore.get_connection() as conn,
                conn.pipeline() as pipeline,
                conn.cursor() as curs,
                conn.cursor() as inserted,
            ):
                curs.execute(SQL("BEGIN"))
                curs.execute(self.checks[min(len(needed), 2), bool(fresh)], arguments)
                curs.execute(self.lock)
                if wake:
                    curs.execute(self.notify, (recorder.work_channel, wake))
                inserted.execute(self.insert_with_leaves, (*rows, work_index.NAME))
                recorder.work.apply(curs, changes, None)
                recorder.retention.apply(curs, kept)
                curs.execute(SQL("COMMIT"))
                pipeline.sync()
                return [row["notification_id"] for row in inserted.fetchall()]
        except (DivisionByZero, DataError) as error:
            gap = isinstance(error, DivisionByZero) or isinstance(error.__cause__, DivisionByZero)
            if not gap:
                raise
            raise IntegrityError("an append would leave a gap or restart a stream") from None
