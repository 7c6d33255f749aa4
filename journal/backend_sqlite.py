"""SQLite recorder: eventsourcing's, plus stream reads, a gap check and the due-work index."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eventsourcing.persistence import IntegrityError, Notification, StoredEvent
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteCursor

from journal import retention_index, topic_sql, work_index
from journal.backend_common import (
    StoredRow,
    new_streams,
    notification,
    predecessors,
    stored_rows,
)
from journal.leaves import event_leaf
from journal.marks import MarkRecorder, MarkTables
from journal.retention_index import Rebuild
from journal.retention_sql import RetentionRecorder, RetentionTables
from journal.snapshot_sql import SnapshotRecorder, SnapshotTables
from journal.work_sql import WorkTables

#: A state's size in bytes, read from its record's header for a BLOB (what the journal
#: writes); a TEXT value (written behind its back) is cast, as the page reads it, since
#: length() counts its characters up to the first NUL (found by review, stop 40).
_STATE_BYTES = (
    "CASE typeof(state) WHEN 'text' THEN length(CAST(state AS BLOB)) ELSE length(state) END"
)


class BlackOpsSQLiteRecorder(
    RetentionRecorder, SnapshotRecorder, MarkRecorder, SQLiteApplicationRecorder
):
    """Positions are SQLite ``rowid`` values, as eventsourcing's notification ids."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.work = WorkTables("", sqlite=True)
        self.retention = RetentionTables("", sqlite=True)
        self.snapshots = self._snapshot_tables()
        self.marks = MarkTables("", sqlite=True)
        # SQLite does not enforce a column's type: a value written behind the journal's back
        # is read as bytes (verify then names it modified), never as an int or text.
        self._select_after = (
            f"SELECT rowid, originator_id, originator_version, topic, CAST(state AS BLOB) "
            f"FROM {self.events_table_name} WHERE rowid > ? ORDER BY rowid LIMIT ?"
        )
        # A page cut after the row whose states reach a byte budget (see PostgreSQL's): the
        # cut is found from the states' lengths alone (SQLite reads a bare column's length
        # from its record's header; any expression around length() reads the value whole),
        # then only the rows up to it are read. Summing the cast states read every row of
        # the page whole, kept or not: 13-25x slower catch-ups over large events (found by
        # review, stop 40). A NULL state (changed behind the journal's back) counts 0; a
        # TEXT one (likewise) is measured in bytes, as the page reads it (`_STATE_BYTES`).
        self._select_after_within = (
            f"SELECT rowid, originator_id, originator_version, topic, CAST(state AS BLOB) "
            f"FROM {self.events_table_name} WHERE rowid > ? AND rowid <= ("
            f"SELECT max(rowid) FROM (SELECT rowid, sum({_STATE_BYTES}) OVER (ORDER BY rowid "
            f"ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before_it "
            f"FROM {self.events_table_name} WHERE rowid > ? ORDER BY rowid LIMIT ?"
            f") WHERE coalesce(before_it, 0) < ?) ORDER BY rowid"
        )
        self._select_before_start = (
            f"SELECT rowid, originator_id, originator_version, topic, CAST(state AS BLOB) "
            f"FROM {self.events_table_name} WHERE rowid < 1 ORDER BY rowid LIMIT ?"
        )

    def _snapshot_tables(self) -> SnapshotTables:
        return SnapshotTables(
            "", sqlite=True, events_table=self.events_table_name, position="rowid"
        )

    def construct_create_table_statements(self) -> list[str]:
        # Called by the base __init__, before self.work exists.
        return [
            *super().construct_create_table_statements(),
            *WorkTables("", sqlite=True).create,
            *RetentionTables("", sqlite=True).create,
            *self._snapshot_tables().create,
            topic_sql.create_index(self.events_table_name, sqlite=True),
            "CREATE TABLE IF NOT EXISTS blackops_leaves "
            "(position INTEGER PRIMARY KEY, leaf BLOB NOT NULL)",
        ]

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
        for stream, written in new_streams(stored_events).items():
            c.execute(
                f"SELECT count(*) FROM {self.events_table_name} WHERE originator_id = ?",
                (stream,),
            )
            if int(c.fetchone()[0]) != written:  # a purged history's tombstone is there
                raise IntegrityError(f"stream {stream!r} has a history: it cannot start again")
        if positions:
            triples = [(str(s.originator_id), s.topic, s.state) for s in stored_events]
            self.work.apply(c, work_index.changes(triples), max(positions))
            self.retention.apply(c, retention_index.changes(triples))
            c.executemany(
                "INSERT INTO blackops_leaves (position, leaf) VALUES (?, ?)",
                [
                    (p, event_leaf(p, str(s.originator_id), s.originator_version, s.topic, s.state))
                    for p, s in zip(positions, stored_events, strict=True)
                ],
            )
        return positions

    def delete_stream_events(self, stream: str, upto_version: int) -> int:
        """Refuses to delete the journal's newest row: SQLite would give its rowid (a
        position) to the next append, and a follower already past it would skip that."""
        with self.datastore.transaction(commit=True) as c:
            c.execute(
                f"SELECT originator_id, originator_version FROM {self.events_table_name} "
                "ORDER BY rowid DESC LIMIT 1"
            )
            newest = c.fetchone()
            if newest is not None and newest[0] == stream and newest[1] <= upto_version:
                raise IntegrityError("the journal's newest event cannot be deleted")
            c.execute(
                f"DELETE FROM {self.events_table_name} "
                "WHERE originator_id = ? AND originator_version <= ?",
                (stream, upto_version),
            )
            c.execute("SELECT changes()")
            deleted = int(c.fetchone()[0])
            self.snapshots.delete(c, stream)  # no copy of a purged history outlives it
            return deleted

    def select_after(self, after: int, limit: int) -> list[StoredRow]:
        with self.datastore.transaction(commit=False) as c:
            cursor = c.sqlite_cursor
            cursor.row_factory = None  # plain tuples: sqlite3.Row costs more than the read
            cursor.execute(self._select_after, (after, limit))
            return stored_rows(cursor.fetchall())

    def select_after_within(self, after: int, limit: int, max_bytes: int) -> list[StoredRow]:
        with self.datastore.transaction(commit=False) as c:
            cursor = c.sqlite_cursor
            cursor.row_factory = None
            cursor.execute(self._select_after_within, (after, after, limit, max_bytes))
            return stored_rows(cursor.fetchall())

    def select_before_start(self, limit: int) -> list[StoredRow]:
        with self.datastore.transaction(commit=False) as c:
            cursor = c.sqlite_cursor
            cursor.row_factory = None
            cursor.execute(self._select_before_start, (limit,))
            return stored_rows(cursor.fetchall())

    def select_leaves(self, after: int, limit: int) -> list[tuple[int, bytes]]:
        with self.datastore.transaction(commit=False) as c:
            cursor = c.sqlite_cursor
            cursor.row_factory = None  # (position, leaf): an INTEGER PRIMARY KEY and bytes
            cursor.execute(
                "SELECT position, CAST(leaf AS BLOB) FROM blackops_leaves WHERE position > ? "
                "ORDER BY position LIMIT ?",
                (after, limit),
            )
            leaves: list[tuple[int, bytes]] = cursor.fetchall()
            return leaves

    def select_stream(self, stream: str, after_version: int = 0) -> list[Notification]:
        return self.select_streams([stream], after_version)

    def select_streams(self, streams: Sequence[str], after_version: int = 0) -> list[Notification]:
        marks = ",".join("?" * len(streams))
        statement = (
            f"SELECT rowid, originator_id, originator_version, topic, state "
            f"FROM {self.events_table_name} WHERE originator_id IN ({marks}) "
            "AND originator_version > ? ORDER BY originator_id, originator_version"
        )
        with self.datastore.transaction(commit=False) as cursor:
            cursor.execute(statement, (*streams, after_version))
            return [notification(row, "rowid") for row in cursor.fetchall()]

    def select_topics(self, topics: Sequence[str], after: int, limit: int) -> list[Notification]:
        statement = topic_sql.select_topics(self.events_table_name, len(topics), sqlite=True)
        with self.datastore.transaction(commit=False) as cursor:
            cursor.execute(statement, topic_sql.parameters(list(topics), after, limit))
            return [notification(row, "position") for row in cursor.fetchall()]

    # -- due-work index --------------------------------------------------------------------

    def reserve_due(
        self, now: int, hold_until: int, worker: str, types: Sequence[str], limit: int
    ) -> list[str]:
        """Committed without waiting for the disk (decisions F51): a reservation only keeps
        other workers off the rows for a turn, the journal never depends on it. The WAL
        is synced by the next journal commit, and a crash can lose only its unsynced end:
        a lost reservation makes its rows due again, as if its hold had run out."""
        with self.datastore.get_connection(commit=True) as connection:
            pragma = connection.cursor()
            pragma.execute("PRAGMA synchronous")
            level = int(pragma.fetchone()[0])
            pragma.execute("PRAGMA synchronous = NORMAL")  # not allowed inside a transaction
            try:
                with connection.transaction(commit=True) as c:
                    return self.work.reserve(c, now, hold_until, worker, types, limit)
            finally:
                pragma.execute(f"PRAGMA synchronous = {level}")

    def renew_leases(
        self, leases: Sequence[tuple[str, int]], worker: str, now: int, until: int
    ) -> list[str]:
        with self.datastore.transaction(commit=True) as c:
            return self.work.renew(c, leases, worker, now, until)

    def held_leases(self, leases: Sequence[tuple[str, int]], worker: str) -> list[str]:
        with self.datastore.transaction(commit=False) as c:
            return self.work.held(c, leases, worker)

    def next_due(self, types: Sequence[str]) -> int | None:
        with self.datastore.transaction(commit=False) as c:
            return self.work.next_due(c, types)

    def work_rows(self) -> list[work_index.WorkRow]:
        with self.datastore.transaction(commit=False) as c:
            return self.work.rows(c)

    def work_rows_of(self, row_type: str, due_by: int | None = None) -> list[work_index.WorkRow]:
        with self.datastore.transaction(commit=False) as c:
            return self.work.rows_of(c, row_type, due_by)

    def due_work_rows(self, prefix: str, due_by: int) -> list[work_index.WorkRow]:
        with self.datastore.transaction(commit=False) as c:
            return self.work.due_rows(c, prefix, due_by)

    def due_work_summary(self, due_by: int) -> dict[str, tuple[int, int]]:
        with self.datastore.transaction(commit=False) as c:
            return self.work.due_summary(c, due_by)

    def work_position(self) -> int:
        with self.datastore.transaction(commit=False) as c:
            return self.work.position(c)

    def rebuild_work(self, page: int = 5000) -> int:
        """Drop the index and fold the whole journal again, in one write transaction."""
        with self.datastore.transaction(commit=True) as c:
            self.work.clear(c)
            position = 0
            while True:
                c.execute(
                    f"SELECT rowid, originator_id, topic, state FROM {self.events_table_name} "
                    "WHERE rowid > ? ORDER BY rowid LIMIT ?",
                    (position, page),
                )
                found = c.fetchall()
                if not found:
                    break
                position = found[-1][0]
                triples = [(str(r[1]), str(r[2]), bytes(r[3])) for r in found]
                self.work.apply(c, work_index.changes(triples), position)
            return position

    def ensure_retention(self) -> None:
        """An existing journal opened for the first time by this version: build it."""
        with self.datastore.transaction(commit=False) as c:
            built = self.retention.built(c)
        if not built:
            self.rebuild_retention()

    def rebuild_retention(self, page: int = 5000) -> int:
        """Fold the whole journal into the retention index, in one write transaction."""
        with self.datastore.transaction(commit=True) as c:
            fold, position = Rebuild(), 0
            while True:
                c.execute(
                    f"SELECT rowid, originator_id, topic, state FROM {self.events_table_name} "
                    "WHERE rowid > ? ORDER BY rowid LIMIT ?",
                    (position, page),
                )
                found = c.fetchall()
                if not found:
                    break
                position = found[-1][0]
                fold.add((str(r[1]), str(r[2]), bytes(r[3])) for r in found)
            self.retention.write(c, fold.result(), position)
            return position
