"""The retention index as SQL tables, shared by the SQLite and PostgreSQL recorders.

Instants are kept twice: the RFC 3339 text the journal holds (reports quote it) and
integer microseconds (range scans). Flags are 0/1 integers on both backends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from journal.retention_index import COLUMNS, NAME, RetentionRow
from journal.work_index import micros
from journal.work_sql import Cursor, _first, _values

_SELECT = "operation_id, operation_type, terminal_at, completed_at, held, outcome, purged, pending"


class RetentionTables:
    def __init__(self, prefix: str, *, sqlite: bool) -> None:
        self.sqlite = sqlite
        self.table = table = f"{prefix}blackops_retention"
        self.positions = f"{prefix}blackops_projection_positions"
        self.create = [
            f"CREATE TABLE IF NOT EXISTS {table} ("
            "operation_id TEXT PRIMARY KEY, operation_type TEXT NOT NULL DEFAULT '', "
            "terminal_at TEXT, terminal_us BIGINT, completed_at TEXT, completed_us BIGINT, "
            "held INTEGER NOT NULL DEFAULT 0, outcome INTEGER NOT NULL DEFAULT 0, "
            "purged INTEGER NOT NULL DEFAULT 0, pending INTEGER NOT NULL DEFAULT 0)",
            "CREATE INDEX IF NOT EXISTS blackops_retention_journal ON "
            f"{table} (operation_type, terminal_us) WHERE purged = 0",
            "CREATE INDEX IF NOT EXISTS blackops_retention_outcome ON "
            f"{table} (operation_type, completed_us) WHERE outcome = 1",
            "CREATE INDEX IF NOT EXISTS blackops_retention_pending ON "
            f"{table} (operation_id) WHERE pending = 1",
        ]
        self._insert = self._q(
            f"INSERT INTO {table} (operation_id) VALUES (%s) ON CONFLICT (operation_id) DO NOTHING"
        )
        self._update = self._q(
            f"UPDATE {table} SET operation_type = COALESCE(%s, operation_type), "
            "terminal_at = COALESCE(%s, terminal_at), terminal_us = COALESCE(%s, terminal_us), "
            "completed_at = COALESCE(%s, completed_at), "
            "completed_us = COALESCE(%s, completed_us), held = COALESCE(%s, held), "
            "outcome = COALESCE(%s, outcome), purged = COALESCE(%s, purged), "
            "pending = COALESCE(%s, pending) WHERE operation_id = %s"
        )
        self._position = self._q(
            f"INSERT INTO {self.positions} (name, position) VALUES (%s, %s) "
            "ON CONFLICT (name) DO UPDATE SET position = excluded.position"
        )

    def _q(self, text: str) -> str:
        return text.replace("%s", "?") if self.sqlite else text

    # -- keeping it current (inside the append transaction) --------------------------------

    def apply(self, cursor: Cursor, changes: dict[str, dict[str, Any]]) -> None:
        if not changes:
            return
        cursor.executemany(self._insert, [(key,) for key in changes])
        cursor.executemany(self._update, [(*update_values(c), key) for key, c in changes.items()])

    def write(self, cursor: Cursor, rows: Sequence[RetentionRow], position: int) -> None:
        """A rebuild: the table replaced by ``rows``, built up to ``position``."""
        cursor.execute(f"DELETE FROM {self.table}")
        self.apply(
            cursor, {r.operation_id: dict(zip(COLUMNS, r.values()[1:], strict=True)) for r in rows}
        )
        cursor.execute(self._position, (NAME, position))

    def built(self, cursor: Cursor) -> bool:
        cursor.execute(self._q(f"SELECT position FROM {self.positions} WHERE name = %s"), (NAME,))
        return bool(cursor.fetchall())

    def settle(self, cursor: Cursor, operation_id: str) -> None:
        """After a purge's deletion: a purged operation's row goes, else ``pending`` ends."""
        cursor.execute(
            self._q(f"DELETE FROM {self.table} WHERE operation_id = %s AND purged = 1"),
            (operation_id,),
        )
        cursor.execute(
            self._q(f"UPDATE {self.table} SET pending = 0 WHERE operation_id = %s"), (operation_id,)
        )

    # -- purge's queries -------------------------------------------------------------------

    def types(self, cursor: Cursor) -> list[str]:
        """The distinct operation types, by a loose index scan (one probe per type)."""
        cursor.execute(
            f"WITH RECURSIVE t(v) AS (SELECT min(operation_type) FROM {self.table} "
            f"WHERE purged = 0 UNION ALL SELECT (SELECT min(operation_type) FROM {self.table} "
            "WHERE purged = 0 AND operation_type > t.v) FROM t WHERE t.v IS NOT NULL) "
            "SELECT v FROM t WHERE v IS NOT NULL"
        )
        return [str(_first(r)) for r in cursor.fetchall()]

    def due(
        self,
        cursor: Cursor,
        operation_type: str,
        journal_before: int | None,
        outcome_before: int | None,
    ) -> list[RetentionRow]:
        found: dict[str, RetentionRow] = {}
        if journal_before is not None:
            cursor.execute(
                self._q(
                    f"SELECT {_SELECT} FROM {self.table} WHERE operation_type = %s "
                    "AND purged = 0 AND terminal_us <= %s"
                ),
                (operation_type, journal_before),
            )
            found.update((r.operation_id, r) for r in map(_row, cursor.fetchall()))
        if outcome_before is not None:
            cursor.execute(
                self._q(
                    f"SELECT {_SELECT} FROM {self.table} WHERE operation_type = %s "
                    "AND outcome = 1 AND completed_us <= %s"
                ),
                (operation_type, outcome_before),
            )
            found.update((r.operation_id, r) for r in map(_row, cursor.fetchall()))
        return list(found.values())

    def pending(self, cursor: Cursor) -> list[RetentionRow]:
        cursor.execute(f"SELECT {_SELECT} FROM {self.table} WHERE pending = 1")
        return [_row(r) for r in cursor.fetchall()]

    def rows(self, cursor: Cursor) -> list[RetentionRow]:
        cursor.execute(f"SELECT {_SELECT} FROM {self.table} ORDER BY operation_id")
        return [_row(r) for r in cursor.fetchall()]


_INSTANTS = ("terminal_at", "completed_at")
#: The columns `update_values` gives values for, in its order: each instant is followed by
#: its microseconds (``terminal_us``, ``completed_us``).
UPDATE_COLUMNS = tuple(
    column
    for name in COLUMNS
    for column in ((name, name.removesuffix("_at") + "_us") if name in _INSTANTS else (name,))
)


def update_values(change: dict[str, Any]) -> tuple[Any, ...]:
    """The UPDATE's parameters but the id: each column's new value, None where unchanged
    (``terminal_us`` and ``completed_us`` follow their instants)."""
    values: list[Any] = []
    for name in COLUMNS:
        value = change.get(name)
        if isinstance(value, bool):
            value = int(value)
        values.append(value)
        if name in _INSTANTS:
            values.append(None if value is None else micros(str(value)))
    return tuple(values)


def _row(row: Any) -> RetentionRow:
    v = _values(row)
    return RetentionRow(
        str(v[0]), str(v[1]), v[2], v[3], bool(v[4]), bool(v[5]), bool(v[6]), bool(v[7])
    )


class RetentionRecorder:
    """The retention index's reads and writes outside appends, for a SQL recorder with a
    ``datastore`` (eventsourcing's) and ``retention`` tables."""

    retention: RetentionTables
    datastore: Any

    def retention_types(self) -> list[str]:
        with self.datastore.transaction(commit=False) as c:
            return self.retention.types(c)

    def retention_due(
        self, operation_type: str, journal_before: int | None, outcome_before: int | None
    ) -> list[RetentionRow]:
        with self.datastore.transaction(commit=False) as c:
            return self.retention.due(c, operation_type, journal_before, outcome_before)

    def retention_pending(self) -> list[RetentionRow]:
        with self.datastore.transaction(commit=False) as c:
            return self.retention.pending(c)

    def retention_rows(self) -> list[RetentionRow]:
        with self.datastore.transaction(commit=False) as c:
            return self.retention.rows(c)

    def settle_retention(self, operation_id: str) -> None:
        with self.datastore.transaction(commit=True) as c:
            self.retention.settle(c, operation_id)
