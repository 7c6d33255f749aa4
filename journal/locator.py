"""Store URLs -> eventsourcing settings, passed explicitly (never read from the shell)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

from domain.errors import InvalidRequest

if TYPE_CHECKING:
    import psycopg

DEFAULT_STORE = "sqlite:///.blackops/journal.sqlite3"
_SCHEMA = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
#: PostgreSQL keywords that cannot name a type (`pg_get_keywords()`, categories R, T and C,
#: PostgreSQL 15-17): eventsourcing writes the schema's name unquoted in its SQL, e.g. the
#: type `order.stored_event_text`, which they break. (`pg_` names are the server's own.)
_KEYWORDS_TEXT = """
    all analyse analyze and any array as asc asymmetric authorization between bigint binary
    bit boolean both case cast char character check coalesce collate collation column
    concurrently constraint create cross current_catalog current_date current_role
    current_schema current_time current_timestamp current_user dec decimal default
    deferrable desc distinct do else end except exists extract false fetch float for
    foreign freeze from full grant greatest group grouping having ilike in initially inner
    inout int integer intersect interval into is isnull join json json_array json_arrayagg
    json_exists json_object json_objectagg json_query json_scalar json_serialize json_table
    json_value lateral leading least left like limit localtime localtimestamp merge_action
    national natural nchar none normalize not notnull null nullif numeric offset on only or
    order out outer overlaps overlay placing position precision primary real references
    returning right row select session_user setof similar smallint some substring symmetric
    system_user table tablesample then time timestamp to trailing treat trim true union
    unique user using values varchar variadic verbose when where window with xmlattributes
    xmlconcat xmlelement xmlexists xmlforest xmlnamespaces xmlparse xmlpi xmlroot
    xmlserialize xmltable"""
_SQL_KEYWORDS = frozenset(_KEYWORDS_TEXT.split())


#: Beside a SQLite journal's file: the setup lock (journal/setup.py), SQLite's WAL, shared
#: memory and rollback journal.
SETUP_LOCK_SUFFIX = ".setup-lock"
SQLITE_SIDE_SUFFIXES = ("-wal", "-shm", "-journal", SETUP_LOCK_SUFFIX)


@dataclass(frozen=True, slots=True)
class StoreLocation:
    """Where the journal lives: ``kind`` is ``sqlite``, ``postgresql`` or ``memory``."""

    kind: str
    settings: dict[str, str]
    display: str  # the URL without its password, safe to print

    @property
    def sqlite_path(self) -> Path | None:
        return Path(self.settings["SQLITE_DBNAME"]) if self.kind == "sqlite" else None

    @property
    def sqlite_files(self) -> list[Path]:
        """A SQLite journal's database and the files kept beside it (SQLite's, the setup
        lock's); none for another kind of store."""
        path = self.sqlite_path
        if path is None:
            return []
        return [path, *(Path(f"{path}{suffix}") for suffix in SQLITE_SIDE_SUFFIXES)]


def resolve_store(url: str | None = None) -> StoreLocation:
    """``None`` means ``$BLACKOPS_STORE``, else the embedded SQLite default."""
    if url is None:
        url = os.environ.get("BLACKOPS_STORE") or DEFAULT_STORE
    # Refused, not stripped: "a.db\n" (a URL read from a file) named another journal, which
    # a command created and found empty. The URL is not echoed: it may hold a password.
    if url != url.strip() or any(ord(c) < 32 or ord(c) == 127 for c in url):
        raise InvalidRequest(
            "store URL has leading or trailing whitespace or a control character "
            "(a newline from a file?)"
        )
    if url == "memory://":
        return StoreLocation("memory", {"PERSISTENCE_MODULE": "eventsourcing.popo"}, url)
    parts = _split(url)
    if parts.scheme == "sqlite":
        return _sqlite(url)
    if parts.scheme in ("postgresql", "postgres"):
        return _postgres(url)
    raise InvalidRequest(
        "store must be sqlite:///PATH, postgresql://USER@HOST:PORT/DB[?schema=S] or memory://"
    )


def _split(url: str) -> Any:
    try:
        return urlsplit(url)
    except ValueError as error:  # "Invalid IPv6 URL"
        raise InvalidRequest(f"store URL is malformed: {error}") from None


def _sqlite(url: str) -> StoreLocation:
    # sqlite:///relative/path and sqlite:////absolute/path, as SQLAlchemy spells them.
    raw = url[len("sqlite:///") :] if url.startswith("sqlite:///") else ""
    if not raw or raw.endswith("/"):
        raise InvalidRequest("sqlite store URL must name a file: sqlite:///path/to/journal.db")
    if "\x00" in unquote(raw):  # %00: no file system names one
        raise InvalidRequest("sqlite store path must not contain a NUL character")
    path = Path(unquote(raw))
    settings = {
        "PERSISTENCE_MODULE": "eventsourcing.sqlite",
        "SQLITE_DBNAME": str(path),
        "SQLITE_LOCK_TIMEOUT": "30",
        "ORIGINATOR_ID_TYPE": "text",
    }
    return StoreLocation("sqlite", settings, url)


def _postgres(url: str) -> StoreLocation:
    parts = _split(url)
    dbname = unquote(parts.path.lstrip("/"))
    if not parts.hostname or not dbname:
        raise InvalidRequest("postgresql store URL needs a host and a database name")
    try:
        port = 5432 if parts.port is None else parts.port
    except ValueError:  # not a number, or out of range
        port = 0
    if not 0 < port <= 65535:  # ":0" was taken as 5432
        raise InvalidRequest("postgresql store URL port must be a number from 1 to 65535")
    user, password = unquote(parts.username or "postgres"), unquote(parts.password or "")
    if any("\x00" in part for part in (dbname, user, password, parts.hostname)):
        raise InvalidRequest("postgresql store URL must not contain a NUL character (%00)")
    query = _known_query(parts.query)
    schema = query.get("schema", ["public"])[-1]
    if not _SCHEMA.fullmatch(schema):
        raise InvalidRequest("postgresql schema must be a lower-case SQL identifier")
    if schema in _SQL_KEYWORDS:
        raise InvalidRequest(f"postgresql schema must not be an SQL keyword ({schema!r})")
    if schema.startswith("pg_"):
        raise InvalidRequest("postgresql schema names starting with pg_ are the server's")
    settings = {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": dbname,
        "POSTGRES_HOST": parts.hostname,
        "POSTGRES_PORT": str(port),
        "POSTGRES_USER": user,
        # eventsourcing insists on a password even under trust authentication.
        "POSTGRES_PASSWORD": password or "unused",
        "POSTGRES_SCHEMA": schema,
        # 0: wait for ever, as libpq reads it (a URL that worked before H12 still does).
        "POSTGRES_CONNECT_TIMEOUT": _positive(query, "connect_timeout", "5", lowest=0),
        "POSTGRES_POOL_SIZE": _positive(query, "pool_size", "4"),
        "POSTGRES_MAX_OVERFLOW": "8",
        "POSTGRES_PRE_PING": "y",
        "POSTGRES_LOCK_TIMEOUT": "30",
        "ORIGINATOR_ID_TYPE": "text",
    }
    shown = url if parts.password is None else url.replace(f":{parts.password}@", ":***@", 1)
    return StoreLocation("postgresql", settings, shown)


#: The query parameters a PostgreSQL store URL takes (docs/getting-started.md).
POSTGRES_URL_OPTIONS = ("schema", "connect_timeout", "pool_size")


def _known_query(text: str) -> dict[str, list[str]]:
    """A store URL's query: each known name at most once, with a value. Anything else is
    refused, not dropped (H12): a misspelt or empty ``schema`` named another journal
    (``public``), and ``sslmode=require`` connected in clear text (found by a defect hunt,
    stop 38)."""
    query = parse_qs(text, keep_blank_values=True)
    unknown = sorted(set(query) - set(POSTGRES_URL_OPTIONS))
    if unknown:
        raise InvalidRequest(
            f"postgresql store URL option {unknown[0][:40]!r} is not one blackops takes "
            f"(it takes {', '.join(POSTGRES_URL_OPTIONS)}); it is refused, not ignored"
        )
    for name, values in query.items():
        if len(values) > 1:
            raise InvalidRequest(f"postgresql store URL names {name} more than once")
        if not values[0]:
            raise InvalidRequest(f"postgresql store URL {name} is empty")
    return query


def _positive(query: dict[str, list[str]], name: str, default: str, lowest: int = 1) -> str:
    """A query parameter that must be a whole number from ``lowest`` (checked here: the
    drivers failed later with a traceback)."""
    value = query.get(name, [default])[-1]
    if not (value.isascii() and value.isdigit() and lowest <= int(value) <= 1_000_000):
        raise InvalidRequest(
            f"postgresql store URL {name} must be a whole number from {lowest} to 1000000"
        )
    return value


def postgres_connect(settings: dict[str, str]) -> psycopg.Connection[Any]:
    """A plain autocommit connection to a PostgreSQL store (LISTEN, setup locks)."""
    import psycopg

    return psycopg.connect(
        dbname=settings["POSTGRES_DBNAME"],
        host=settings["POSTGRES_HOST"],
        port=settings["POSTGRES_PORT"],
        user=settings["POSTGRES_USER"],
        password=settings["POSTGRES_PASSWORD"],
        connect_timeout=int(settings["POSTGRES_CONNECT_TIMEOUT"]),
        autocommit=True,
    )
