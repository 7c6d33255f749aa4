"""PostgreSQL recorder: eventsourcing's, plus stream reads, a gap check and the due-work index."""

from __future__ import annotations

import hashlib
import logging
import select
import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import psycopg
from eventsourcing.persistence import (
    DataError,
    IntegrityError,
    InterfaceError,
    Notification,
    OperationalError,
    StoredEvent,
)
from eventsourcing.postgres import PostgresApplicationRecorder
from eventsourcing.utils import retry
from psycopg.errors import DivisionByZero
from psycopg.sql import SQL, Composed, Identifier
from psycopg_pool import ConnectionPool

from journal import retention_index, topic_sql, work_index
from journal.backend_common import new_streams, notification, predecessors
from journal.locator import postgres_connect
from journal.marks import MarkRecorder, MarkTables
from journal.retention_index import Rebuild
from journal.retention_sql import RetentionRecorder, RetentionTables
from journal.snapshot_sql import SnapshotRecorder, SnapshotTables, Tail, tails
from journal.work_sql import WorkTables

log = logging.getLogger("blackops.journal")


class Columns(NamedTuple):
    """An append's events as the insert's four parameter arrays, in the events' order."""

    streams: list[str]
    versions: list[int]
    topics: list[str]
    states: list[bytes]


class BlackOpsPostgresRecorder(
    RetentionRecorder, SnapshotRecorder, MarkRecorder, PostgresApplicationRecorder
):
    """Positions are the table's ``notification_id`` (a bigserial, committed in order
    because every insert locks the table)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The pool checks a connection before lending it (POSTGRES_PRE_PING): with a round
        # trip only when the idle socket has something to read (decisions F31).
        self.datastore.pool._check = check_lent_connection
        schema = self.datastore.schema
        table = f"{schema}.{self.events_table_name}"
        self.work = WorkTables(f"{schema}.", sqlite=False, events_table=table)
        self.retention = RetentionTables(f"{schema}.", sqlite=False)
        self.snapshots = SnapshotTables(
            f"{schema}.", sqlite=False, events_table=table, position="notification_id"
        )
        self.marks = MarkTables(f"{schema}.", sqlite=False)
        self._events = table
        self._topic_index = topic_sql.create_index(table, sqlite=False)
        self._topic_index_name = f"{schema}.{topic_sql.INDEX}"
        # One wake-up channel per schema: workers of other journals are not disturbed.
        self.work_channel = "blackops_work_" + hashlib.sha256(schema.encode()).hexdigest()[:16]
        # The payload names the waking topics committed (a listener can tell whose work).
        self._notify_work = SQL("SELECT pg_notify(%s, %s)")
        self._hint_commit = SQL("SET LOCAL synchronous_commit = off")
        self._begin, self._commit = SQL("BEGIN"), SQL("COMMIT")
        self._create_leaves = SQL(
            "CREATE TABLE IF NOT EXISTS {}.blackops_leaves "
            "(position bigint PRIMARY KEY, leaf bytea NOT NULL)"
        ).format(Identifier(schema))
        # The insert, its Merkle leaves (journal/leaves.py, built in SQL from the rows just
        # inserted) and the due-work index's tracked position in one statement: the
        # client sends and the server plans one statement instead of three, and the leaves
        # are built from the inserted rows rather than read back through the sequence.
        # Rows come back in position order, which is the order they were given in (the
        # table lock makes this transaction's positions one run, taken row by row).
        self._insert_with_leaves = SQL(
            "WITH ins AS (INSERT INTO {schema}.{table} AS t "
            "(originator_id, originator_version, topic, state) "
            "SELECT originator_id, originator_version, topic, state "
            # Four arrays in binary, not one array of the composite row type: psycopg writes
            # a composite array as text in Python (the state hex-escaped), ~10x the client
            # CPU per event for a large append (decisions F93).
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
        ).format(
            schema=Identifier(schema),
            table=Identifier(self.events_table_name),
            positions=SQL(self.work.positions),  # the table WorkTables tracks it in
        )
        self._select_leaves = self._sql(
            "SELECT position, leaf FROM {schema}.blackops_leaves WHERE position > %s "
            "ORDER BY position LIMIT %s"
        )
        # Sent in the same pipeline as the insert, before the table lock: a missing
        # predecessor divides by zero, which aborts the whole transaction (no extra
        # round trip to look at the count). A predecessor disappears only in a retention
        # purge, which appends a tombstone (a later version) first, so a racing append
        # then meets the primary key. Staleness is the key's job.
        # One predecessor (a lone append) is a primary-key probe whose generic plan the
        # server keeps; several are joined with the arrays (planned per call).
        self._gap_one = (
            "EXISTS (SELECT 1 FROM {schema}.{table} "
            "WHERE originator_id = %s AND originator_version = %s)"
        )
        self._gap_many = (
            "(SELECT count(*) FROM {schema}.{table} t "
            "JOIN unnest(%s::text[], %s::bigint[]) AS p(id, v) "
            "ON t.originator_id = p.id AND t.originator_version = p.v) = %s"
        )
        # Likewise: a stream this append starts must have no rows (a purged history keeps
        # its tombstone), or version 1 of a purged stream could be written again.
        # A count, not NOT EXISTS: planned generically, an EXISTS expects to meet a row soon
        # and scans the whole table (seconds at 2M events: decisions F94).
        self._fresh = "(SELECT count(*) FROM {schema}.{table} WHERE originator_id = ANY(%s)) = 0"
        # The transaction's settings ride the same statement (set_config(..., true) is SET
        # LOCAL): a writer stopped mid-transaction (SIGSTOP, a debugger) must not hold the
        # lock every writer needs for ever, so the server ends such a session; the lock
        # waits as long as eventsourcing's own append would (its lock_timeout).
        self._settings = (
            "set_config('idle_in_transaction_session_timeout', '10s', true), "
            f"set_config('lock_timeout', '{int(self.datastore.lock_timeout)}s', true)"
        )
        # Keyed by (predecessors: none, one, several; starts a stream).
        self._checks = {
            (gaps, starts): self._checks_statement(gaps, starts)
            for gaps in (0, 1, 2)
            for starts in (False, True)
        }
        self._lock = self._sql("LOCK TABLE {schema}.{table} IN EXCLUSIVE MODE")
        self._reserve_tails = self.snapshots.reserve_tails_statement(self.work.due)

    def _checks_statement(self, gaps: int, starts: bool) -> Composed:
        tests = [self._gap_one] if gaps == 1 else [self._gap_many] if gaps else []
        tests += [self._fresh] if starts else []
        verdict = " AND ".join(tests)
        found = f", 1 / (CASE WHEN {verdict} THEN 1 ELSE 0 END) AS found" if tests else ""
        return self._sql("SELECT " + self._settings + found)

    def create_table(self) -> None:
        super().create_table()
        # One transaction per statement: an opener holding the lock of one statement (a
        # CREATE INDEX IF NOT EXISTS takes a SHARE lock before it finds the index) while
        # waiting for the next could deadlock with appenders, who lock these tables in
        # another order.
        for statement in [
            *self.work.create,
            *self.retention.create,
            *self.snapshots.create,
            self._create_leaves,
        ]:
            with self.datastore.transaction(commit=True) as curs:
                curs.execute(statement, prepare=False)
        # The topic index is on the events table, whose lock every append takes: look for it
        # first, without a lock, so that opening an existing journal never queues behind
        # the appenders.
        with self.datastore.transaction(commit=True) as curs:
            curs.execute("SELECT to_regclass(%s) IS NOT NULL AS found", (self._topic_index_name,))
            found = curs.fetchone()
            if not (found and (found["found"] if isinstance(found, dict) else found[0])):
                curs.execute(self._topic_index, prepare=False)

    @retry((InterfaceError, OperationalError), max_attempts=3, wait=0.2)
    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        """One transaction: gap check, table lock, insert, due-work index, position.

        Pipelined, COMMIT included: every statement from BEGIN to COMMIT is sent at once
        and the client waits once, so the events-table lock, which serialises all
        writers, is held for server time only, never across this process's turnaround
        (decisions F30). An error at any step makes the server skip the rest, COMMIT
        included, and the transaction is rolled back: nothing half-done is ever
        committed. A retry after a lost acknowledgement meets the primary key, and the
        store reconciles it.
        """
        triples = [(str(s.originator_id), s.topic, s.state) for s in stored_events]
        changes = work_index.changes(triples)
        kept = retention_index.changes(triples)
        wake = ",".join(sorted({s.topic for s in stored_events} & work_index.WAKING_TOPICS))
        rows = Columns(
            [stream for stream, _, _ in triples],
            [s.originator_version for s in stored_events],
            [topic for _, topic, _ in triples],
            [state for _, _, state in triples],
        )
        needed = list(predecessors(stored_events))
        fresh = list(new_streams(stored_events))
        try:
            return self._insert_pipelined(rows, changes, kept, wake, needed, fresh)
        except (DivisionByZero, DataError) as error:
            gap = isinstance(error, DivisionByZero) or isinstance(error.__cause__, DivisionByZero)
            if not gap:
                raise
            raise IntegrityError("an append would leave a gap or restart a stream") from None

    def _insert_pipelined(
        self,
        rows: Columns,
        changes: list[work_index.RowChange],
        kept: dict[str, dict[str, Any]],
        wake: str,
        needed: list[tuple[str, int]],
        fresh: list[str],
    ) -> list[int]:
        # On any error the pool's connection context rolls the open block back.
        # The pool's connections are in autocommit mode: the block is ours to open and
        # close, and COMMIT travels in the same pipeline as the statements it commits.
        with (
            self.datastore.get_connection() as conn,
            conn.pipeline() as pipeline,
            conn.cursor() as curs,
            conn.cursor() as inserted,
        ):
            curs.execute(self._begin)
            checks, arguments = self._checks_for(needed, fresh)
            curs.execute(checks, arguments, prepare=True)
            curs.execute(self._lock, prepare=True)
            if wake:
                curs.execute(self._notify_work, (self.work_channel, wake), prepare=True)
            inserted.execute(self._insert_with_leaves, (*rows, work_index.NAME), prepare=True)
            self.work.apply(curs, changes, None)  # the insert moved the tracked position
            self.retention.apply(curs, kept)
            curs.execute(self._commit)
            pipeline.sync()
            positions = [row["notification_id"] for row in inserted.fetchall()]
        if len(positions) != len(rows.versions):
            raise IntegrityError("the journal did not return a position for every event")
        return positions

    def _checks_for(
        self, needed: list[tuple[str, int]], fresh: list[str]
    ) -> tuple[Composed, tuple[Any, ...]]:
        """The statement setting the transaction's limits and checking that the append
        leaves no gap and restarts no stream (it divides by zero if not), and its
        arguments."""
        arguments: tuple[Any, ...] = ()
        if len(needed) == 1:
            arguments = needed[0]
        elif needed:
            arguments = ([s for s, _ in needed], [v for _, v in needed], len(needed))
        if fresh:
            arguments = (*arguments, fresh)
        return self._checks[min(len(needed), 2), bool(fresh)], arguments

    def delete_stream_events(self, stream: str, upto_version: int) -> int:
        statement = self._sql(
            "DELETE FROM {schema}.{table} WHERE originator_id = %s AND originator_version <= %s"
        )
        with self.datastore.transaction(commit=True) as curs:
            curs.execute(statement, (stream, upto_version))
            deleted = int(curs.rowcount)
            self.snapshots.delete(curs, stream)  # no copy of a purged history outlives it
            return deleted

    def select_leaves(self, after: int, limit: int) -> list[tuple[int, bytes]]:
        with self.datastore.transaction(commit=False) as curs:
            curs.execute(self._select_leaves, (after, limit), prepare=True)
            return [(int(r["position"]), bytes(r["leaf"])) for r in curs.fetchall()]

    def select_stream(self, stream: str, after_version: int = 0) -> list[Notification]:
        found: list[Notification] = self.select_streams([stream], after_version)
        return found

    @retry((InterfaceError, OperationalError), max_attempts=3, wait=0.2)
    def select_topics(self, topics: Sequence[str], after: int, limit: int) -> list[Notification]:
        statement = topic_sql.select_topics(self._events, len(topics), sqlite=False)
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(statement, topic_sql.parameters(list(topics), after, limit), prepare=True)
            return [notification(row, "position") for row in curs.fetchall()]

    def select_streams(self, streams: Sequence[str], after_version: int = 0) -> list[Notification]:
        """Events of several streams, by stream then version (one round trip)."""
        statement = self._sql(
            "SELECT notification_id, originator_id, originator_version, topic, state "
            "FROM {schema}.{table} WHERE originator_id = ANY(%s) AND originator_version > %s "
            "ORDER BY originator_id, originator_version"
        )
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(statement, (list(streams), after_version), prepare=True)
            return [notification(row, "notification_id") for row in curs.fetchall()]

    # -- due-work index --------------------------------------------------------------------

    def reserve_due(
        self, now: int, hold_until: int, worker: str, types: Sequence[str], limit: int
    ) -> list[str]:
        with self.datastore.transaction(commit=True) as curs:
            return self.work.reserve(curs, now, hold_until, worker, types, limit)

    def reserve_and_select(
        self, now: int, hold_until: int, worker: str, types: Sequence[str], limit: int
    ) -> list[Notification]:
        """Reserve due rows and read their streams in one statement (one round trip:
        the pool's connections autocommit, and a single statement is its own
        transaction, so no BEGIN and COMMIT round trips around it)."""
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(
                self.work.reserve_and_read_statement,
                (hold_until, worker, now, list(types), limit),
                prepare=True,
            )
            return [notification(row, "notification_id") for row in curs.fetchall()]

    def reserve_and_select_tails(
        self, now: int, hold_until: int, worker: str, types: Sequence[str], limit: int
    ) -> dict[str, Tail]:
        """Reserve due rows and read their streams from their snapshots on (one round trip).

        The reservation is a hint (the claim's append decides), so its commit does not
        wait for the WAL flush: a reservation lost in a crash is a row due again at once.
        BEGIN, the setting, the statement and COMMIT are pipelined: one round trip, not
        four (an error skips the rest, COMMIT included, and the block is rolled back).
        """
        with (
            self.datastore.get_connection() as conn,
            conn.pipeline() as pipeline,
            conn.cursor() as curs,
            conn.cursor() as reserved,
        ):
            curs.execute(self._begin)
            curs.execute(self._hint_commit, prepare=True)
            reserved.execute(
                self._reserve_tails, (hold_until, worker, now, list(types), limit), prepare=True
            )
            curs.execute(self._commit)
            pipeline.sync()
            return tails(reserved.fetchall())

    def renew_leases(
        self, leases: Sequence[tuple[str, int]], worker: str, now: int, until: int
    ) -> list[str]:
        with self.datastore.transaction(commit=True) as curs:
            return self.work.renew(curs, leases, worker, now, until)

    def held_leases(self, leases: Sequence[tuple[str, int]], worker: str) -> list[str]:
        # One statement, autocommitted (its own snapshot): a runner asks this every 50 ms
        # while it holds contexts, so no BEGIN and ROLLBACK round trips around it.
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            return self.work.held(curs, leases, worker)

    def next_due(self, types: Sequence[str]) -> int | None:
        # One statement, autocommitted: a worker asks this on every idle turn.
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            return self.work.next_due(curs, types)

    def work_rows(self) -> list[work_index.WorkRow]:
        with self.datastore.transaction(commit=False) as curs:
            return self.work.rows(curs)

    def work_rows_of(self, row_type: str, due_by: int | None = None) -> list[work_index.WorkRow]:
        with self.datastore.transaction(commit=False) as curs:
            return self.work.rows_of(curs, row_type, due_by)

    def due_work_rows(self, prefix: str, due_by: int) -> list[work_index.WorkRow]:
        with self.datastore.transaction(commit=False) as curs:
            return self.work.due_rows(curs, prefix, due_by)

    def due_work_summary(self, due_by: int) -> dict[str, tuple[int, int]]:
        with self.datastore.transaction(commit=False) as curs:
            return self.work.due_summary(curs, due_by)

    def work_position(self) -> int:
        with self.datastore.transaction(commit=False) as curs:
            return self.work.position(curs)

    def rebuild_work(self, page: int = 5000) -> int:
        """Drop the index and fold the whole journal again, with appends held off."""
        with (
            self.datastore.get_connection() as conn,
            conn.transaction(),
            conn.cursor() as curs,
        ):
            self._lock_table(curs)  # no append may interleave with the rebuild
            self.work.clear(curs)
            position = 0
            statement = self._sql(
                "SELECT notification_id, originator_id, topic, state FROM {schema}.{table} "
                "WHERE notification_id > %s ORDER BY notification_id LIMIT %s"
            )
            while True:
                curs.execute(statement, (position, page))
                found = curs.fetchall()
                if not found:
                    break
                position = found[-1]["notification_id"]
                triples = [(r["originator_id"], r["topic"], bytes(r["state"])) for r in found]
                self.work.apply(curs, work_index.changes(triples), position)
            return position

    def ensure_retention(self) -> None:
        """An existing journal opened for the first time by this version: build it."""
        with self.datastore.transaction(commit=False) as curs:
            built = self.retention.built(curs)
        if not built:
            self.rebuild_retention()

    def rebuild_retention(self, page: int = 5000) -> int:
        """Fold the whole journal into the retention index, with appends held off."""
        with (
            self.datastore.get_connection() as conn,
            conn.transaction(),
            conn.cursor() as curs,
        ):
            self._lock_table(curs)  # no append may interleave with the rebuild
            fold, position = Rebuild(), 0
            statement = self._sql(
                "SELECT notification_id, originator_id, topic, state FROM {schema}.{table} "
                "WHERE notification_id > %s ORDER BY notification_id LIMIT %s"
            )
            while True:
                curs.execute(statement, (position, page))
                found = curs.fetchall()
                if not found:
                    break
                position = found[-1]["notification_id"]
                fold.add((r["originator_id"], r["topic"], bytes(r["state"])) for r in found)
            self.retention.write(curs, fold.result(), position)
            return int(position)

    def _sql(self, text: str) -> Composed:
        """A statement on this recorder's events table (``{schema}.{table}``)."""
        return SQL(text).format(  # our own literals, never user text
            schema=Identifier(self.datastore.schema), table=Identifier(self.events_table_name)
        )


def check_lent_connection(conn: psycopg.Connection[Any]) -> None:
    """The pool's check before lending ``conn``; raises if it is broken.

    An idle connection's socket has nothing to read unless the server closed it
    (restart, termination, idle timeout: end of file or a FATAL message) or sent an
    asynchronous message; only then is it pinged (an empty query, the pool's own check),
    so a healthy connection costs no round trip per transaction. A connection lost
    silently still fails at its first statement, as it could after any ping.
    """
    if conn.closed:
        raise psycopg.OperationalError("the connection is closed")
    readable, _, _ = select.select([conn.fileno()], [], [], 0)
    if readable:
        ConnectionPool.check_connection(conn)


def listen_for_wakes(
    settings: dict[str, str],
    channel: str,
    on_wake: Callable[[frozenset[str] | None], None],
    stopped: threading.Event,
) -> None:
    """LISTEN on a schema's work channel until ``stopped``; every append that may make
    work due NOTIFYs it (in its own transaction) with the waking topics it committed,
    which ``on_wake`` receives. Reconnects after failures with a backoff and calls
    ``on_wake(None)`` after each connect (announcements may have been missed meanwhile;
    the listener's own polling covers the gap)."""
    statement = SQL("LISTEN {}").format(Identifier(channel))
    backoff = 0.2
    while not stopped.is_set():
        try:
            with postgres_connect(settings) as conn:
                conn.execute(statement)
                backoff = 0.2
                on_wake(None)
                while not stopped.is_set():
                    for notify in conn.notifies(timeout=0.5, stop_after=1):
                        on_wake(frozenset(notify.payload.split(",")) if notify.payload else None)
        except psycopg.Error as error:
            log.info("LISTEN connection lost (%s); retrying", error)
            stopped.wait(backoff)
            backoff = min(backoff * 2, 5.0)
