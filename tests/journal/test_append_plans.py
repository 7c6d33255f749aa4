"""The PostgreSQL append's checks stay index lookups when planned generically (decisions F94).

A prepared statement is planned once for any argument after a few calls. Planned that way,
``NOT EXISTS (... originator_id = ANY($1))`` expected to meet a row soon and scanned the
whole events table: 34 ms per submit at 200,000 events, seconds at 2,000,000.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from conftest import postgres_schema_url  # type: ignore[import-not-found, unused-ignore]

from blackops import Application
from domain.events import NewEvent
from journal.store import Append


@pytest.fixture
def url() -> Iterator[str]:
    yield from postgres_schema_url()


def test_the_checks_of_an_append_never_scan_the_events_table(url: str) -> None:
    app = Application(url)
    try:
        event = NewEvent("operation.received", "2026-01-01T00:00:00.000000Z", {}, {"n": 1})
        # Long streams (a workflow's history): many rows per stream, so the planner expects
        # an EXISTS on a stream to meet a row soon, whichever stream it is asked about.
        for n in range(20):
            app.store.append(Append(f"s-{n}", 0, [event] * 1_000))
        recorder = app.store._recorder  # the statements the append sends
        schema = url.split("schema=")[1]
        arguments = {
            (0, True): (["new"],),
            (1, False): ("s-1", 1),
            (1, True): ("s-1", 1, ["new"]),
            (2, False): (["s-1", "s-2"], [1, 1], 2),
            (2, True): (["s-1", "s-2"], [1, 1], 2, ["new"]),
        }
        with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
            conn.execute(f"ANALYZE {schema}.blackops_events")
            conn.execute("SET plan_cache_mode = force_generic_plan")
            for key, args in arguments.items():
                statement = recorder._checks[key].as_string(conn)  # type: ignore[attr-defined]
                conn.execute(f"PREPARE checks_{key[0]}_{int(key[1])} AS " + _numbered(statement))
                plan = "\n".join(
                    row[0]
                    for row in conn.execute(
                        f"EXPLAIN EXECUTE checks_{key[0]}_{int(key[1])} "
                        f"({', '.join(_literal(a) for a in args)})"
                    )
                )
                assert "Seq Scan on blackops_events" not in plan, (key, plan)
    finally:
        app.close()


def _numbered(statement: str) -> str:
    """psycopg's ``%s`` placeholders as PREPARE's ``$1``, ``$2``, ..."""
    parts = statement.split("%s")
    return "".join(f"{part}${n}" for n, part in enumerate(parts[:-1], 1)) + parts[-1]


def _literal(value: object) -> str:
    if isinstance(value, list):
        kind = "bigint" if all(isinstance(v, int) for v in value) else "text"
        return "ARRAY[" + ", ".join(_literal(v) for v in value) + f"]::{kind}[]"
    return str(value) if isinstance(value, int) else f"'{value}'"
