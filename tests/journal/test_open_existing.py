"""A reader opens an existing journal only (``EventStore(url, create=False)``): one that is not
there is ``not_found`` and nothing is created (no SQLite file or folder, no PostgreSQL schema);
a file that is not a SQLite journal is ``invalid_request``, said in one line (SQLite and
PostgreSQL). The CLI's journal readers (verify, export, checkpoint, consistency, receipts,
key rotation) open that way."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from cli_processes import run
from conftest import POSTGRES_URL  # type: ignore[import-not-found, unused-ignore]

from domain.errors import InvalidRequest, NotFound
from domain.events import NewEvent
from journal.store import Append, EventStore


def _schemas(name: str) -> int:
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM information_schema.schemata WHERE schema_name = %s", (name,)
        ).fetchone()
    return int(row[0]) if row else 0


def test_an_existing_journal_opens(store_url: str) -> None:
    EventStore(store_url).close()  # created
    with EventStore(store_url, create=False) as store:
        assert store.last_position() == 0


def test_a_missing_sqlite_journal_is_not_found_and_not_created(tmp_path: Path) -> None:
    where = tmp_path / "typo" / "journal.sqlite3"
    with pytest.raises(NotFound, match="no journal at"):
        EventStore(f"sqlite:///{where}", create=False)
    assert not where.parent.exists()


@pytest.mark.parametrize("mode", ["delete", "wal"])
def test_a_sqlite_database_without_a_journal_is_not_found_and_left_as_it_was(
    tmp_path: Path, mode: str
) -> None:
    """Another program's database: read only (a WAL one as immutable), so no WAL switch and
    nothing beside it (no lock file, no -shm or -wal)."""
    import sqlite3

    other = tmp_path / "other.db"
    with contextlib.closing(sqlite3.connect(other)) as conn:
        conn.execute(f"PRAGMA journal_mode = {mode}")
        conn.execute("CREATE TABLE t (a int)")
        conn.commit()
    before = other.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db"]
    with pytest.raises(NotFound):
        EventStore(f"sqlite:///{other}", create=False)
    assert other.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db"]
    with contextlib.closing(sqlite3.connect(other)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == mode


def test_a_missing_postgres_schema_is_not_found_and_not_created() -> None:
    if not POSTGRES_URL:
        pytest.skip("no PostgreSQL")
    schema = "blackops_typo_never_created"
    separator = "&" if "?" in POSTGRES_URL else "?"
    with pytest.raises(NotFound, match="no journal at"):
        EventStore(f"{POSTGRES_URL}{separator}schema={schema}", create=False)
    assert _schemas(schema) == 0


@pytest.mark.parametrize("create", [True, False])
def test_a_file_that_is_no_database_is_invalid_request(tmp_path: Path, create: bool) -> None:
    junk = tmp_path / "notes.txt"
    junk.write_text("not a database, only words " * 20)
    with pytest.raises(InvalidRequest, match="is not a SQLite journal"):
        EventStore(f"sqlite:///{junk}", create=create)


@pytest.mark.parametrize(
    "command",
    [
        ["verify"],
        ["journal", "export", "--no-manifest"],
        ["journal", "consistency", "1", "2"],
        ["op", "receipt", "op-x"],
    ],
)
def test_cli_readers_refuse_a_missing_journal(tmp_path: Path, command: list[str]) -> None:
    """A typo'd store never 'verifies' as an empty journal (it did, exit 0, and created it)."""
    where = tmp_path / "typo" / "journal.sqlite3"
    done = run(*command, store=f"sqlite:///{where}")
    assert done.returncode == 1
    assert "blackops: not_found: no journal at" in done.stderr
    assert done.stdout == "" and not where.parent.exists()


def test_a_reader_opened_beside_a_writer_leaves_the_writers_locks(tmp_path: Path) -> None:
    """Closing any descriptor of a SQLite file drops every POSIX lock of the process on it.
    The reader's header read did that to an open writer of the same process: another
    process then took itself for the last connection, deleted the -wal and -shm, and the
    writer's later commits went to a deleted file that no other process saw (found by a
    review)."""
    url = f"sqlite:///{tmp_path / 'journal.sqlite3'}"
    event = NewEvent("operation.received", "2026-11-30T09:00:00.000000Z", {}, {"n": 1})
    with EventStore(url) as writer:
        writer.append(Append("first", 0, [event]))
        EventStore(url, create=False).close()
        other = "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); {}; c.close()"
        database = str(tmp_path / "journal.sqlite3")
        subprocess.run(
            [
                sys.executable,
                "-c",
                other.format("c.execute('SELECT count(*) FROM stored_events').fetchone()"),
                database,
            ],
            check=True,
        )
        assert (tmp_path / "journal.sqlite3-wal").exists()  # the writer is still known
        writer.append(Append("second", 0, [event]))
        seen = subprocess.run(
            [sys.executable, "-c", other.format(
                "print(sorted(r[0] for r in c.execute('SELECT originator_id FROM stored_events')))"
            ), database],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        assert seen.stdout.strip() == "['first', 'second']"  # committed means visible
