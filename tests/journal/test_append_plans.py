"""The PostgreSQL append's checks stay index lookups when planned generically (decisions F94).

A prepared statement is planned once for any argument after a few calls, and so is each
statement of a PL/pgSQL function (its plans are cached per session). Planned that way,
``NOT EXISTS (... originator_id = ANY($1))`` expected to meet a row soon and scanned the
whole events table: 34 ms per submit at 200,000 events, seconds at 2,000,000.

The append function's statements are planned as the server runs them: ``auto_explain``
reports every nested statement's plan to the client, under ``plan_cache_mode =
force_generic_plan``. A copy of the function whose fresh-stream check is NOT EXISTS shows
that this would see the scan.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from conftest import postgres_schema_url  # type: ignore[import-not-found, unused-ignore]
from server_plans import report_plans  # type: ignore[import-not-found, unused-ignore]

from blackops import Application
from domain.events import NewEvent
from journal import append_sql
from journal.store import Append
from journal.work_index import RowChange

pytestmark = pytest.mark.postgres

SCAN = "Seq Scan on blackops_events"


@pytest.fixture
def url() -> Iterator[str]:
    yield from postgres_schema_url()


def _long_streams(url: str) -> Any:
    """A journal of long streams (a workflow's history): many rows per stream, so the
    planner expects an EXISTS on a stream to meet a row soon, whichever stream it is."""
    app = Application(url)
    event = NewEvent("operation.received", "2026-01-01T00:00:00.000000Z", {}, {"n": 1})
    for n in range(20):
        app.store.append(Append(f"s-{n}", 0, [event] * 1_000))
    return app


#: (predecessors, streams started) -> the function's check arguments.
CASES: dict[tuple[int, bool], tuple[Any, Any, Any]] = {
    (0, True): (None, None, ["new"]),
    (1, False): (["s-1"], [1000], None),
    (1, True): (["s-1"], [1000], ["new"]),
    (2, False): (["s-1", "s-2"], [1000, 1000], None),
    (2, True): (["s-1", "s-2"], [1000, 1000], ["new"]),
}


def _plans(
    conn: psycopg.Connection[Any],
    schema: str,
    function: str,
    needed: Any,
    fresh: Any,
    indexes: tuple[str | None, str | None] = (None, None),
) -> list[str]:
    """The plans of every statement ``function`` ran for an append with these checks and
    these due-work and retention changes (rolled back: the journal is left as it was)."""
    plans: list[str] = []

    def notice(diagnostic: psycopg.errors.Diagnostic) -> None:
        if diagnostic.message_primary and "plan:" in diagnostic.message_primary:
            plans.append(diagnostic.message_primary)

    streams = [*(needed[0] or []), *(fresh or [])]
    versions = [*((v + 1 for v in needed[1]) if needed[0] else []), *([1] * len(fresh or []))]
    conn.add_notice_handler(notice)
    try:
        with conn.transaction(force_rollback=True):
            conn.execute(
                append_sql.call_statement(schema).replace(f'"{append_sql.NAME}"', f'"{function}"'),
                (
                    streams,
                    versions,
                    ["test.happened"] * len(streams),
                    [b'{"at":"x","context":{},"data":{}}'] * len(streams),
                    *needed,
                    fresh,
                    None,
                    "5s",
                    *indexes,
                ),
            )
    finally:
        conn.remove_notice_handler(notice)
    return plans


def _explaining(url: str) -> psycopg.Connection[Any]:
    base, schema = url.split("?")[0], url.split("schema=")[1]
    conn = psycopg.connect(base, autocommit=True)
    report_plans(conn)
    conn.execute("SET plan_cache_mode = force_generic_plan")
    for table in ("blackops_events", "blackops_due_work", "blackops_retention"):
        conn.execute(f"ANALYZE {schema}.{table}")
    return conn


def test_the_checks_of_an_append_never_scan_the_events_table(url: str) -> None:
    app, schema = _long_streams(url), url.split("schema=")[1]
    try:
        with _explaining(url) as conn:
            for key, (*needed, fresh) in CASES.items():
                plans = _plans(conn, schema, append_sql.NAME, needed, fresh)
                checks = [p for p in plans if "needed_streams" in p or "ANY(fresh)" in p]
                assert len(checks) == (key[0] > 0) + key[1], (key, plans)  # all seen
                assert not [p for p in plans if SCAN in p], (key, plans)
    finally:
        app.close()


def test_a_not_exists_check_would_be_seen_scanning(url: str) -> None:
    """The harness above can fail: the same function with F94's rejected form scans."""
    app, schema = _long_streams(url), url.split("schema=")[1]
    try:
        recorder = app.store._recorder
        events = append_sql._table(schema, "blackops_events").as_string()
        count = append_sql.FRESH.replace("{events}", events)
        rejected = f"NOT EXISTS (SELECT 1 FROM {events} WHERE originator_id = ANY(fresh))"
        statement = append_sql.create_statement(recorder.append_tables)
        assert count in statement
        probe = f"{append_sql.NAME}_not_exists"
        with _explaining(url) as conn:
            conn.execute(
                statement.replace(count, rejected).replace(f'"{append_sql.NAME}"(', f'"{probe}"(')
            )
            plans = _plans(conn, schema, probe, (None, None), ["new"])
            assert [p for p in plans if SCAN in p], plans
    finally:
        app.close()


def test_the_index_rows_of_an_append_are_reached_by_their_keys(url: str) -> None:
    """Each due-work and retention row an append deletes or updates, and each lease a
    renewal extends, is found by its key: joined with the changes' document or the leases'
    arrays instead, planned generically, the planner scanned the tables (or a range of the
    due_at index) at 2,000 rows on every call."""
    app, schema = Application(url), url.split("schema=")[1]
    try:
        assert app.store.work_rows() == []  # opened: the tables and the function are there
        with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
            for table, columns in (
                ("blackops_due_work", "'x' || g, 't', 'a', 10 * g, 0, 'w'"),
                ("blackops_retention", "'x' || g, 't', NULL, NULL, NULL, NULL, 0, 0, 0, 0"),
            ):
                conn.execute(
                    f"INSERT INTO {schema}.{table} "
                    f"SELECT {columns} FROM generate_series(1, 2000) AS g"
                )
        ended = [
            RowChange("x1", delete=True),
            RowChange("x3", create=("t", "a"), due_at=5, fencing_token=0),
        ]
        moved = RowChange("x2", due_at=9, fencing_token=2, worker="w", set_worker=True)
        work = append_sql.work_rows([*ended, moved])
        kept = append_sql.retention_rows({"x1": {"held": True}, "x4": {"operation_type": "t"}})
        with _explaining(url) as conn:
            plans = _plans(conn, schema, append_sql.NAME, (None, None), ["new"], (work, kept))
            renewal: list[str] = []
            conn.add_notice_handler(lambda d: renewal.append(d.message_primary or ""))
            renew = app.store._recorder._renew_leases  # type: ignore[attr-defined]
            with conn.transaction(force_rollback=True):
                conn.execute(renew, (["x5", "x6"], [0, 0], "w", 0, 10**16))
        assert [p for p in renewal if "Index Scan using blackops_due_work_pkey" in p], renewal
        assert not [p for p in renewal if "blackops_due_work_due_at" in p or "Seq Scan" in p]
        for table in ("blackops_due_work", "blackops_retention"):
            touched = [p for p in plans if f'{table}" SET' in p or "DELETE" in p]
            assert touched, plans
            assert not [p for p in plans if f"Seq Scan on {table}" in p], plans
    finally:
        app.close()
