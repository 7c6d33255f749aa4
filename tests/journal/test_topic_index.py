"""Reads by event type (``EventStore.read_topics``) through the topic index
(journal/topic_sql.py), on SQLite and PostgreSQL: on a journal with one of nearly
everything in it, any set of topics read from any position, in any page size, is exactly
what a scan of the whole journal filtered by type gives; a journal opened without the
index gets it; and the planner answers from the index."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import STORES, _private_store
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich_journal import fill

from blackops import Application
from blackops.testing import FakeClock
from domain.events import RecordedEvent
from journal import topic_sql
from journal.store import EventStore


@pytest.fixture(scope="module", params=STORES)
def rich(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A rich journal's store URL (built once per store for this module)."""
    # The loop ends after the one URL: the generator then drops what it made.
    for url in _private_store(str(request.param), tmp_path_factory.mktemp("topics")):
        clock = FakeClock(datetime(2026, 11, 30, 9, 0, 0, tzinfo=UTC))
        with Application(url, clock=clock) as app:
            fill(app, clock)
        yield url


def scan(store: EventStore, topics: set[str], after: int) -> list[RecordedEvent]:
    return [e for e in store.iter_after(after, page=97) if e.type in topics]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_topics_from_any_position_in_any_page_size_equal_a_scan(
    rich: str, data: st.DataObject
) -> None:
    with EventStore(rich) as store:
        everything = list(store.iter_after(0))
        known = sorted({e.type for e in everything})
        topics = data.draw(
            st.lists(st.sampled_from([*known, "no.such.topic"]), min_size=1, max_size=6),
            label="topics",
        )
        after = data.draw(st.integers(0, everything[-1].position + 1), label="after")
        page = data.draw(st.integers(1, 40), label="page")
        got = store.read_topics(topics, page=page, after=after)
        assert got == scan(store, set(topics), after)
        positions = [e.position for e in got]
        assert positions == sorted(set(positions))  # in order, each event once


def test_every_topic_alone_and_all_together_equal_a_scan(rich: str) -> None:
    with EventStore(rich) as store:
        known = sorted({e.type for e in store.iter_after(0)})
        assert len(known) > 40  # the rich journal really has one of nearly everything
        for topic in known:
            assert store.read_topics([topic], page=3) == scan(store, {topic}, 0), topic
        assert store.read_topics(known, page=7) == list(store.iter_after(0))
        assert store.read_topics([]) == []


def _has_index(store: EventStore) -> bool:
    with store.transaction() as cursor:
        if store.location.kind == "sqlite":
            cursor.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?", (topic_sql.INDEX,)
            )
        else:
            cursor.execute(
                "SELECT 1 FROM pg_indexes WHERE schemaname = %s AND indexname = %s",
                (_schema(store), topic_sql.INDEX),
            )
        return bool(cursor.fetchall())


def test_a_journal_written_without_the_index_gets_it_when_opened(
    store_url: str, clock: FakeClock, tmp_path: Path
) -> None:
    app = Application(store_url, clock=clock)
    app.operation("mail.send")(lambda ctx, params: None)
    for n in range(5):
        app.run("mail.send", {"n": n}, actor="a", tenant="t")
    app.access.create_space("globex", app.access_context("root", "globex"))
    store = app.store
    assert _has_index(store)
    with store.transaction() as cursor:  # as a journal written before the index existed
        schema = "" if store.location.kind == "sqlite" else _schema(store) + "."
        cursor.execute(f"DROP INDEX {schema}{topic_sql.INDEX}")
    assert not _has_index(store)
    app.close()
    with EventStore(store_url) as reopened:
        assert _has_index(reopened)
        assert [e.data["name"] for e in reopened.read_topics(["space.created"])] == ["globex"]
        completed = reopened.read_topics(["operation.completed", "operation.received"])
        assert completed == scan(reopened, {"operation.completed", "operation.received"}, 0)
        assert len(completed) == 10


def test_the_planner_reads_a_topic_from_the_index(rich: str) -> None:
    with EventStore(rich) as store:
        sqlite = store.location.kind == "sqlite"
        table = "stored_events" if sqlite else _pg_table(store)
        statement = topic_sql.select_topics(table, 2, sqlite=sqlite)
        args = topic_sql.parameters(["space.created", "operation.purged"], 0, 10)
        with store.transaction() as cursor:
            if not sqlite:
                cursor.execute(f"ANALYZE {table}")  # real statistics, not the defaults
            cursor.execute(("EXPLAIN QUERY PLAN " if sqlite else "EXPLAIN ") + statement, args)
            plan = " ".join(str(v) for row in cursor.fetchall() for v in _values(row))
    assert plan.count(topic_sql.INDEX) >= 2, plan  # one index range per topic
    assert "Seq Scan" not in plan and "SCAN stored_events" not in plan, plan


def _schema(store: EventStore) -> str:
    return str(store._recorder.datastore.schema)  # type: ignore[attr-defined]


def _pg_table(store: EventStore) -> str:
    return f"{_schema(store)}.{store._recorder.events_table_name}"  # type: ignore[attr-defined]


def _values(row: object) -> tuple[object, ...]:
    return tuple(row.values()) if isinstance(row, dict) else tuple(row)  # type: ignore[arg-type]
