"""Opening a journal safely when several processes open it at once: the table creation of
each backend runs under a cross-process lock (the only SQL here: the lock and the schema)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from domain.errors import BackendUnavailable
from journal.locator import postgres_connect


@contextlib.contextmanager
def sqlite_setup_lock(path: str) -> Iterator[None]:
    """Serialise opening a SQLite journal across processes.

    The first connections switch the file to WAL and create the tables; SQLite answers
    "database is locked" at once (no busy wait) when several processes do that together.
    """
    import fcntl

    with open(f"{path}.setup-lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextlib.contextmanager
def postgres_setup_lock(settings: dict[str, str]) -> Iterator[None]:
    """Create the schema and hold an advisory lock while the tables are created.

    eventsourcing's CREATE TABLE / TYPE / FUNCTION statements collide when several
    processes start at once ("tuple concurrently updated"); one at a time they are
    idempotent.
    """
    import psycopg
    from psycopg import sql

    schema = settings["POSTGRES_SCHEMA"]
    try:
        with postgres_connect(settings) as conn:
            conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (f"blackops-setup:{schema}",))
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
            yield
    except psycopg.OperationalError as error:
        raise BackendUnavailable("PostgreSQL cannot be reached", str(error)) from error
