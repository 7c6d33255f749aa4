"""PostgreSQL recorder: eventsourcing's, plus stream reads, a gap check and the due-work index."""

from __future__ import annotations

import hashlib
import logging
import secrets
import select
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from eventsourcing.persistence import (
    IntegrityError,
    InterfaceError,
    Notification,
    OperationalError,
    ProgrammingError,
    StoredEvent,
)
from eventsourcing.postgres import PostgresApplicationRecorder
from eventsourcing.utils import retry
from psycopg.rows import tuple_row
from psycopg.sql import SQL, Composed, Identifier
from psycopg_pool import ConnectionPool, PoolTimeout

from journal import append_sql, lease_sql, retention_index, topic_sql, work_index
from journal.backend_common import (
    StoredRow,
    new_streams,
    notification,
    predecessors,
    stored_rows,
)
from journal.locator import postgres_connect
from journal.marks import MarkRecorder, MarkTables
from journal.retention_index import Rebuild
from journal.retention_sql import RetentionRecorder, RetentionTables
from journal.snapshot_sql import SnapshotRecorder, SnapshotTables, Tail, tails
from journal.work_sql import WorkTables

#: What begins an announcer's mark among a NOTIFY payload's names (no topic begins so).
ANNOUNCER_MARK = "@"

log = logging.getLogger("blackops.journal")

#: Parameters: schema, name. Whether one of our functions is there (no lock taken).
FUNCTION_EXISTS = (
    "SELECT count(*) AS found FROM pg_catalog.pg_proc p "
    "JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace "
    "WHERE n.nspname = %s AND p.proname = %s"
)


#: The first pause once a caller has passed over more dead connections than the pool holds.
_DYING_PAUSE = 0.5
#: How long the pool keeps retrying a connection that failed before it gives up (the next
#: request that needs one then tries again at once).
RECONNECT_GIVE_UP_SECONDS = 5.0


class BlackOpsPostgresRecorder(
    RetentionRecorder, SnapshotRecorder, MarkRecorder, PostgresApplicationRecorder
):
    """Positions are the table's ``notification_id`` (a bigserial, committed in order
    because every insert locks the table)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The pool checks a connection before lending it (POSTGRES_PRE_PING): with a round
        # trip only when the idle socket has something to read (decisions F31), and a broken
        # one is passed over at once (`lend_checked`).
        lend_checked(self.datastore.pool)
        # A connection that fails is retried 1, 2, 4... s apart, and a waiting caller cannot
        # start another: with psycopg_pool's 5 minutes before it gives up, the next try came
        # up to 64 s after the server was back (a 90 s outage kept the service down 30 s
        # more: found by a fault hunt, stop 37). Giving up after a few seconds lets the next
        # caller's request start a fresh try at once.
        self.datastore.pool.reconnect_timeout = RECONNECT_GIVE_UP_SECONDS
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
        #: Signs this recorder's announcements, so that its own listener can tell them from
        #: other stores' (this store's appends wake this process's listeners directly).
        self.announcer = ANNOUNCER_MARK + secrets.token_hex(8)
        self._create_leaves = SQL(
            "CREATE TABLE IF NOT EXISTS {}.blackops_leaves "
            "(position bigint PRIMARY KEY, leaf bytea NOT NULL)"
        ).format(Identifier(schema))
        self._select_after = self._sql(
            "SELECT notification_id, originator_id, originator_version, topic, state "
            "FROM {schema}.{table} WHERE notification_id > %s ORDER BY notification_id LIMIT %s"
        )
        # The page cut after the row whose states reach a byte budget (`select_after_within`):
        # a running sum, so the first row always comes and no row past it is sent.
        self._select_after_within = self._sql(
            "SELECT notification_id, originator_id, originator_version, topic, state FROM ("
            "SELECT notification_id, originator_id, originator_version, topic, state, "
            "sum(octet_length(state)) OVER (ORDER BY notification_id "
            "ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before_it "
            "FROM {schema}.{table} WHERE notification_id > %s ORDER BY notification_id LIMIT %s"
            ") AS page WHERE coalesce(before_it, 0) < %s ORDER BY notification_id"
        )
        self._select_before_start = self._sql(
            "SELECT notification_id, originator_id, originator_version, topic, state "
            "FROM {schema}.{table} WHERE notification_id < 1 ORDER BY notification_id LIMIT %s"
        )
        self._select_leaves = self._sql(
            "SELECT position, leaf FROM {schema}.blackops_leaves WHERE position > %s "
            "ORDER BY position LIMIT %s"
        )
        # The append is one call of a function created on open (journal/append_sql.py).
        self.append_tables = append_sql.Tables(
            schema=schema,
            events=self.events_table_name,
            leaves="blackops_leaves",
            positions=self.work.positions.removeprefix(f"{schema}."),
            due=self.work.due.removeprefix(f"{schema}."),
            retention=self.retention.table.removeprefix(f"{schema}."),
            channel=self.work_channel,
            tracked=work_index.NAME,
        )
        self._append = append_sql.call_statement(schema)
        # The lock waits as long as eventsourcing's own append would (its lock_timeout).
        self._lock_wait = f"{int(self.datastore.lock_timeout)}s"
        self._hint_commit = SQL("SET LOCAL synchronous_commit = off")
        self._begin, self._commit = SQL("BEGIN"), SQL("COMMIT")
        # Server-side functions this version calls, created on open if missing.
        self.functions = {
            append_sql.NAME: append_sql.create_statement(self.append_tables),
            lease_sql.RESERVE_IDS: lease_sql.reserve_ids_create_statement(schema, self.work.due),
            lease_sql.RESERVE: lease_sql.reserve_create_statement(
                schema, self.work.due, self.snapshots.reserved_tails_statement()
            ),
            lease_sql.RESERVE_STREAMS: lease_sql.reserve_create_statement(
                schema,
                self.work.due,
                self.work.reserved_streams_statement,
                lease_sql.RESERVE_STREAMS,
                lease_sql.STREAM_COLUMNS,
            ),
            lease_sql.RENEW: lease_sql.renew_create_statement(schema, self.work.due),
        }
        self._reserve_ids = lease_sql.reserve_ids_call_statement(schema)
        self._reserve_tails = lease_sql.reserve_call_statement(schema)
        self._reserve_streams = lease_sql.reserve_call_statement(schema, lease_sql.RESERVE_STREAMS)
        self._renew_leases = lease_sql.renew_call_statement(schema)

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
        for name, statement in self.functions.items():
            self._create_function(name, statement)

    def _create_function(self, name: str, statement: str) -> None:
        """One of this version's functions, if the schema lacks it (a new journal, or one
        written by an older release). Looked up first, without a lock; created in its own
        transaction, which locks no table (a PL/pgSQL body names tables without opening
        them), so it never queues behind appenders (decisions F55, F122). Openers of one
        journal hold its setup lock (journal/setup.py); one that raced without it meets
        the catalog's unique key, and finding the function there is success."""
        if self._has_function(name):
            return
        try:
            with self.datastore.transaction(commit=True) as curs:
                curs.execute(statement, prepare=False)
        except (ProgrammingError, IntegrityError):  # duplicate_function, unique_violation
            if not self._has_function(name):
                raise

    def _has_function(self, name: str) -> bool:
        with self.datastore.transaction(commit=False) as curs:
            curs.execute(FUNCTION_EXISTS, (self.datastore.schema, name))
            found = curs.fetchone()
        return bool(found and found["found"])

    @retry((InterfaceError, OperationalError), max_attempts=3, wait=0.2)
    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        """One statement, autocommitted, is the append's whole transaction: the function
        (journal/append_sql.py) checks, locks the events table, notifies, inserts with
        the leaves and the tracked position, and writes the due-work and retention rows.

        The events-table lock is held for server time only: the server has the whole call
        before it starts, and commits before it answers (decisions F30, F120). An error
        anywhere rolls the whole call back: nothing half-done is ever committed. A retry
        after a lost acknowledgement meets the primary key, and the store reconciles it.
        """
        if not stored_events:
            return []
        triples = [(str(s.originator_id), s.topic, s.state) for s in stored_events]
        rows = work_index.changes(triples)
        waking = sorted({s.topic for s in stored_events} & work_index.WAKING_TOPICS)
        if waking:  # the topics, the operation types accepted (if they fit), the mark
            wake = ",".join([*waking, *work_index.accepted_type_names(rows), self.announcer])
        else:
            wake = None
        arguments = (
            [stream for stream, _, _ in triples],
            [s.originator_version for s in stored_events],
            [topic for _, topic, _ in triples],
            [state for _, _, state in triples],
            *append_sql.checks(predecessors(stored_events), new_streams(stored_events)),
            wake,
            self._lock_wait,
            append_sql.work_rows(rows),
            append_sql.retention_rows(retention_index.changes(triples)),
        )
        try:
            with self.datastore.get_connection() as conn, conn.cursor() as curs:
                curs.execute(self._append, arguments, prepare=True)
                row = curs.fetchone()
        except IntegrityError as error:
            if getattr(error.__cause__, "sqlstate", None) == append_sql.GAP_OR_RESTART:
                raise IntegrityError(append_sql.GAP_MESSAGE) from None
            raise
        positions: list[int] | None = row["positions"] if row else None
        if positions is None or len(positions) != len(stored_events):
            raise IntegrityError("the journal did not return a position for every event")
        return positions

    def delete_stream_events(self, stream: str, upto_version: int) -> int:
        statement = self._sql(
            "DELETE FROM {schema}.{table} WHERE originator_id = %s AND originator_version <= %s"
        )
        with self.datastore.transaction(commit=True) as curs:
            curs.execute(statement, (stream, upto_version))
            deleted = int(curs.rowcount)
            self.snapshots.delete(curs, stream)  # no copy of a purged history outlives it
            return deleted

    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)  # as eventsourcing's
    def select_after(self, after: int, limit: int) -> list[StoredRow]:
        with self.datastore.get_connection() as conn, conn.cursor(row_factory=tuple_row) as curs:
            curs.execute(self._select_after, (after, limit), prepare=True)
            return stored_rows(curs.fetchall())

    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def select_after_within(self, after: int, limit: int, max_bytes: int) -> list[StoredRow]:
        with self.datastore.get_connection() as conn, conn.cursor(row_factory=tuple_row) as curs:
            curs.execute(self._select_after_within, (after, limit, max_bytes), prepare=True)
            return stored_rows(curs.fetchall())

    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def select_before_start(self, limit: int) -> list[StoredRow]:
        with self.datastore.get_connection() as conn, conn.cursor(row_factory=tuple_row) as curs:
            curs.execute(self._select_before_start, (limit,))
            return stored_rows(curs.fetchall())

    def select_leaves(self, after: int, limit: int) -> list[tuple[int, bytes]]:
        with self.datastore.get_connection() as conn, conn.cursor(row_factory=tuple_row) as curs:
            curs.execute(self._select_leaves, (after, limit), prepare=True)
            leaves: list[tuple[int, bytes]] = curs.fetchall()
            return leaves

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
        """One call of ``blackops_reserve_v1`` (journal/lease_sql.py)."""
        rows = self._reserve(self._reserve_ids, now, hold_until, worker, types, limit)
        return list(rows[0]["reserved"] or []) if rows else []

    def reserve_and_select(
        self, now: int, hold_until: int, worker: str, types: Sequence[str], limit: int
    ) -> list[Notification]:
        """Reserve due rows and read their streams (``blackops_reserve_streams_v1``)."""
        rows = self._reserve(self._reserve_streams, now, hold_until, worker, types, limit)
        return [notification(row, "notification_id") for row in rows]

    def reserve_and_select_tails(
        self, now: int, hold_until: int, worker: str, types: Sequence[str], limit: int
    ) -> dict[str, Tail]:
        """Reserve due rows and read their streams from their snapshots on
        (``blackops_reserve_tails_v2``)."""
        return tails(self._reserve(self._reserve_tails, now, hold_until, worker, types, limit))

    def _reserve(
        self, call: str, now: int, hold_until: int, worker: str, types: Sequence[str], limit: int
    ) -> list[Any]:
        """One call of a reservation function (journal/lease_sql.py), autocommitted, whose
        commit does not wait for the WAL flush (a reservation is a hint; decisions F9,
        F161): the rows it answers."""
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(call, (hold_until, worker, now, list(types), limit), prepare=True)
            return list(curs.fetchall())

    def write_snapshot(self, stream: str, version: int, digest: str, body: bytes) -> None:
        """A cache row, committed without waiting for the WAL flush: BEGIN, the setting,
        the write and COMMIT pipelined, one round trip instead of four (an error skips
        the rest, COMMIT included, and the block is rolled back)."""
        with (
            self.datastore.get_connection() as conn,
            conn.pipeline() as pipeline,
            conn.cursor() as curs,
        ):
            curs.execute(self._begin)
            curs.execute(self._hint_commit, prepare=True)
            curs.execute(
                self.snapshots.write_statement, (digest, body, stream, version), prepare=True
            )
            curs.execute(self._commit)
            pipeline.sync()

    def renew_leases(
        self, leases: Sequence[tuple[str, int]], worker: str, now: int, until: int
    ) -> list[str]:
        """``WorkTables.renew`` in one call of a function (journal/lease_sql.py): one
        round trip, not BEGIN, one UPDATE per lease and COMMIT, each its own."""
        if not leases:
            return []
        ids, tokens = [i for i, _ in leases], [t for _, t in leases]
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(self._renew_leases, (ids, tokens, worker, now, until), prepare=True)
            return [str(row["renewed"]) for row in curs.fetchall()]

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


def lend_checked(pool: ConnectionPool[Any]) -> None:
    """Have ``pool`` lend only connections that pass `check_lent_connection`, trying the
    next one at once when one fails (it is discarded and replaced in the background).

    The pool's own check loop sleeps after each failed check (1 s, then 2, 4...), to spare
    a server that refuses connections: after a burst of terminated backends its idle
    connections were all dead, each one lent cost the next sleep, and every submit (the
    commit queue's leader, the event loop's own reads) stalled 3-5 s, or waited out the
    5 s timeout, with the database up (found by a fault hunt, stop 37). A dead idle
    connection says nothing of the server: only a failure to connect does, and the pool's
    reconnection backoff still governs that. ``timeout`` bounds the whole loop."""
    if getattr(pool, "_lends_checked", False):
        return  # another recorder of the same datastore did it
    pool._check = None  # the pool's loop, without its check, lends what it has
    pool._lends_checked = True  # type: ignore[attr-defined]
    unchecked = pool.getconn

    def getconn(timeout: float | None = None) -> Any:
        wait = pool.timeout if timeout is None else timeout
        deadline = time.monotonic() + wait
        timed_out = f"couldn't get a connection after {wait:.2f} sec"  # the pool's words
        failed, pause = 0, _DYING_PAUSE
        while True:
            try:
                conn = unchecked(max(deadline - time.monotonic(), 0.0))
            except PoolTimeout:
                raise PoolTimeout(timed_out) from None
            try:
                check_lent_connection(conn)
            except Exception:
                pool.putconn(conn)  # broken: closed by the pool, which adds a new one
                failed += 1
                left = deadline - time.monotonic()
                if left <= 0:
                    raise PoolTimeout(timed_out) from None
                if failed > pool.max_size:
                    # More dead ones than the pool holds: new connections die too (a proxy
                    # before a broken server). Pause, as the pool's loop did, or the pool
                    # reconnects as fast as it can (found by review, stop 37).
                    time.sleep(min(pause, left))
                    pause *= 2
                continue
            except BaseException:
                pool.putconn(conn)  # interrupted: the connection goes back, unlent
                raise
            return conn

    pool.getconn = getconn  # type: ignore[method-assign]


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
    # poll, not select: select refuses a descriptor of 1024 or more, and a process with that
    # many open (a server with many live streams) had every healthy connection refused
    # (found by review, stop 37).
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN)
    if poller.poll(0):
        ConnectionPool.check_connection(conn)


def listen_for_wakes(
    settings: dict[str, str],
    channel: str,
    on_wake: Callable[[frozenset[str] | None], None],
    stopped: threading.Event,
    announcer: str | None = None,
) -> None:
    """LISTEN on a schema's work channel until ``stopped``; every append that may make
    work due NOTIFYs it (in its own transaction) with the waking topics it committed, the
    operation types it accepted (``=type``, when they fit) and its recorder's
    ``announcer`` mark, and ``on_wake`` receives the topics and ``=type`` names of every
    announcement but those marked ``announcer`` (the listening store's own appends, which
    woke its process already). Reconnects after failures with a backoff and calls
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
                        names = notify.payload.split(",") if notify.payload else []
                        if announcer in names:
                            continue  # the listening store's own append: it woke its process
                        topics = frozenset(n for n in names if not n.startswith(ANNOUNCER_MARK))
                        on_wake(topics or None)
        except psycopg.Error as error:
            log.info("LISTEN connection lost (%s); retrying", error)
            stopped.wait(backoff)
            backoff = min(backoff * 2, 5.0)
