"""The due-work index as SQL tables, shared by the SQLite and PostgreSQL recorders.

Statements are written once with ``%s`` placeholders; SQLite gets ``?``. Table names
are our own literals (qualified by the schema on PostgreSQL), never user text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from journal.work_index import NAME, RowChange, WorkRow

#: Types read in one SQLite statement (a compound SELECT has at most 500 terms there).
_RANGES = 200


class Cursor(Protocol):
    def execute(self, query: Any, params: Any = ..., /) -> Any: ...

    def executemany(self, query: Any, params_seq: Any, /) -> Any: ...

    def fetchall(self) -> Any: ...


class WorkTables:
    """Statements for one store: ``prefix`` is ``""`` (SQLite) or ``"schema."``."""

    def __init__(self, prefix: str, *, sqlite: bool, events_table: str = "stored_events") -> None:
        self.sqlite = sqlite
        self.due = f"{prefix}blackops_due_work"
        self.positions = f"{prefix}blackops_projection_positions"
        self.create = [
            f"CREATE TABLE IF NOT EXISTS {self.due} ("
            "operation_id TEXT PRIMARY KEY, operation_type TEXT NOT NULL, "
            "tenant TEXT NOT NULL, due_at BIGINT NOT NULL, fencing_token BIGINT NOT NULL, "
            "worker TEXT)",
            f"CREATE INDEX IF NOT EXISTS blackops_due_work_due_at ON {self.due} (due_at)",
            "CREATE INDEX IF NOT EXISTS blackops_due_work_type "
            f"ON {self.due} (operation_type, due_at)",
            f"CREATE TABLE IF NOT EXISTS {self.positions} ("
            "name TEXT PRIMARY KEY, position BIGINT NOT NULL)",
        ]
        self._insert = self._q(
            f"INSERT INTO {self.due} (operation_id, operation_type, tenant, due_at, "
            "fencing_token, worker) VALUES (%s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (operation_id) DO UPDATE SET due_at = excluded.due_at, "
            "fencing_token = excluded.fencing_token, worker = excluded.worker"
        )
        self._update = self._q(
            f"UPDATE {self.due} SET due_at = %s, "
            "fencing_token = COALESCE(%s, fencing_token), "
            "worker = CASE WHEN %s THEN %s ELSE worker END WHERE operation_id = %s"
        )
        self._delete = self._q(f"DELETE FROM {self.due} WHERE operation_id = %s")
        self._position = self._q(
            f"INSERT INTO {self.positions} (name, position) VALUES (%s, %s) "
            "ON CONFLICT (name) DO UPDATE SET position = excluded.position"
        )
        #: PostgreSQL: the streams of the rows ``blackops_reserve_v1`` held (``reserved``),
        #: the body of ``blackops_reserve_streams_v1`` (journal/lease_sql.py).
        self.reserved_streams_statement = (
            "SELECT e.notification_id, e.originator_id, e.originator_version, e.topic, e.state "
            "FROM unnest(reserved) AS r(operation_id) CROSS JOIN LATERAL (SELECT "
            "x.notification_id, x.originator_id, x.originator_version, x.topic, x.state "
            f"FROM {events_table} AS x WHERE x.originator_id = r.operation_id "
            # Ordered, so the server keeps it a per-stream key range: flattened into a
            # join, it was seen hashing the whole events table (decisions F161).
            "ORDER BY x.originator_version) AS e "
            "ORDER BY e.originator_id, e.originator_version"
        )

    def _q(self, text: str) -> str:
        return text.replace("%s", "?") if self.sqlite else text

    def _in(self, values: Sequence[Any]) -> tuple[str, list[Any]]:
        """``col IN (...)`` for SQLite, ``col = ANY(%s)`` for PostgreSQL."""
        if self.sqlite:
            return "IN (" + ",".join("?" * len(values)) + ")", list(values)
        return "= ANY(%s)", [list(values)]

    # -- keeping it current (inside the append transaction) --------------------------------

    def apply(self, cursor: Cursor, changes: Sequence[RowChange], position: int | None) -> None:
        """Apply one append's net changes and move the tracked position to ``position``
        (``None``: the caller's own statement moves it, as the PostgreSQL append's insert
        does in the same transaction)."""
        deletes = [(c.operation_id,) for c in changes if c.delete]
        inserts = [
            (c.operation_id, *c.create, c.due_at, c.fencing_token, c.worker)
            for c in changes
            if c.create is not None
        ]
        updates = [
            (c.due_at, c.fencing_token, c.set_worker, c.worker, c.operation_id)
            for c in changes
            if c.create is None and not c.delete
        ]
        for statement, rows in ((self._delete, deletes), (self._insert, inserts)):
            if rows:
                cursor.executemany(statement, rows)
        if updates:
            cursor.executemany(self._update, updates)
        if position is not None:
            cursor.execute(self._position, (NAME, position))

    def clear(self, cursor: Cursor) -> None:
        cursor.execute(f"DELETE FROM {self.due}")
        cursor.execute(self._q(f"DELETE FROM {self.positions} WHERE name = %s"), (NAME,))

    # -- workers' queries (outside the journal's transactions) ------------------------------

    def reserve(
        self, cursor: Cursor, now: int, hold_until: int, worker: str, types: Sequence[str], n: int
    ) -> list[str]:
        """SQLite: take up to ``n`` due rows of ``types`` for ``worker`` until
        ``hold_until`` (PostgreSQL: ``blackops_reserve_v1``, journal/lease_sql.py).

        Not a claim: only a hint that keeps other workers off these rows while this one
        appends its claims. The journal's version check stays the arbiter.
        """
        types = list(dict.fromkeys(types))  # a type named twice would be taken twice
        if not types or n <= 0:
            return []
        # SQLite has no LATERAL: each type's earliest ``n``, one index range each, joined,
        # in the one statement that takes them. A compound SELECT has at most 500 terms
        # there: a longer list of types is read as before, by the list.
        earliest = (
            f"SELECT * FROM (SELECT operation_id, due_at FROM {self.due} "
            "WHERE operation_type = ? AND due_at <= ? ORDER BY due_at LIMIT ?)"
        )
        if len(types) <= _RANGES:
            chosen = f"({' UNION ALL '.join([earliest] * len(types))})"
            args = [v for kind in types for v in (kind, now, n)]
        else:
            chosen = (
                f"{self.due} WHERE due_at <= ? AND operation_type IN ({','.join('?' * len(types))})"
            )
            args = [now, *types]
        cursor.execute(
            f"UPDATE {self.due} SET due_at = ?, worker = ? WHERE operation_id IN ("
            f"SELECT operation_id FROM {chosen} ORDER BY due_at LIMIT ?) RETURNING operation_id",
            (hold_until, worker, *args, n),
        )
        return [_first(row) for row in cursor.fetchall()]

    def renew(
        self, cursor: Cursor, leases: Sequence[tuple[str, int]], worker: str, now: int, until: int
    ) -> list[str]:
        """Extend the leases this worker still holds; the ids not returned are lost."""
        renewed: list[str] = []
        statement = self._q(
            f"UPDATE {self.due} SET due_at = %s WHERE operation_id = %s AND "
            "fencing_token = %s AND worker = %s AND due_at > %s RETURNING operation_id"
        )
        for operation_id, token in leases:
            cursor.execute(statement, (until, operation_id, token, worker, now))
            renewed.extend(_first(row) for row in cursor.fetchall())
        return renewed

    def held(self, cursor: Cursor, leases: Sequence[tuple[str, int]], worker: str) -> list[str]:
        """Which of ``(id, token)`` rows still name this worker and token (a read only:
        a worker asks it often to learn at once that an owner was fenced)."""
        where, args = self._in([operation_id for operation_id, _ in leases])
        cursor.execute(
            self._q(
                f"SELECT operation_id, fencing_token FROM {self.due} "
                f"WHERE operation_id {where} AND worker = %s"
            ),
            (*args, worker),
        )
        tokens = dict(leases)
        return [
            str(values[0])
            for values in map(_values, cursor.fetchall())
            if tokens.get(str(values[0])) == int(values[1])
        ]

    def next_due(self, cursor: Cursor, types: Sequence[str]) -> int | None:
        where, args = self._in(types)
        cursor.execute(
            self._q(f"SELECT min(due_at) FROM {self.due} WHERE operation_type {where}"), args
        )
        rows = cursor.fetchall()
        value = _first(rows[0]) if rows else None
        return int(value) if value is not None else None

    def rows(self, cursor: Cursor) -> list[WorkRow]:
        cursor.execute(
            f"SELECT operation_id, operation_type, tenant, due_at, fencing_token, worker "
            f"FROM {self.due} ORDER BY operation_id"
        )
        return [WorkRow(*_values(row)) for row in cursor.fetchall()]

    def rows_of(self, cursor: Cursor, row_type: str, due_by: int | None) -> list[WorkRow]:
        """The rows of one type (an index range), those due by ``due_by`` if given."""
        due = "" if due_by is None else " AND due_at <= %s"
        cursor.execute(
            self._q(
                "SELECT operation_id, operation_type, tenant, due_at, fencing_token, worker "
                f"FROM {self.due} WHERE operation_type = %s{due} ORDER BY operation_id"
            ),
            (row_type,) if due_by is None else (row_type, due_by),
        )
        return [WorkRow(*_values(row)) for row in cursor.fetchall()]

    def due_rows(self, cursor: Cursor, prefix: str, due_by: int) -> list[WorkRow]:
        """The rows due by ``due_by`` whose type starts with ``prefix`` (the due range of
        the ``due_at`` index; ``prefix`` is our own literal, never user text)."""
        cursor.execute(
            self._q(
                "SELECT operation_id, operation_type, tenant, due_at, fencing_token, worker "
                f"FROM {self.due} WHERE due_at <= %s AND operation_type LIKE %s "
                "ORDER BY operation_id"
            ),
            (due_by, prefix + "%"),
        )
        return [WorkRow(*_values(row)) for row in cursor.fetchall()]

    def due_summary(self, cursor: Cursor, due_by: int) -> dict[str, tuple[int, int]]:
        """How many rows are due by ``due_by`` and the earliest ``due_at``, for operations
        and for workflow instances (rows of type ``workflow:<uid>``)."""
        cursor.execute(
            self._q(
                "SELECT CASE WHEN operation_type LIKE %s THEN 'workflow' "
                "ELSE 'operation' END AS kind, count(*), min(due_at) "
                f"FROM {self.due} WHERE due_at <= %s GROUP BY kind"
            ),
            ("workflow:%", due_by),
        )
        return {
            str(kind): (int(count), int(earliest))
            for kind, count, earliest in map(_values, cursor.fetchall())
        }

    def position(self, cursor: Cursor) -> int:
        cursor.execute(self._q(f"SELECT position FROM {self.positions} WHERE name = %s"), (NAME,))
        rows = cursor.fetchall()
        return int(_first(rows[0])) if rows else 0


def _values(row: Any) -> tuple[Any, ...]:
    """Rows come as tuples, sqlite3.Row or psycopg dict rows."""
    if isinstance(row, dict):
        return tuple(row.values())
    return tuple(row)


def due_candidates(due: str) -> str:
    """PostgreSQL: the ids of the ``need`` earliest due rows of ``wanted_types`` outside
    ``seen``, locked or not (in terms of the variables of the reservation functions,
    journal/lease_sql.py, which then lock what they can of them).

    Each type is read through its own ``(operation_type, due_at)`` index range, in
    ``due_at`` order, and stops after ``need`` rows: however many rows are due, a
    reservation reads a few dozen index entries (decisions F161). The earliest ``need``
    of all types are among each type's earliest ``need``, so the answer is the one a
    single ``ORDER BY due_at LIMIT need`` over every type gives; but planned that way, with
    the statistics of a table that grew faster than autovacuum looked at it, the server
    gathered and sorted every due row of the types, at every reservation.
    """
    return (
        "SELECT c.operation_id FROM (SELECT DISTINCT unnest(wanted_types::text[])) AS t(kind) "
        f"CROSS JOIN LATERAL (SELECT d.operation_id, d.due_at FROM {due} AS d "
        "WHERE d.operation_type = t.kind AND d.due_at <= due_by "
        "AND NOT (d.operation_id = ANY(seen)) ORDER BY d.due_at LIMIT need) AS c "
        "ORDER BY c.due_at LIMIT need"
    )


def _first(row: Any) -> Any:
    return _values(row)[0]
