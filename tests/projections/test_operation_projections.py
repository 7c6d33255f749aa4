"""Projections (issue 6): tracked positions, exactly-once batches, rebuilds, listing.

On SQLite, PostgreSQL and memory. A rebuilt projection equals the live one; one rebuilt
from an Observed JSONL export equals it too (OL-11); a catch-up killed with SIGKILL in
the middle neither loses nor double-counts anything.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
from cli_processes import BLACKOPS, ROOT
from projection_checks import live_and_rebuilt_from_jsonl, rows

from blackops import Application, ExecutionContext, OperationRejected, Retryable, Supervision
from domain.errors import BlackOpsError
from projections.framework import ProjectionRunner
from projections.operations import OperationCounts, OperationStatus


def populate(app: Application, n: int = 12) -> list[str]:
    @app.operation("t.ok")
    def ok(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        return None

    @app.operation("t.reject")
    def reject(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        raise OperationRejected("validation", "bad", "bad")

    @app.operation("t.retry", supervision=Supervision(max_attempts=3, initial_delay_seconds=60))
    def retry(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        raise Retryable("later")

    ids = []
    for i in range(n):
        kind = ("t.ok", "t.reject", "t.retry")[i % 3]
        tenant = "acme" if i % 2 else "zeta"
        ids.append(app.submit(kind, {"i": i}, actor="a", tenant=tenant))
    ids.append(app.run("t.ok", {}, actor="a", tenant="acme").operation_id)
    asyncio.run(app.work_until_idle())
    return ids


def test_statuses_list_and_filter_with_cursor_pages(any_store_url: str) -> None:
    app = Application(any_store_url)
    try:
        ids = populate(app)
        everything = app.list_operations(limit=1000)["items"]
        assert sorted(i["operationId"] for i in everything) == sorted(ids)
        for item in everything:
            assert item["status"] == app.status(item["operationId"])["status"]
        # Pages of 5 walk the same list, in order, with no repeats.
        walked, cursor = [], None
        while True:
            page = app.list_operations(limit=5, cursor=cursor)
            walked += [i["operationId"] for i in page["items"]]
            cursor = page["next"]
            if cursor is None:
                break
        assert walked == [i["operationId"] for i in everything]
        acme_rejected = app.list_operations(tenant="acme", status="rejected")["items"]
        assert acme_rejected and all(
            i["tenant"] == "acme" and i["status"] == "rejected" for i in acme_rejected
        )
        assert {i["type"] for i in app.list_operations(type="t.retry")["items"]} == {"t.retry"}
        first = everything[0]["createdAt"]
        assert app.list_operations(until=first)["items"] == []
        for bad in ({"status": "finalizing"}, {"limit": 0}, {"cursor": "%%%"}):
            with pytest.raises(BlackOpsError) as refused:
                app.list_operations(**bad)
            assert refused.value.code == "invalid_request", bad
    finally:
        app.close()


def test_counts_are_exact_and_a_rebuild_equals_the_live_projection(any_store_url: str) -> None:
    app = Application(any_store_url)
    try:
        ids = populate(app)
        counts = app.operation_counts()
        total = sum(
            n for per_type in counts.values() for c in per_type.values() for n in c.values()
        )
        assert total == len(ids)
        assert counts["zeta"]["t.reject"]["rejected"] == 2
        assert counts["acme"]["t.retry"]["retry_scheduled"] == 2
        for name in ("operation_status", "operation_counts"):
            runner = app.projections.runner(name)
            table = "blackops_" + name
            runner.catch_up()
            live = rows(runner, table)
            assert runner.status()["lag"] == 0
            runner.rebuild()
            assert rows(runner, table) == live
    finally:
        app.close()


def test_rebuilt_from_an_observed_jsonl_export_equals_live(store_url: str) -> None:
    """OL-11: every shipped projection can be rebuilt from JSONL alone."""
    app = Application(store_url)
    try:
        populate(app)
        for projection in (OperationStatus(), OperationCounts()):
            live, rebuilt = live_and_rebuilt_from_jsonl(app, projection)
            assert rebuilt == live
    finally:
        app.close()


def test_concurrent_runners_apply_each_batch_exactly_once(store_url: str) -> None:
    app = Application(store_url)
    try:
        populate(app, 30)
        first = ProjectionRunner(app.store, OperationCounts(), batch=7)
        second = ProjectionRunner(app.store, OperationCounts(), batch=5)
        import threading

        errors: list[BaseException] = []

        def run(runner: ProjectionRunner) -> None:
            try:
                runner.catch_up()
            except BaseException as error:  # reported below
                errors.append(error)

        threads = [threading.Thread(target=run, args=(r,)) for r in (first, second)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        live = rows(first, "blackops_operation_counts")
        first.rebuild()
        assert rows(first, "blackops_operation_counts") == live
    finally:
        app.close()


def test_a_catch_up_killed_mid_way_loses_nothing_and_counts_nothing_twice(
    store_url: str,
) -> None:
    """SIGKILL a ``projections rebuild`` (one transaction per 3 events) part-way; the next
    catch-up continues from the tracked position and equals a clean rebuild."""
    app = Application(store_url)
    populate(app, 60)
    app.close()
    child = subprocess.Popen(
        [*BLACKOPS, "projections", "rebuild", "operation_counts", "--batch", "3",
         "--store", store_url],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    reopened = Application(store_url)
    try:
        runner = reopened.projections.runner("operation_counts")
        deadline = time.monotonic() + 60
        while runner.position() < 40 and time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.002)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        killed_at = runner.position()
        assert child.returncode == -signal.SIGKILL  # killed, not finished
        assert 0 < killed_at < reopened.store.last_position(), killed_at
        runner.catch_up()
        after_kill = rows(runner, "blackops_operation_counts")
        runner.rebuild()
        assert rows(runner, "blackops_operation_counts") == after_kill
    finally:
        reopened.close()


def test_cli_projections_status_and_rebuild(store_url: str) -> None:
    app = Application(store_url)
    populate(app, 6)
    app.close()
    env = {**os.environ}
    done = subprocess.run(
        [*BLACKOPS, "projections", "rebuild", "operation_status", "--json", "--store", store_url],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    status = subprocess.run(
        [*BLACKOPS, "projections", "status", "--json", "--store", store_url],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    import json

    states = {s["name"]: s for s in json.loads(status.stdout)["projections"]}
    assert states["operation_status"]["lag"] == 0
    assert states["operation_counts"]["position"] == 0  # never caught up yet
    bad = subprocess.run(
        [*BLACKOPS, "projections", "rebuild", "nope", "--json", "--store", store_url],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert bad.returncode == 1 and '"not_found"' in bad.stdout
    assert sys.executable


def test_live_mode_follows_new_events_promptly(any_store_url: str) -> None:
    import threading

    app = Application(any_store_url)
    app.operation("t.ok")(lambda ctx, params: None)
    runner = ProjectionRunner(app.store, OperationStatus())
    stop = threading.Event()
    follower = threading.Thread(target=runner.follow, args=(stop, 5.0))
    follower.start()
    try:
        for _ in range(3):
            app.run("t.ok", {}, actor="a", tenant="t")
            target = app.store.last_position()
            deadline = time.monotonic() + 2  # well inside the 5 s poll: woken by the append
            while runner.position() < target and time.monotonic() < deadline:
                time.sleep(0.01)
            assert runner.position() == target
    finally:
        stop.set()
        follower.join(timeout=10)
        app.close()
    assert not follower.is_alive()
