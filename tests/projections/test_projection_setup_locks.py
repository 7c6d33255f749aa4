"""Opening a projection (a runner's set-up, every new process's first query) while another
process catches it up (PostgreSQL; found by a defect hunt). The set-up ran every
``CREATE INDEX IF NOT EXISTS``, which takes a SHARE lock on the table even when the index
exists, before its ``INSERT`` of the position row, which a catch-up locks first: the two
deadlocked, and the set-up's loss read "the journal store cannot be reached"
(``backend_unavailable``); fresh ``blackops op list`` processes beside a writer failed 2 in
12, and a first query waited 0.2 to 9 s for the catch-ups in flight. A set-up whose tables
are made now only reads the catalog; one with work to do takes the position row first, as
catch-ups and rebuilds do; and a deadlock lost all the same is tried again."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from cli_processes import BLACKOPS, ROOT
from conftest import postgres_schema_url  # type: ignore[import-not-found, unused-ignore]

from blackops import Application
from domain.errors import BackendUnavailable
from journal.store import EventStore
from projections.framework import ProjectionRunner
from projections.operations import OperationStatus


@pytest.fixture
def caught_up() -> Iterator[tuple[str, str]]:
    """A PostgreSQL store whose operation_status projection is made and caught up, and its
    schema."""
    schema_url = postgres_schema_url()
    url = next(schema_url)
    app = Application(url)
    app.operation("t.ok")(lambda ctx, params: None)
    try:
        for n in range(3):
            app.run("t.ok", {"n": n}, actor="a", tenant="acme")
        assert len(app.list_operations()["items"]) == 3
        yield url, app.store.location.settings["POSTGRES_SCHEMA"]
    finally:
        app.close()
        next(schema_url, None)  # past its yield: the schema is dropped


def catching_up(url: str, schema: str) -> psycopg.Connection[Any]:
    """Another process mid-batch, as ``catch_up`` is: the position row locked first, then a
    row of the projection's table written, not committed."""
    other = psycopg.connect(url.split("?")[0])
    other.execute(
        f"UPDATE {schema}.blackops_projection_positions SET position = position "
        "WHERE name = 'operation_status'"
    )
    return other


def write_row(other: psycopg.Connection[Any], schema: str) -> None:
    other.execute(
        f"INSERT INTO {schema}.blackops_operation_status VALUES "
        "('x', 'acme', 't.ok', 'inline', 'received', 0, '2026', '2026')"
    )


def open_in_thread(url: str) -> tuple[threading.Thread, dict[str, Any]]:
    outcome: dict[str, Any] = {}

    def set_up() -> None:
        with EventStore(url, create=False) as store:
            try:
                outcome["runner"] = ProjectionRunner(store, OperationStatus()).position()
            except Exception as error:  # reported by the test
                outcome["error"] = error

    thread = threading.Thread(target=set_up)
    thread.start()
    return thread, outcome


def open_beside_a_catch_up(url: str, schema: str, wait: float) -> tuple[bool, str, dict[str, Any]]:
    """Open a runner in a thread while another connection holds the catch-up's position
    row; after ``wait`` seconds the catch-up writes its table. Whether the opening was still
    going then, what the write met ("ok" or the deadlock), and how the opening ended."""
    other = catching_up(url, schema)
    try:
        thread, outcome = open_in_thread(url)
        thread.join(wait)
        opening = thread.is_alive()
        write = "ok"
        try:
            write_row(other, schema)
        except psycopg.errors.DeadlockDetected as error:
            write = str(error)
        other.rollback()
        thread.join(30)
    finally:
        other.close()
    return opening, write, outcome


def test_a_projection_opens_while_a_catch_up_holds_it_without_a_deadlock(
    caught_up: tuple[str, str],
) -> None:
    """Made tables: the set-up only reads the catalog, so it is done while the catch-up
    holds the position row, and the catch-up's write goes through (before: the set-up
    locked the table, waited for the row, and the catch-up's write deadlocked with it)."""
    url, schema = caught_up
    opening, write, outcome = open_beside_a_catch_up(url, schema, 10)
    assert write == "ok"
    assert "error" not in outcome, outcome
    assert not opening, "the set-up waited for the catch-up's position row"
    assert outcome["runner"] > 0  # the position the catch-up left: nothing reset


def test_a_set_up_with_work_to_do_waits_for_the_catch_up_without_a_deadlock(
    caught_up: tuple[str, str],
) -> None:
    """An index missing (a migration to run): the set-up takes the position row before the
    tables, as the catch-up did, so it waits for the catch-up, which goes on writing; then
    it makes the index (before: its SHARE lock on the table, then a wait for the row, while
    the catch-up waited for the table: a deadlock, one of them refused)."""
    url, schema = caught_up
    with psycopg.connect(url.split("?")[0], autocommit=True) as admin:
        admin.execute(f"DROP INDEX {schema}.blackops_operation_status_by_type")
    # Past deadlock_timeout (1 s): a cycle would be found by then.
    waiting, write, outcome = open_beside_a_catch_up(url, schema, 1.5)
    assert write == "ok"
    assert waiting, "the set-up did not wait for the position row"
    assert "error" not in outcome, outcome
    with psycopg.connect(url.split("?")[0]) as admin:
        found = admin.execute(
            "SELECT to_regclass(%s)", (f"{schema}.blackops_operation_status_by_type",)
        ).fetchone()
    assert found is not None and found[0] is not None


def test_a_set_up_that_loses_a_deadlock_is_tried_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A deadlock is not an unreachable store: the set-up chosen as its victim (SQLSTATE
    40P01, rolled back) runs again; any other failure is reported at once."""
    schema_url = postgres_schema_url()
    url = next(schema_url)
    original = ProjectionRunner._setup_transaction
    failures = iter([BackendUnavailable("the journal store cannot be reached", "deadlock")])

    def losing_once(self: ProjectionRunner) -> Any:
        failure = next(failures, None)
        if failure is not None:
            try:
                raise psycopg.errors.DeadlockDetected("deadlock detected")
            except psycopg.errors.DeadlockDetected as cause:
                raise failure from cause
        return original(self)

    monkeypatch.setattr(ProjectionRunner, "_setup_transaction", losing_once)
    try:
        with EventStore(url) as store:
            assert ProjectionRunner(store, OperationStatus()).position() == 0
            unreachable = iter([BackendUnavailable("the journal store cannot be reached", "")])

            def down(self: ProjectionRunner) -> Any:
                raise next(unreachable)

            monkeypatch.setattr(ProjectionRunner, "_setup_transaction", down)
            monkeypatch.setattr(ProjectionRunner, "_set_up_in", lambda self, sql: False)
            with pytest.raises(BackendUnavailable):
                ProjectionRunner(store, OperationStatus())
    finally:
        next(schema_url, None)


def test_fresh_processes_list_while_a_catch_up_holds_the_projection(
    caught_up: tuple[str, str],
) -> None:
    """Four ``blackops op list --json`` processes started at once, while another process's
    catch-up holds the projection mid-batch: each answers at once, exit 0 (before: each
    set-up waited for the catch-up's locks)."""
    url, schema = caught_up
    other = catching_up(url, schema)
    try:
        write_row(other, schema)
        listing = [*BLACKOPS, "op", "list", "--store", url, "--limit", "5", "--json"]
        processes = [
            subprocess.Popen(listing, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for _ in range(4)
        ]
        answers = []
        try:
            for process in processes:
                out, err = process.communicate(timeout=30)
                answers.append((process.returncode, out, err))
        finally:
            for process in processes:
                if process.poll() is None:
                    process.kill()
                    process.wait()
    finally:
        other.rollback()
        other.close()
    for code, out, err in answers:
        assert code == 0, err.decode()
        assert len(json.loads(out)["items"]) == 3
