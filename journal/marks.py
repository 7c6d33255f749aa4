"""Named journal positions kept beside the indexes: how far a sweep has finished.

``purge`` finishes instance purges cut short (a tombstone appended, its history not yet
deleted) by reading tombstones. A mark says up to which position every tombstone has been
finished, so each run reads only those appended since (decisions F52). Positions grow in
commit order, so a position read before a sweep bounds everything the sweep has seen.
"""

from __future__ import annotations

from typing import Any

from journal.work_sql import Cursor, _first


class MarkTables:
    """Marks are rows of ``blackops_projection_positions`` (beside the indexes' own)."""

    def __init__(self, prefix: str, *, sqlite: bool) -> None:
        table = f"{prefix}blackops_projection_positions"
        mark = "?" if sqlite else "%s"
        self._read = f"SELECT position FROM {table} WHERE name = {mark}"
        # Never backwards: a slower sweep that started earlier cannot undo a later one.
        self._advance = (
            f"INSERT INTO {table} AS p (name, position) VALUES ({mark}, {mark}) "
            "ON CONFLICT (name) DO UPDATE SET position = CASE WHEN excluded.position > "
            "p.position THEN excluded.position ELSE p.position END"
        )

    def read(self, cursor: Cursor, name: str) -> int:
        cursor.execute(self._read, (name,))
        rows = cursor.fetchall()
        return int(_first(rows[0])) if rows else 0

    def advance(self, cursor: Cursor, name: str, position: int) -> None:
        cursor.execute(self._advance, (name, position))


class MarkRecorder:
    """Marks for a SQL recorder with a ``datastore`` (eventsourcing's)."""

    marks: MarkTables
    datastore: Any

    def read_mark(self, name: str) -> int:
        with self.datastore.transaction(commit=False) as c:
            return self.marks.read(c, name)

    def advance_mark(self, name: str, position: int) -> None:
        with self.datastore.transaction(commit=True) as c:
            self.marks.advance(c, name, position)
