"""Changes behind the journal's back: a raw connection to a store's database, as an attacker
or a careless operator with database access has one (the tamper-evidence tests' tool)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from journal.store import EventStore


@contextmanager
def behind_the_journals_back(store: EventStore) -> Iterator[tuple[Any, str, str]]:
    """A raw connection to the store's database: (connection, events table, leaves table)."""
    location = store.location
    if location.kind == "sqlite":
        assert location.sqlite_path is not None
        conn: Any = sqlite3.connect(location.sqlite_path, isolation_level=None)
        try:
            yield conn, "stored_events", "blackops_leaves"
        finally:
            conn.close()
        return
    settings = location.settings
    with psycopg.connect(
        host=settings["POSTGRES_HOST"],
        port=settings["POSTGRES_PORT"],
        user=settings["POSTGRES_USER"],
        dbname=settings["POSTGRES_DBNAME"],
        autocommit=True,
    ) as pg:
        schema = settings["POSTGRES_SCHEMA"]
        yield pg, f"{schema}.blackops_events", f"{schema}.blackops_leaves"


def q(conn: Any, sql: str) -> str:
    """``sql`` with ``?`` placeholders as ``conn``'s driver wants them."""
    return sql if isinstance(conn, sqlite3.Connection) else sql.replace("?", "%s")


def position_column(conn: Any) -> str:
    """The events table's position column on ``conn``'s database."""
    return "rowid" if isinstance(conn, sqlite3.Connection) else "notification_id"
