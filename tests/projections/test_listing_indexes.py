"""Every listing is served by an index (issue: the read side): for each filter a listing
takes, SQLite's plan of the very query the projection runs reads an index in the
listing's order and never sorts (no temporary B-tree), so the first page and every later
one cost the same at any journal size. The figures at 20,000 and 2,000,000 events are in
bench/scale.py."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from blackops import Application
from projections.framework import ProjectionRunner

FILTERS: list[dict[str, Any]] = [
    {},
    {"tenant": "acme"},
    {"tenant": "acme", "status": "completed"},
    {"tenant": "acme", "type": "t.echo"},
    {"status": "completed"},
    {"type": "t.echo"},
    {"tenant": "acme", "since": "2026-01-01T00:00:00Z", "until": "2027-01-01T00:00:00Z"},
]


def plans(tmp_path: Path, call: Any) -> list[str]:
    """The query plans of the listing queries ``call`` makes on a SQLite store."""
    path = tmp_path / "j.sqlite3"
    app = Application(f"sqlite:///{path}")
    app.operation("t.echo")(lambda ctx, params: params)
    for n in range(30):
        app.run("t.echo", {"n": n}, actor="a", tenant="acme" if n % 3 else "globex")
    seen: list[tuple[str, tuple[Any, ...]]] = []
    original = ProjectionRunner.query

    def recording(self: ProjectionRunner, text: str, params: Any = ()) -> Any:
        if "ORDER BY created_at" in text:
            seen.append((text.replace("{p}", "").replace("%s", "?"), tuple(params)))
        return original(self, text, params)

    ProjectionRunner.query = recording  # type: ignore[method-assign]
    try:
        call(app)
    finally:
        ProjectionRunner.query = original  # type: ignore[method-assign]
        app.close()
    assert seen, "no listing query was made"
    with sqlite3.connect(path) as db:
        return [
            " | ".join(str(row[-1]) for row in db.execute("EXPLAIN QUERY PLAN " + text, params))
            for text, params in seen
        ]


@pytest.mark.parametrize("filters", FILTERS, ids=lambda f: "+".join(f) or "unfiltered")
def test_every_operation_listing_reads_an_index_without_sorting(
    tmp_path: Path, filters: dict[str, Any]
) -> None:
    def page_one_and_two(app: Application) -> None:
        first = app.list_operations(limit=2, **filters)
        app.list_operations(limit=2, cursor=first["next"], **filters)

    first, later = plans(tmp_path, page_one_and_two)
    for plan in (first, later):
        assert "USING INDEX" in plan or "USING COVERING INDEX" in plan, plan
        assert "TEMP B-TREE" not in plan, plan
    # A later page seeks the index to its cursor rather than scanning from the start.
    assert "created_at,operation_id)>" in later.replace(" ", "") or "created_at>" in later, later


@pytest.mark.parametrize("status", [None, "complete"])
def test_instance_listings_read_an_index_without_sorting(
    tmp_path: Path, status: str | None
) -> None:
    class Quick:
        def __init__(self, env: object) -> None:
            self.env = env

        async def run(self, event: Any, step: Any) -> None:
            return None

    def listing(app: Application) -> None:
        import asyncio

        binding = app.register_workflow(Quick)
        for n in range(3):
            asyncio.run(binding.create(id=f"q-{n}"))
        asyncio.run(app.work_until_idle())
        first = app.list_instances("Quick", status=status, limit=1)
        app.list_instances("Quick", status=status, limit=1, cursor=first["next"])

    for plan in plans(tmp_path, listing):
        assert "USING INDEX" in plan or "USING COVERING INDEX" in plan, plan
        assert "TEMP B-TREE" not in plan, plan
        # The Space is sought in the index, not filtered row by row: another Space's
        # instances of the same uid cost nothing (found by a defect hunt, stop 40).
        assert "ANDspace=?" in plan.replace(" ", ""), plan


def test_the_plan_check_can_fail(tmp_path: Path) -> None:
    """Without an index in its order, SQLite's plan says it sorts: the check sees it."""
    path = tmp_path / "plain.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (a TEXT, b TEXT)")
        plan = " | ".join(
            str(row[-1]) for row in db.execute("EXPLAIN QUERY PLAN SELECT * FROM t ORDER BY a, b")
        )
    assert "TEMP B-TREE" in plan


def test_a_large_catch_up_on_postgresql_leaves_fresh_planner_statistics(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Planned on the empty table's estimates, a later page of a filtered listing was a
    sorted bitmap scan of every matching row; after a catch-up of ``ANALYZE_AFTER``
    events or more the tables carry real statistics (``reltuples`` is -1 until analysed)."""
    from conftest import postgres_schema_url

    from projections import framework

    for url in postgres_schema_url():  # one fresh schema, dropped when the loop ends
        app = Application(url)
        app.operation("t.echo")(lambda ctx, params: params)
        for n in range(4):
            app.run("t.echo", {"n": n}, actor="a", tenant="acme")
        monkeypatch.setattr(framework, "ANALYZE_AFTER", 10**9)
        app.list_operations(limit=1)  # a catch-up below the threshold: not analysed
        assert reltuples(app) == -1
        for n in range(4):
            app.run("t.echo", {"n": n}, actor="a", tenant="acme")
        monkeypatch.setattr(framework, "ANALYZE_AFTER", 8)
        app.list_operations(limit=1)  # the new events: at or above the threshold
        assert reltuples(app) == 8  # every operation, as ANALYZE counted them
        app.close()


def reltuples(app: Application) -> float:
    schema = app.store.settings["POSTGRES_SCHEMA"]
    with app.store.transaction() as cursor:
        cursor.execute(
            "SELECT reltuples FROM pg_class WHERE oid = to_regclass(%s)",
            (f"{schema}.blackops_operation_status",),
        )
        return float(next(iter(cursor.fetchall()[0].values())))


def test_the_deploy_gate_lists_a_workflows_instances_with_its_space(
    app: Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The listing indexes begin (workflow, space): the deploy gate's listing named no Space
    and sorted every instance of the workflow on every page (found by review, stop 40)."""
    from resource_helpers import SPACE, deployed_worker, ready_workflow, work

    from projections.catalog import Projections

    code = deployed_worker(app)
    uid = ready_workflow(app, code.worker)
    work(app)
    asked: list[dict[str, Any]] = []
    listing = Projections.list_instances

    def recorded(self: Projections, workflow: str, **filters: Any) -> dict[str, Any]:
        asked.append({"workflow": workflow, **filters})
        return listing(self, workflow, **filters)

    monkeypatch.setattr(Projections, "list_instances", recorded)
    app.control.check_version(SPACE, code.version)
    assert asked and all(call["space"] == SPACE for call in asked if call["workflow"] == uid)
