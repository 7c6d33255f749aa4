"""Instance snapshots as an SQL table, shared by the SQLite and PostgreSQL recorders.

A snapshot is a cache beside the journal, never part of it: one row per workflow instance
stream holding its folded state at one version, the position of the event at that version
and a digest of the body. Rows are written outside the append's transaction (a lost write
only costs a full fold), bound in SQL to the stored event they were taken at, and read
together with the stream's events from that version on, so the reader can check that the
event the snapshot saw is still the one stored there. Deleting a stream's events deletes
its snapshot in the same transaction (a purge leaves no copy of what it removed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from eventsourcing.persistence import Notification

from journal.work_sql import Cursor, _values


@dataclass(frozen=True, slots=True)
class StoredSnapshot:
    """A snapshot row as read, not yet verified (``journal/instance_snapshots.py`` does)."""

    version: int
    position: int
    digest: str
    body: bytes


@dataclass(frozen=True, slots=True)
class Tail:
    """A stream's events from its snapshot's version on (or all of them without one)."""

    snapshot: StoredSnapshot | None
    events: list[Notification]


class SnapshotTables:
    """Statements for one store: ``prefix`` is ``""`` (SQLite) or ``"schema."``."""

    def __init__(self, prefix: str, *, sqlite: bool, events_table: str, position: str) -> None:
        self.sqlite = sqlite
        self.table = table = f"{prefix}blackops_instance_snapshots"
        blob = "BLOB" if sqlite else "BYTEA"
        self.create = [
            f"CREATE TABLE IF NOT EXISTS {table} (stream TEXT PRIMARY KEY, "
            "version BIGINT NOT NULL, position BIGINT NOT NULL, digest TEXT NOT NULL, "
            f"body {blob} NOT NULL)"
        ]
        # Bound to the stored event: nothing is written if (stream, version) is not there.
        # A newer snapshot is never replaced by an older one (two workers may race).
        self.write_statement = self._q(
            f"INSERT INTO {table} (stream, version, position, digest, body) "
            f"SELECT originator_id, originator_version, {position}, %s, %s FROM {events_table} "
            "WHERE originator_id = %s AND originator_version = %s "
            # PostgreSQL: wait for a purge deleting that event (READ COMMITTED would still see
            # it and write a snapshot the purge's own DELETE cannot see: a copy outliving it).
            f"{'' if sqlite else 'FOR KEY SHARE '}"
            "ON CONFLICT (stream) DO UPDATE SET version = excluded.version, "
            "position = excluded.position, digest = excluded.digest, body = excluded.body "
            f"WHERE excluded.version > {table}.version"
        )
        self._delete = self._q(f"DELETE FROM {table} WHERE stream = %s")
        #: A reserved stream's events from its snapshot's version on (an index range); the
        #: snapshot rides on the row of the event it was taken at, if that is still there.
        self.tail_columns = (
            f"e.{position} AS position, e.originator_id, e.originator_version, e.topic, "
            "e.state, CASE WHEN e.originator_version = s.version THEN s.position END "
            "AS snapshot_position, CASE WHEN e.originator_version = s.version THEN s.digest "
            "END AS snapshot_digest, CASE WHEN e.originator_version = s.version THEN s.body "
            "END AS snapshot_body"
        )
        self._select_snapshots = f"SELECT stream, version, position, digest, body FROM {table} "
        self._select_events = self._q(
            f"SELECT {position}, originator_id, originator_version, topic, state "
            f"FROM {events_table} WHERE originator_id = %s AND originator_version >= %s "
            "ORDER BY originator_version"
        )
        self._events_table = events_table
        self._position = position

    def _q(self, text: str) -> str:
        return text.replace("%s", "?") if self.sqlite else text

    def write(self, cursor: Cursor, stream: str, version: int, digest: str, body: bytes) -> None:
        if not self.sqlite:  # a cache: its commit need not wait for the WAL flush
            cursor.execute("SET LOCAL synchronous_commit = off")
        cursor.execute(self.write_statement, (digest, body, stream, version))

    def delete(self, cursor: Cursor, stream: str) -> None:
        cursor.execute(self._delete, (stream,))

    def select_tails(self, cursor: Cursor, streams: Sequence[str]) -> dict[str, Tail]:
        """Each stream's tail, read inside the caller's (read) transaction."""
        if self.sqlite:
            where = "WHERE stream IN (" + ",".join("?" * len(streams)) + ")"
            args: list[Any] = list(streams)
        else:
            where, args = "WHERE stream = ANY(%s)", [list(streams)]
        cursor.execute(self._select_snapshots + where, args)
        snapshots = {
            str(values[0]): StoredSnapshot(
                int(values[1]), int(values[2]), str(values[3]), bytes(values[4])
            )
            for values in map(_values, cursor.fetchall())
        }
        found: dict[str, Tail] = {}
        for stream in dict.fromkeys(streams):
            snapshot = snapshots.get(stream)
            events = self._events(cursor, stream, snapshot.version if snapshot else 0)
            if snapshot is not None and not _bound(snapshot, events):
                snapshot, events = None, self._events(cursor, stream, 0)  # read it all
            if events:
                found[stream] = Tail(snapshot, events)
        return found

    def _events(self, cursor: Cursor, stream: str, since: int) -> list[Notification]:
        cursor.execute(self._select_events, (stream, since))
        return [_notification(_values(row)) for row in cursor.fetchall()]

    def reserved_tails_statement(self) -> str:
        """PostgreSQL: the tails of the rows ``blackops_reserve_v1`` held (``reserved``),
        the body of ``blackops_reserve_tails_v2`` (journal/lease_sql.py). Each stream's
        events are read by its own key range (a lateral subquery, ordered so that the
        server does not flatten it into a join): joined, the server was seen hashing the
        whole events table at every claim (decisions F161)."""
        return (
            f"SELECT {self.tail_columns} FROM unnest(reserved) AS r(operation_id) "
            f"LEFT JOIN {self.table} s ON s.stream = r.operation_id AND EXISTS (SELECT 1 "
            f"FROM {self._events_table} x WHERE x.originator_id = s.stream "
            f"AND x.originator_version = s.version AND x.{self._position} = s.position) "
            f"CROSS JOIN LATERAL (SELECT y.{self._position}, y.originator_id, "
            "y.originator_version, y.topic, y.state "
            f"FROM {self._events_table} AS y WHERE y.originator_id = r.operation_id "
            "AND y.originator_version >= COALESCE(s.version, 0) "
            "ORDER BY y.originator_version) AS e "
            "ORDER BY e.originator_id, e.originator_version"
        )


def _bound(snapshot: StoredSnapshot, events: Sequence[Notification]) -> bool:
    """Whether the snapshot's event is still stored where it was taken."""
    return (
        bool(events)
        and events[0].originator_version == snapshot.version
        and events[0].id == snapshot.position
    )


def _notification(values: tuple[Any, ...]) -> Notification:
    position, stream, version, topic, state = values[:5]
    return Notification(
        id=int(position),
        originator_id=str(stream),
        originator_version=int(version),
        topic=str(topic),
        state=bytes(state),
    )


def tails(rows: Sequence[Any]) -> dict[str, Tail]:
    """Rows of ``tail_columns`` (tuples, sqlite3.Row or psycopg dict rows) by stream."""
    found: dict[str, Tail] = {}
    for row in rows:
        values = _values(row)
        event = _notification(values)
        tail = found.get(str(event.originator_id))
        if tail is None:
            snapshot = None
            if values[7] is not None:
                snapshot = StoredSnapshot(
                    event.originator_version, int(values[5]), str(values[6]), bytes(values[7])
                )
            tail = found[str(event.originator_id)] = Tail(snapshot, [])
        tail.events.append(event)
    return found


class SnapshotRecorder:
    """Snapshot reads and writes for a SQL recorder with a ``datastore`` (eventsourcing's)
    and ``snapshots`` tables."""

    snapshots: SnapshotTables
    datastore: Any

    def write_snapshot(self, stream: str, version: int, digest: str, body: bytes) -> None:
        with self.datastore.transaction(commit=True) as c:
            self.snapshots.write(c, stream, version, digest, body)

    def select_tails(self, streams: Sequence[str]) -> dict[str, Tail]:
        with self.datastore.transaction(commit=False) as c:
            return self.snapshots.select_tails(c, streams)
