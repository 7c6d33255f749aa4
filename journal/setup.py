"""Opening a journal safely when several processes open it at once: the table creation of
each backend runs under a cross-process lock (the only SQL here: the lock and the schema)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from domain.errors import BackendUnavailable
from journal.locator import SETUP_LOCK_SUFFIX, postgres_connect


@contextlib.contextmanager
def sqlite_setup_lock(path: str) -> Iterator[None]:
    """Serialise opening a SQLite journal across processes.

    The first connections switch the file to WAL and create the tables; SQLite answers
    "database is locked" at once (no busy wait) when several processes do that together.
    """
    import fcntl

    with open(f"{path}{SETUP_LOCK_SUFFIX}", "a") as lock:
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


_SIGNERS: dict[str, threading.Lock] = {}
_SIGNERS_GUARD = threading.Lock()


@contextlib.contextmanager
def named_lock(kind: str, settings: dict[str, str], name: str) -> Iterator[None]:
    """One holder at a time of ``name`` across the processes sharing a journal (the
    checkpoint signer): a PostgreSQL advisory lock on its own connection, a ``flock`` beside
    the SQLite file, a process-wide lock in memory. Threads of one process queue on a
    ``threading.Lock`` first, so a process holds at most one connection for it."""
    with _SIGNERS_GUARD:
        local = _SIGNERS.setdefault(f"{kind}:{name}:{sorted(settings.items())}", threading.Lock())
    with local:
        if kind == "postgresql":
            import psycopg

            schema = settings["POSTGRES_SCHEMA"]
            try:
                with postgres_connect(settings) as conn:
                    key = f"blackops-{name}:{schema}"
                    conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (key,))
                    try:
                        yield
                    finally:
                        conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (key,))
            except psycopg.OperationalError as error:
                raise BackendUnavailable("PostgreSQL cannot be reached", str(error)) from error
        elif kind == "sqlite":
            import fcntl

            with open(f"{settings['SQLITE_DBNAME']}.{name}-lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)
        else:
            yield
