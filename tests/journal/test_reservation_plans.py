"""A reservation reads a few rows however many are due, and locks only what it takes
(PostgreSQL, decisions F161).

The reservation functions (``blackops_reserve_v1``, and ``blackops_reserve_streams_v1``
for Deferred operations and ``blackops_reserve_tails_v2`` for workflow instances, which
call it) are run under ``auto_explain`` with ``log_analyze``, planned generically as a
worker's session plans them, with 20,000 rows due in two types and their streams' events
in the journal. No node of their plans may produce more than a few times the rows asked
for. Before, the due rows were selected with ``operation_type = ANY(...) ORDER BY due_at
LIMIT n`` and the events joined: with the statistics of a table that grew faster than
autovacuum looked at it, the server gathered and sorted every due row and hashed the whole
events table at every claim (11 ms at 20,000 due operations, where the reservation now
takes under 1). A copy of the function without the per-type limit is seen reading every
due row, so the bound can fail.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from conftest import postgres_schema_url  # type: ignore[import-not-found, unused-ignore]
from server_plans import report_plans  # type: ignore[import-not-found, unused-ignore]

from blackops import Application
from journal import lease_sql

pytestmark = pytest.mark.postgres

DUE = 20_000
MOST = 20
#: What a node of the plan may produce: the rows asked for, per type and in all, and the
#: events of the streams reserved (one each here).
BOUND = 4 * MOST
_ROWS = re.compile(r"actual time=[0-9.]+\.\.[0-9.]+ rows=([0-9]+)")


@pytest.fixture
def url() -> Iterator[str]:
    yield from postgres_schema_url()


def _journal(url: str) -> tuple[Application, str]:
    """A journal with ``DUE`` due rows of two types, each with one event in its stream."""
    app, schema = Application(url), url.split("schema=")[1]
    assert app.store.work_rows() == []  # opened: the tables and the functions are there
    with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {schema}.blackops_due_work SELECT 'op-' || g, "
            "CASE WHEN g % 2 = 0 THEN 'a' ELSE 'b' END, 't', g, 0, NULL "
            f"FROM generate_series(1, {DUE}) AS g"
        )
        conn.execute(
            f"INSERT INTO {schema}.blackops_events (originator_id, originator_version, topic, "
            "state) SELECT 'op-' || g, 1, 'operation.received', "
            """convert_to('{"at":"x","context":{},"data":{}}', 'UTF8') """
            f"FROM generate_series(1, {DUE}) AS g"
        )
    return app, schema


def _report_plans(conn: psycopg.Connection[Any], plans: list[str]) -> None:
    """Every statement ``conn`` runs from now on reports its plan, as run, into ``plans``."""
    report_plans(conn, analyze=True)
    conn.add_notice_handler(lambda d: plans.append(d.message_primary or ""))


def _explained(url: str, call: str, arguments: tuple[Any, ...], analyze: bool) -> list[str]:
    """The plans of every statement ``call`` ran (rolled back), as the server ran them."""
    plans: list[str] = []
    schema = url.split("schema=")[1]
    with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
        if analyze:  # fresh statistics; otherwise those of a table just filled
            for table in ("blackops_events", "blackops_due_work"):
                conn.execute(f"ANALYZE {schema}.{table}")
        conn.execute("SET plan_cache_mode = force_generic_plan")
        _report_plans(conn, plans)
        for _ in range(2):  # the second call runs the cached generic plan
            plans.clear()
            with conn.transaction(force_rollback=True):
                conn.execute(call, arguments).fetchall()
    return plans


def _most_rows(plans: list[str]) -> int:
    return max(int(rows) for plan in plans for rows in _ROWS.findall(plan))


def _calls(app: Application) -> dict[str, str]:
    recorder: Any = app.store._recorder
    return {
        "ids": recorder._reserve_ids,
        "streams": recorder._reserve_streams,
        "tails": recorder._reserve_tails,
    }


@pytest.mark.parametrize("analyze", [False, True], ids=["stale", "analyzed"])
@pytest.mark.parametrize("function", ["ids", "streams", "tails"])
def test_a_reservation_reads_a_few_rows_of_a_long_backlog(
    url: str, function: str, analyze: bool
) -> None:
    app, _ = _journal(url)
    try:
        now = DUE + 1
        arguments = (10**15, "w", now, ["a", "b"], MOST)
        plans = _explained(url, _calls(app)[function], arguments, analyze)
        assert [p for p in plans if "blackops_due_work" in p], plans
        assert _most_rows(plans) <= BOUND, plans
        assert not [p for p in plans if "Seq Scan on blackops_events" in p], plans
    finally:
        app.close()


def test_the_earliest_due_rows_of_all_types_are_reserved(url: str) -> None:
    """The per-type ranges give what one ``ORDER BY due_at`` over every type gives."""
    app, schema = _journal(url)
    try:
        reserved = app.store.reserve_due(DUE + 1, 10**15, "w", ["b", "a"], 5)
        assert sorted(reserved, key=lambda r: int(r[3:])) == [f"op-{n}" for n in range(1, 6)]
        streams = app.store.reserve_due_streams(DUE + 1, 10**15, "w", ["a", "b"], 3)
        assert sorted(streams, key=lambda r: int(r[3:])) == [f"op-{n}" for n in range(6, 9)]
        with psycopg.connect(url.split("?")[0]) as conn:
            held = conn.execute(
                f"SELECT count(*) FROM {schema}.blackops_due_work WHERE worker = 'w'"
            ).fetchone()
        assert held == (8,)
    finally:
        app.close()


def test_without_the_per_type_limit_the_bound_is_exceeded(url: str) -> None:
    """The harness can fail: the same function without the per-type LIMIT reads every due
    row of each type."""
    app, _ = _journal(url)
    try:
        recorder: Any = app.store._recorder
        statement = recorder.functions[lease_sql.RESERVE_IDS]
        limited = "ORDER BY d.due_at LIMIT need) AS c"
        assert limited in statement
        probe = f"{lease_sql.RESERVE_IDS}_unlimited"
        with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
            conn.execute(
                statement.replace(limited, "ORDER BY d.due_at) AS c").replace(
                    f'"{lease_sql.RESERVE_IDS}"(', f'"{probe}"('
                )
            )
        call = recorder._reserve_ids.replace(f'"{lease_sql.RESERVE_IDS}"', f'"{probe}"')
        plans = _explained(url, call, (10**15, "w", DUE + 1, ["a", "b"], MOST), False)
        assert _most_rows([p for p in plans if "blackops_due_work" in p]) >= DUE // 2
    finally:
        app.close()


def _hundred_due(url: str, kinds: int) -> tuple[Application, str, list[str]]:
    """A journal whose due-work index holds op-1..op-100, due at 1..100, in ``kinds``
    types (no events: only the reservation is looked at)."""
    app, schema = Application(url), url.split("schema=")[1]
    assert app.store.work_rows() == []
    with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {schema}.blackops_due_work SELECT 'op-' || g, "
            f"'t' || (g % {kinds}), 't', g, 0, NULL FROM generate_series(1, 100) AS g"
        )
    return app, schema, [f"t{n}" for n in range(kinds)]


def _numbered(ids: list[str]) -> list[str]:
    return sorted(ids, key=lambda r: int(r[3:]))


def _ops(first: int, last: int) -> list[str]:
    return [f"op-{n}" for n in range(first, last + 1)]


def _free(url: str, schema: str) -> int:
    """Due rows no transaction holds a lock on."""
    with psycopg.connect(url.split("?")[0]) as conn:
        return len(
            conn.execute(
                f"SELECT 1 FROM {schema}.blackops_due_work FOR UPDATE SKIP LOCKED"
            ).fetchall()
        )


@pytest.mark.parametrize("kinds", [1, 10])
def test_a_reservation_looks_past_many_rows_held_elsewhere_and_locks_only_what_it_takes(
    url: str, kinds: int
) -> None:
    """Forty earliest rows locked by another transaction (more than the first look's
    candidates): the reservation still takes the next free ones, as many as asked, and
    while its transaction is open it holds locks on those alone."""
    app, schema, types = _hundred_due(url, kinds)
    call: str = app.store._recorder._reserve_ids  # type: ignore[attr-defined]
    try:
        with psycopg.connect(url.split("?")[0]) as other, psycopg.connect(url.split("?")[0]) as a:
            other.execute(
                f"SELECT 1 FROM {schema}.blackops_due_work WHERE due_at <= 40 FOR UPDATE"
            ).fetchall()
            [[held]] = a.execute(call, (10**15, "a", 101, types, 5)).fetchall()
            assert _numbered(held) == _ops(41, 45)
            assert _free(url, schema) == 100 - 40 - 5
            a.commit()
            taken = app.store.reserve_due(101, 10**15, "b", types, 5)
            assert _numbered(taken) == _ops(46, 50)
            streams = app.store.reserve_due_streams(101, 10**15, "c", types, 5)
            assert streams == {}  # their streams have no events; the rows are held all the same
            other.rollback()
        with psycopg.connect(url.split("?")[0]) as conn:
            workers = conn.execute(
                f"SELECT worker, count(*) FROM {schema}.blackops_due_work "
                "WHERE worker IS NOT NULL GROUP BY worker ORDER BY worker"
            ).fetchall()
        assert workers == [("a", 5), ("b", 5), ("c", 5)]
    finally:
        app.close()


@pytest.mark.parametrize("kinds", [1, 10])
def test_a_reservation_beside_another_takes_the_next_earliest_free_rows(
    url: str, kinds: int
) -> None:
    """While one reservation's transaction is open, holding the 5 earliest rows, another
    takes the next 5: the first locks only the rows it took (not each type's earliest),
    and the second looks past the rows it finds locked."""
    app, schema, types = _hundred_due(url, kinds)
    call: str = app.store._recorder._reserve_ids  # type: ignore[attr-defined]
    try:
        with psycopg.connect(url.split("?")[0]) as first:
            [[held]] = first.execute(call, (10**15, "a", 101, types, 5)).fetchall()
            assert _numbered(held) == _ops(1, 5)
            assert _free(url, schema) == 95
            assert _numbered(app.store.reserve_due(101, 10**15, "b", types, 5)) == _ops(6, 10)
            first.commit()
        assert _numbered(app.store.reserve_due(101, 10**15, "c", types, 5)) == _ops(11, 15)
    finally:
        app.close()


@pytest.mark.parametrize("function", ["ids", "streams", "tails"])
def test_plans_made_while_little_was_due_stay_bounded_as_the_backlog_grows(
    url: str, function: str
) -> None:
    """A session keeps the plans it made for a function's statements: made while a few
    rows were due, they must not range over every due row once thousands are (seen: the
    lock by key planned as a range of the due_at index, 3-5 ms a reservation after 10 s of
    steady load)."""
    app, schema = Application(url), url.split("schema=")[1]
    try:
        assert app.store.work_rows() == []
        call = _calls(app)[function]
        plans: list[str] = []
        with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
            conn.execute("ANALYZE " + f"{schema}.blackops_due_work")
            conn.execute(
                f"INSERT INTO {schema}.blackops_due_work SELECT 'early-' || g, 'a', 't', g, 0, "
                "NULL FROM generate_series(1, 30) AS g"
            )
            for _ in range(8):  # past the custom plans: the session's generic plans
                with conn.transaction(force_rollback=True):
                    conn.execute(call, (10**15, "w", 100, ["a", "b"], MOST)).fetchall()
            with psycopg.connect(url.split("?")[0], autocommit=True) as other:
                other.execute(
                    f"INSERT INTO {schema}.blackops_due_work SELECT 'op-' || g, "
                    "CASE WHEN g % 2 = 0 THEN 'a' ELSE 'b' END, 't', 100 + g, 0, NULL "
                    f"FROM generate_series(1, {DUE}) AS g"
                )
            _report_plans(conn, plans)
            with conn.transaction(force_rollback=True):
                conn.execute(call, (10**15, "w", DUE + 101, ["a", "b"], MOST)).fetchall()
        assert [p for p in plans if "blackops_due_work" in p], plans
        assert _most_rows(plans) <= BOUND, plans
    finally:
        app.close()
