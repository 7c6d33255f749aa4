"""The retention index (journal/retention_index.py) on memory, SQLite and PostgreSQL.

Kept by the recorders in the same transaction as the events: a hold marks its row, a
release clears it, an outcome purge and an operation purge settle it, and a rebuild
from position 0 gives exactly the rows kept live. ``purge`` reads only the rows due.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from blackops import Application, ExecutionContext
from blackops.testing import FakeClock
from domain.retention import Retention
from journal.retention_index import RetentionRow
from journal.store import EventStore
from journal.work_index import micros

DAY = 86_400


@pytest.fixture
def app(any_store_url: str, clock: FakeClock) -> Iterator[Application]:
    app = Application(any_store_url, clock=clock, retention=Retention(journal_seconds=30 * DAY))

    @app.operation("order.place", retention=Retention(journal_seconds=10 * DAY,
                                                      outcome_seconds=2 * DAY))  # fmt: skip
    def place(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        return {"order": params["n"]}

    @app.operation("mail.send")
    def send(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        return None

    try:
        yield app
    finally:
        app.close()


def row(store: EventStore, operation_id: str) -> RetentionRow | None:
    return next((r for r in store.retention_rows() if r.operation_id == operation_id), None)


def rebuilt_equals_live(store: EventStore) -> list[RetentionRow]:
    live = store.retention_rows()
    store.rebuild_retention_index()
    assert store.retention_rows() == live
    return live


def test_a_terminal_operation_has_a_row_found_only_once_its_retention_ended(
    app: Application, clock: FakeClock
) -> None:
    operation_id = app.submit("order.place", {"n": 1}, actor="a", tenant="t")
    found = row(app.store, operation_id)
    assert found is not None and found.terminal_at is None  # accepted, not yet terminal
    asyncio.run(app.work_until_idle())
    found = row(app.store, operation_id)
    assert found is not None and found.operation_type == "order.place"
    assert found.terminal_at is not None and found.completed_at == found.terminal_at
    assert found.outcome and not found.held and not found.purged and not found.pending
    terminal = micros(found.terminal_at)
    assert app.store.retention_due("order.place", terminal - 1, None) == []
    assert app.store.retention_due("order.place", terminal, None) == [found]
    assert app.store.retention_due("order.place", None, terminal) == [found]
    assert app.store.retention_due("mail.send", terminal, terminal) == []
    assert app.store.retention_types() == ["order.place"]
    rebuilt_equals_live(app.store)


def test_a_hold_marks_the_row_a_release_clears_it_and_rebuild_equals_live(
    app: Application, clock: FakeClock
) -> None:
    operation_id = app.run("mail.send", {}, actor="a", tenant="t").operation_id
    app.hold(operation_id, reason="litigation", actor="legal")
    held = row(app.store, operation_id)
    assert held is not None and held.held
    assert rebuilt_equals_live(app.store) == app.store.retention_rows()
    clock.advance(31 * DAY)
    assert app.purge(actor="janitor", dry_run=True).held == [operation_id]
    app.release(operation_id, reason="case closed", actor={"id": "root", "kind": "admin"})
    released = row(app.store, operation_id)
    assert released is not None and not released.held
    rebuilt_equals_live(app.store)
    assert [i.operation_id for i in app.purge(actor="janitor", dry_run=True).items] == [
        operation_id
    ]


def test_purges_settle_the_rows_an_outcome_first_then_the_whole_operation(
    app: Application, clock: FakeClock
) -> None:
    operation_id = app.submit("order.place", {"n": 1}, actor="a", tenant="t")
    asyncio.run(app.work_until_idle())
    clock.advance(2 * DAY)
    assert [i.what for i in app.purge(actor="janitor").items] == ["outcome"]
    after_outcome = row(app.store, operation_id)
    assert after_outcome is not None
    assert not after_outcome.outcome and not after_outcome.pending and not after_outcome.purged
    assert app.store.retention_pending() == []
    rebuilt_equals_live(app.store)
    clock.advance(8 * DAY)
    assert [i.what for i in app.purge(actor="janitor").items] == ["operation"]
    assert row(app.store, operation_id) is None  # purged and settled: no row at all
    assert app.store.retention_types() == []
    assert rebuilt_equals_live(app.store) == []


def test_a_purge_cut_short_leaves_a_pending_row_that_the_next_purge_finishes(
    app: Application, clock: FakeClock
) -> None:
    operation_id = app.run("mail.send", {}, actor="a", tenant="t").operation_id
    clock.advance(31 * DAY)
    store = app.store
    deleted: list[str] = []

    def crash_before_the_deletion(stream: str, upto_version: int) -> int:
        deleted.append(stream)
        raise RuntimeError("killed between the tombstone and the deletion")

    store.delete_stream_events = crash_before_the_deletion  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        app.purge(actor="janitor")
    del store.delete_stream_events
    pending = row(store, operation_id)
    assert deleted == [operation_id] and pending is not None
    assert pending.purged and pending.pending
    assert store.retention_pending() == [pending]
    assert rebuilt_equals_live(store) == [pending]  # the history is still there
    app.purge(actor="janitor")
    assert row(store, operation_id) is None
    assert [e.type for e in store.read_stream(operation_id)] == ["operation.purged"]
    assert rebuilt_equals_live(store) == []


def test_an_existing_journal_without_the_index_gets_it_when_opened(
    store_url: str, clock: FakeClock, tmp_path: Path
) -> None:
    app = Application(store_url, clock=clock, retention=Retention(journal_seconds=DAY))
    app.operation("mail.send")(lambda ctx, params: None)
    operation_id = app.run("mail.send", {}, actor="a", tenant="t").operation_id
    live = app.store.retention_rows()
    tables = app.store._recorder.retention  # type: ignore[attr-defined]
    with app.store.transaction() as cursor:  # as a journal written before the index
        cursor.execute(f"DELETE FROM {tables.table}")
        cursor.execute(f"DELETE FROM {tables.positions} WHERE name = 'retention'")
    assert app.store.retention_rows() == []
    app.close()
    with EventStore(store_url) as reopened:
        assert reopened.retention_rows() == live
        assert [r.operation_id for r in live] == [operation_id]
