"""Shared checks of projection tests: table rows, and a projection rebuilt from an Observed
JSONL export alone next to the live one (OL-11)."""

from __future__ import annotations

import io
from typing import Any

from blackops import Application
from domain.events import RecordedEvent
from journal.store import EventStore
from projections.catalog import SHIPPED
from projections.framework import Projection, ProjectionRunner
from replay.export import export_journal
from replay.replayer import replay


def rows(runner: ProjectionRunner, table: str) -> list[tuple[Any, ...]]:
    return sorted(runner.query(f"SELECT * FROM {{p}}{table}"))


def live_and_rebuilt_from_jsonl(
    app: Application, projection: Projection
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The live projection's rows, and the rows of the same projection folded from an
    export of ``app``'s journal into a private store."""
    out = io.BytesIO()
    export_journal(app.store, out)
    table = "blackops_" + projection.name
    shipped = next(key for key, kind in SHIPPED.items() if isinstance(projection, kind))
    live_runner = app.projections.runner(shipped)
    live_runner.catch_up()
    fresh = ProjectionRunner(EventStore("memory://"), projection)
    batch: list[RecordedEvent] = []
    replay(out.getvalue().splitlines(keepends=True), batch.append)
    with fresh._transaction() as sql:
        fresh.projection.apply(sql, batch)
    return rows(live_runner, table), rows(fresh, table)
