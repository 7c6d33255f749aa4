"""The cosignatures the service's witnesses returned, kept beside the journal.

A cosignature is evidence a third party made about a signed checkpoint, not an event of the
journal: journaling it would grow the tree and call for a new checkpoint, forever. It is kept
in ``blackops_cosignatures`` (one row per checkpoint size, root and witness key), in the
journal's database so that every process of the service (``serve``, ``worker``) publishes the
same ones; lost rows only mean the next push asks again. A ``memory://`` store keeps them in
the process. A reader (``read_only``: the monitor's ``--store``) never creates the table:
while there is none, there are no cosignatures. (Opening the store itself still runs its
idempotent setup, so the monitor's database role needs what any journal reader needs.)
"""

from __future__ import annotations

import base64
import contextlib
import threading
from collections.abc import Iterator

from journal.store import EventStore
from projections.framework import SQL
from replay.notes import Checkpoint

_TABLE = (
    "CREATE TABLE IF NOT EXISTS {p}blackops_cosignatures ("
    "origin TEXT NOT NULL, tree_size BIGINT NOT NULL, root TEXT NOT NULL, "
    "witness TEXT NOT NULL, line TEXT NOT NULL, "
    "PRIMARY KEY (origin, tree_size, root, witness))"
)


class CosignatureBook:
    def __init__(self, store: EventStore, *, read_only: bool = False) -> None:
        self.store = store
        self.read_only = read_only
        self._memory: dict[tuple[str, int, str, str], str] | None = None
        self._lock = threading.Lock()
        self._table_seen = False
        if store.location.kind == "memory":
            self._memory = {}
            return
        self.sqlite = store.location.kind != "postgresql"
        self.schema = "" if self.sqlite else str(store.location.settings["POSTGRES_SCHEMA"])
        self.prefix = f"{self.schema}." if self.schema else ""
        if read_only:
            return
        # Concurrent CREATE TABLE IF NOT EXISTS collide on PostgreSQL: one process at a time.
        with store.exclusive("cosignatures-setup"), self._sql() as sql:
            sql.execute(_TABLE)
        self._table_seen = True

    def _has_table(self, sql: SQL) -> bool:
        """Whether the table exists (a read-only book never creates it); once seen, it stays."""
        if not self._table_seen:
            if self.sqlite:
                rows = sql.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = %s",
                    ("blackops_cosignatures",),
                )
                self._table_seen = bool(rows)
            else:
                rows = sql.execute(
                    "SELECT to_regclass(%s)", (f"{self.schema}.blackops_cosignatures",)
                )
                self._table_seen = bool(rows) and rows[0][0] is not None
        return self._table_seen

    @contextlib.contextmanager
    def _sql(self) -> Iterator[SQL]:
        with self.store.transaction() as cursor:
            yield SQL(cursor, sqlite=self.sqlite, prefix=self.prefix)

    def save(self, checkpoint: Checkpoint, witness: str, line: str) -> None:
        """Keep ``witness``'s cosignature line for ``checkpoint`` (the newest one wins)."""
        if self.read_only:
            raise RuntimeError("a read-only cosignature book keeps nothing")
        root = base64.b64encode(checkpoint.root).decode()
        if self._memory is not None:
            with self._lock:
                self._memory[(checkpoint.origin, checkpoint.size, root, witness)] = line
            return
        with self._sql() as sql:
            sql.execute(
                "INSERT INTO {p}blackops_cosignatures (origin, tree_size, root, witness, line) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (origin, tree_size, root, witness) "
                "DO UPDATE SET line = excluded.line",
                (checkpoint.origin, checkpoint.size, root, witness, line),
            )

    def lines(self, checkpoint: Checkpoint) -> list[str]:
        """Every kept cosignature line of exactly this checkpoint, by witness name."""
        root = base64.b64encode(checkpoint.root).decode()
        if self._memory is not None:
            with self._lock:
                return [
                    line
                    for (origin, size, r, _), line in sorted(self._memory.items())
                    if (origin, size, r) == (checkpoint.origin, checkpoint.size, root)
                ]
        with self._sql() as sql:
            if not self._has_table(sql):
                return []
            rows = sql.execute(
                "SELECT line FROM {p}blackops_cosignatures "
                "WHERE origin = %s AND tree_size = %s AND root = %s ORDER BY witness",
                (checkpoint.origin, checkpoint.size, root),
            )
        return [str(row[0]) for row in rows]

    def cosigned_size(self, origin: str, witness: str) -> int | None:
        """The largest size ``witness`` cosigned for ``origin``, as far as this book knows."""
        if self._memory is not None:
            with self._lock:
                sizes = [s for (o, s, _, w) in self._memory if (o, w) == (origin, witness)]
            return max(sizes) if sizes else None
        with self._sql() as sql:
            if not self._has_table(sql):
                return None
            rows = sql.execute(
                "SELECT MAX(tree_size) FROM {p}blackops_cosignatures "
                "WHERE origin = %s AND witness = %s",
                (origin, witness),
            )
        return int(rows[0][0]) if rows and rows[0][0] is not None else None
