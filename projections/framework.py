"""Projections: read models folded from the journal, each with its tracked position.

A projection's tables live in the journal's own database, and every batch is applied
in **one transaction together with its position**, advanced only from the position it
was read at (compare and set): a crash between update and position is impossible, a
concurrent runner that got there first makes this batch roll back, so every event is
applied exactly once. ``rebuild`` empties the tables and folds from position 0.

For ``memory://`` stores (tests, demos) the tables live in a private SQLite database.
Statements are written with ``%s``; SQLite gets ``?``.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from domain.errors import BackendUnavailable, InvalidRequest
from domain.events import RecordedEvent
from journal.store import PAGE_LIMIT_MAX, EventStore

#: How long a projection's set-up waits for SQLite's write lock (as the store's writers do).
SETUP_LOCK_SECONDS = 30.0
#: How many times a set-up (or a catch-up's batch) that PostgreSQL chose as a deadlock's
#: victim is tried again before the failure is reported.
DEADLOCK_ATTEMPTS = 5


class Cursor(Protocol):
    def execute(self, query: Any, params: Any = ..., /) -> Any: ...

    def executemany(self, query: Any, params_seq: Any, /) -> Any: ...

    def fetchall(self) -> Any: ...


class Projection(Protocol):
    name: str

    def tables(self, prefix: str) -> list[str]:
        """CREATE TABLE IF NOT EXISTS statements (``prefix`` qualifies table names), and
        its migrations. ``CREATE TABLE|INDEX IF NOT EXISTS`` and ``DROP TABLE|INDEX IF
        EXISTS`` are skipped when the catalog shows them done; any other statement makes
        every open run them all."""
        ...

    def apply(self, sql: SQL, events: Sequence[RecordedEvent]) -> None:
        """Fold ``events`` (journal order) into the tables, through ``sql``."""
        ...


class SQL:
    """A cursor inside the projection's transaction, speaking one placeholder style."""

    def __init__(self, cursor: Cursor, *, sqlite: bool, prefix: str) -> None:
        self.cursor = cursor
        self.sqlite = sqlite
        self.prefix = prefix

    def q(self, text: str) -> str:
        text = text.replace("{p}", self.prefix)
        return text.replace("%s", "?") if self.sqlite else text

    def execute(self, text: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        self.cursor.execute(self.q(text), tuple(params))
        try:
            rows = self.cursor.fetchall()
        except Exception:  # statements without a result set
            return []
        return [tuple(r.values()) if isinstance(r, dict) else tuple(r) for r in rows]

    def select_in(
        self, text: str, column: str, values: Sequence[Any], chunk: int = 500
    ) -> list[tuple[Any, ...]]:
        """``text`` (a SELECT ending in WHERE) with ``column IN values``, in chunks."""
        found: list[tuple[Any, ...]] = []
        for start in range(0, len(values), chunk):
            part = list(values[start : start + chunk])
            if self.sqlite:
                found += self.execute(f"{text} {column} IN ({','.join(['%s'] * len(part))})", part)
            else:
                found += self.execute(f"{text} {column} = ANY(%s)", (part,))
        return found

    def executemany(self, text: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            self.cursor.executemany(self.q(text), [tuple(r) for r in rows])


#: After a catch-up of this many events, PostgreSQL's statistics of the projection's tables
#: are refreshed at once: planned on the empty table's estimates, a listing's later pages
#: were sorted bitmap scans (150 ms at 33,000 rows) until autovacuum analysed the table.
ANALYZE_AFTER = 10_000
_CREATED = re.compile(r"CREATE TABLE IF NOT EXISTS (\S+)")


class ProjectionRunner:
    """Keeps one projection up to date with one journal."""

    def __init__(self, store: EventStore, projection: Projection, batch: int = 1000) -> None:
        self.store = store
        self.projection = projection
        self.batch = batch
        self._local: sqlite3.Connection | None = None
        self._local_lock = threading.Lock()
        kind = store.location.kind
        self.sqlite = kind != "postgresql"
        self.prefix = f"{store.location.settings['POSTGRES_SCHEMA']}." if not self.sqlite else ""
        self._set_up()

    def _set_up(self) -> None:
        """Create the tables and the position row, unless the catalog shows them made.

        The read-only check first: every open ran the statements, and on PostgreSQL a
        ``CREATE INDEX IF NOT EXISTS`` of an existing index still takes a SHARE lock on
        its table, so a new process's first query waited for every catch-up in flight
        (0.2 to 9 s under writers) and, taking that lock before the position row, which a
        catch-up takes first, deadlocked with one: reported as "cannot be reached" (found
        by a defect hunt). Skipped only when every statement would change nothing, so a
        projection's migrations still run on the open after they are added."""
        with self._transaction() as sql:
            if self._set_up_in(sql):
                return
        for attempt in range(1, DEADLOCK_ATTEMPTS + 1):
            try:
                with self._setup_transaction() as sql:
                    if not self.sqlite:
                        # Concurrent CREATE TABLE IF NOT EXISTS of one table fails on
                        # PostgreSQL (a unique violation in its catalog): runners opening
                        # at once, in any process, take turns; the second finds it done.
                        sql.execute(
                            "SELECT pg_advisory_xact_lock(hashtext(%s))",
                            (f"blackops-projections:{self.prefix}",),
                        )
                        if self._set_up_in(sql):
                            return
                    sql.execute(_POSITIONS_TABLE)
                    sql.execute(
                        "INSERT INTO {p}blackops_projection_positions (name, position) "
                        "VALUES (%s, 0) ON CONFLICT (name) DO NOTHING",
                        (self.projection.name,),
                    )
                    # The position row before the projection's tables, the order catch_up
                    # and rebuild take them in: no lock cycle with either.
                    sql.execute(
                        "UPDATE {p}blackops_projection_positions SET position = position "
                        "WHERE name = %s",
                        (self.projection.name,),
                    )
                    for statement in self.projection.tables(self.prefix):
                        sql.execute(statement)
                return
            except BackendUnavailable as error:
                if attempt == DEADLOCK_ATTEMPTS or not lost_a_deadlock(error):
                    raise

    def _set_up_in(self, sql: SQL) -> bool:
        """Whether the set-up's statements would change nothing: every object they make
        is in the catalog, every one they drop is not, and the position row exists. Reads
        only; takes no lock a writer waits for."""
        statements = [_POSITIONS_TABLE.replace("{p}", self.prefix)]
        expected = _catalog_after([*statements, *self.projection.tables(self.prefix)])
        if expected is None:
            return False
        if sql.sqlite:
            rows = sql.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'index')")
        else:  # to_regclass reads the catalog without locking the relation
            rows = sql.execute(
                "SELECT n FROM unnest(%s::text[]) AS n WHERE to_regclass(n) IS NOT NULL",
                (list(expected),),
            )
        present = {str(row[0]) for row in rows}
        if any((name in present) != made for name, made in expected.items()):
            return False
        return bool(
            sql.execute(
                "SELECT 1 FROM {p}blackops_projection_positions WHERE name = %s",
                (self.projection.name,),
            )
        )

    @contextlib.contextmanager
    def _setup_transaction(self) -> Iterator[SQL]:
        """The set-up's transaction. On SQLite it takes the write lock first (BEGIN
        IMMEDIATE, waited for like any writer's): its statements read, then write, and a
        write after a read is refused at once ("database is locked", never waited for)
        when another process committed in between, so a process's first query of a
        projection failed under load (found by a defect hunt). Reached only when the
        catalog shows something to do (``_set_up``)."""
        path = self.store.location.sqlite_path
        if path is None:
            with self._transaction() as sql:
                yield sql
            return
        try:
            conn = sqlite3.connect(path, timeout=SETUP_LOCK_SECONDS, isolation_level=None)
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as error:
            raise BackendUnavailable("the journal store cannot be reached", str(error)) from None
        with contextlib.closing(conn):
            try:
                yield SQL(conn.cursor(), sqlite=True, prefix="")
            except BaseException:
                conn.rollback()
                raise
            conn.commit()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[SQL]:
        if self.store.location.kind == "memory":
            with self._local_lock:
                if self._local is None:
                    self._local = sqlite3.connect(":memory:", check_same_thread=False)
                conn = self._local
                cursor = conn.cursor()
                cursor.execute("BEGIN")
                try:
                    yield SQL(cursor, sqlite=True, prefix="")
                except BaseException:
                    conn.rollback()
                    raise
                conn.commit()
            return
        with self.store.transaction() as cursor:
            yield SQL(cursor, sqlite=self.sqlite, prefix=self.prefix)

    def position(self) -> int:
        with self._transaction() as sql:
            return self._position_in(sql)

    def _position_in(self, sql: SQL) -> int:
        rows = sql.execute(
            "SELECT position FROM {p}blackops_projection_positions WHERE name = %s",
            (self.projection.name,),
        )
        return int(rows[0][0]) if rows else 0

    def status(self) -> dict[str, Any]:
        position, last = self.position(), self.store.last_position()
        return {"name": self.projection.name, "position": position, "lag": max(0, last - position)}

    def catch_up(
        self, *, limit: int | None = None, on_batch: Callable[[int], None] | None = None
    ) -> int:
        """Apply every event after the tracked position (at most ``limit``); returns how many."""
        _check_batch(self.batch)
        applied, deadlocks = 0, 0
        while limit is None or applied < limit:
            start = self.position()
            size = self.batch if limit is None else min(self.batch, limit - applied)
            events = self.store.read_after(start, size)
            if not events:
                break
            try:
                with self._transaction() as sql:
                    # Lock this projection's position row first: runners of one projection
                    # take turns (no deadlock between their updates), and a runner that
                    # lost the race sees it before applying anything.
                    held = sql.execute(
                        "UPDATE {p}blackops_projection_positions SET position = position "
                        "WHERE name = %s RETURNING position",
                        (self.projection.name,),
                    )
                    if not held or int(held[0][0]) != start:
                        raise _Raced()
                    self.projection.apply(sql, events)
                    moved = sql.execute(
                        "UPDATE {p}blackops_projection_positions SET position = %s "
                        "WHERE name = %s AND position = %s RETURNING position",
                        (events[-1].position, self.projection.name, start),
                    )
                    if not moved:
                        raise _Raced()
            except _Raced:
                continue  # rolled back: read the new position and go on from there
            except BackendUnavailable as error:
                # PostgreSQL ended the batch to break a deadlock: rolled back as a race is.
                deadlocks += 1
                if deadlocks == DEADLOCK_ATTEMPTS or not lost_a_deadlock(error):
                    raise
                continue
            applied += len(events)
            if on_batch is not None:
                on_batch(events[-1].position)
        if applied >= ANALYZE_AFTER and not self.sqlite:
            self._analyze()
        return applied

    def _analyze(self) -> None:
        """Fresh planner statistics of this projection's tables (PostgreSQL only: SQLite
        plans without them)."""
        with self._transaction() as sql:
            for table in self._tables():
                sql.execute(f"ANALYZE {table}")

    def follow(self, stop: threading.Event, poll_seconds: float = 0.5) -> None:
        """Live mode: catch up, then again whenever this process appends (at once) or
        every ``poll_seconds`` (appends from other processes), until ``stop`` is set."""
        appended = threading.Event()
        self.store.add_append_listener(appended.set)
        try:
            while not stop.is_set():
                appended.clear()
                self.catch_up()
                appended.wait(poll_seconds)
        finally:
            self.store.remove_append_listener(appended.set)

    def rebuild(self) -> int:
        """Empty the projection's tables and fold the whole journal again.

        Emptied with DELETE, not dropped: a reader's snapshot taken before the reset still
        sees the old rows beside the old position, and one taken after sees the rows and
        the position the refill has reached. A dropped table is a new one that an older
        PostgreSQL snapshot reads as empty beside the old position: a rebuild served
        "every count 0 as of the journal's end" (found by a defect hunt)."""
        # Before the reset: a batch read_after refuses failed only after it, and left the
        # projection empty at position 0 (found by a defect hunt).
        _check_batch(self.batch)
        with self._transaction() as sql:
            # The position row first, as a catch-up takes it: one in flight commits before
            # the DELETEs, which then see its rows (READ COMMITTED reads what a statement
            # finds committed when it starts); deleted before it committed, its rows would
            # survive and be counted again by the refill (found by review).
            sql.execute(
                "UPDATE {p}blackops_projection_positions SET position = position WHERE name = %s",
                (self.projection.name,),
            )
            for statement in self.projection.tables(self.prefix):
                sql.execute(statement)
            for table in self._tables():
                sql.execute(f"DELETE FROM {table}")
            sql.execute(
                "UPDATE {p}blackops_projection_positions SET position = 0 WHERE name = %s",
                (self.projection.name,),
            )
        return self.catch_up()

    def _tables(self) -> list[str]:
        """The projection's tables, as its ``tables()`` statements create them."""
        statements = self.projection.tables(self.prefix)
        return [found.group(1) for s in statements if (found := _CREATED.match(s))]

    def query(self, text: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._transaction() as sql:
            return sql.execute(text, params)

    def query_as_of(
        self, text: str, params: Sequence[Any] = ()
    ) -> tuple[list[tuple[Any, ...]], int]:
        """`query`'s rows and this projection's position, read from one snapshot, so the
        rows are exactly as of that position (two reads could straddle a batch)."""
        with self._transaction() as sql:
            if not sql.sqlite:  # SQLite's read transaction is one snapshot already
                # PostgreSQL's default gives each statement its own snapshot.
                sql.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            position = self._position_in(sql)
            return sql.execute(text, params), position


def _check_batch(batch: object) -> None:
    if type(batch) is not int or not 1 <= batch <= PAGE_LIMIT_MAX:
        raise InvalidRequest(f"batch must be an integer from 1 to {PAGE_LIMIT_MAX}")


#: The table of every projection's position (the set-up's first statement).
_POSITIONS_TABLE = (
    "CREATE TABLE IF NOT EXISTS {p}blackops_projection_positions "
    "(name TEXT PRIMARY KEY, position BIGINT NOT NULL)"
)
_MAKES = re.compile(r"CREATE (?:TABLE|INDEX|UNIQUE INDEX) IF NOT EXISTS (\S+)(?: ON (\S+?) ?\()?")
_DROPS = re.compile(r"DROP (?:TABLE|INDEX) IF EXISTS (\S+)\Z")


def _catalog_after(statements: Sequence[str]) -> dict[str, bool] | None:
    """What the catalog holds once ``statements`` ran: each object they make (True) or
    drop (False), by qualified name; None if one is of another kind (it must run)."""
    expected: dict[str, bool] = {}
    for statement in statements:
        if made := _MAKES.match(statement):
            name, table = made.groups()
            if table and "." in table and "." not in name:
                # PostgreSQL makes an index in its table's schema.
                name = f"{table.rpartition('.')[0]}.{name}"
            expected[name] = True
        elif dropped := _DROPS.match(statement):
            expected[dropped.group(1)] = False
        else:
            return None
    return expected


def lost_a_deadlock(error: BaseException) -> bool:
    """Whether PostgreSQL ended the transaction to break a deadlock (SQLSTATE 40P01): the
    store reports it as unreachable, but trying again is the answer."""
    seen: BaseException | None = error
    for _ in range(10):  # the chain of causes, bounded
        if seen is None:
            return False
        if getattr(seen, "sqlstate", None) == "40P01":
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class _Raced(Exception):
    """Another runner advanced the position first: this batch rolled back."""
