"""Projections (issue 6): tracked positions, exactly-once batches, rebuilds, listing.

On SQLite, PostgreSQL and memory. A rebuilt projection equals the live one; one rebuilt
from an Observed JSONL export equals it too (OL-11); a catch-up killed with SIGKILL in
the middle neither loses nor double-counts anything.
"""

from __future__ import annotations

import asyncio
import os
import select
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from cli_processes import BLACKOPS, ROOT
from conftest import postgres_schema_url  # type: ignore[import-not-found, unused-ignore]
from projection_checks import live_and_rebuilt_from_jsonl, rows

from blackops import Application, ExecutionContext, OperationRejected, Retryable, Supervision
from domain.errors import BlackOpsError
from journal.store import EventStore
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


#: ``blackops projections rebuild ...`` with a gate (test-only, no library change): the
#: first batch reaching past ``sys.argv[1]`` is applied and its position moved inside its
#: transaction, then the child prints ``gate COMMITTED FIRST LAST MOVED`` (MOVED: the position
#: as that transaction sees it) and waits there, before its commit, until it is killed (or
#: for 5 minutes, if its parent died first). So the kill lands mid-way by construction.
GATED_REBUILD = """
import contextlib, os, sys, threading
from blackops.cli.main import main
from projections.framework import ProjectionRunner
from projections.operations import OperationCounts

gate_after = int(sys.argv.pop(1))
batch, committed = [], [0]
real_apply, real_transaction = OperationCounts.apply, ProjectionRunner._transaction

def apply(self, sql, events):
    real_apply(self, sql, events)
    batch[:] = [events[0].position, events[-1].position]

@contextlib.contextmanager
def transaction(self):
    batch.clear()
    with real_transaction(self) as sql:
        yield sql
        if batch and batch[-1] > gate_after:
            [(moved,)] = sql.execute(
                "SELECT position FROM {p}blackops_projection_positions WHERE name = %s",
                ("operation_counts",),
            )
            print("gate", committed[0], *batch, moved, flush=True)
            threading.Event().wait(300)
            os._exit(3)
    if batch:
        committed[0] = batch[-1]

OperationCounts.apply = apply
ProjectionRunner._transaction = transaction
sys.exit(main())
"""


def wait_for_gate(child: subprocess.Popen[bytes], seconds: float) -> list[int]:
    """The numbers of the child's ``gate`` line; fails if it ends or never gets there."""
    assert child.stdout is not None
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if not select.select([child.stdout], [], [], left)[0]:
            break
        line = child.stdout.readline()  # unbuffered: nothing read past this line
        if not line:
            break  # it ended without reaching the gate
        if line.startswith(b"gate "):
            return [int(word) for word in line.split()[1:]]
    child.kill()
    child.wait(timeout=30)
    assert child.stderr is not None
    pytest.fail(f"the rebuild never reached the gate: {child.stderr.read().decode()[-2000:]}")


def test_a_catch_up_killed_mid_way_loses_nothing_and_counts_nothing_twice(
    store_url: str,
) -> None:
    """SIGKILL a ``projections rebuild`` (one transaction per 3 events) part-way, inside
    the transaction of a batch already applied and its position moved; the next catch-up
    continues from the last committed position and equals a clean rebuild."""
    app = Application(store_url)
    populate(app, 60)
    app.close()
    reopened = Application(store_url)
    # Created before the child starts: its tables and position row exist when it rebuilds.
    runner = reopened.projections.runner("operation_counts")
    child = subprocess.Popen(
        [sys.executable, "-c", GATED_REBUILD, "40", "projections", "rebuild",
         "operation_counts", "--batch", "3", "--store", store_url],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0,
    )  # fmt: skip
    try:
        committed, first, last, moved = wait_for_gate(child, 120)
        assert 0 < committed < first <= last < reopened.store.last_position()
        assert moved == last  # the batch and its position in one transaction
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        assert child.returncode == -signal.SIGKILL  # killed, not finished
        # Every batch committed before the kill is kept; the one in flight is not.
        assert runner.position() == committed
        runner.catch_up()
        after_kill = rows(runner, "blackops_operation_counts")
        runner.rebuild()
        assert rows(runner, "blackops_operation_counts") == after_kill
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)
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
    # Polling only every 120 s, it can meet the 20 s below only by being woken by the
    # append; 20 s leaves room for a loaded machine's stalls.
    follower = threading.Thread(target=runner.follow, args=(stop, 120.0), daemon=True)
    follower.start()
    try:
        for _ in range(3):
            app.run("t.ok", {}, actor="a", tenant="t")
            target = app.store.last_position()
            deadline = time.monotonic() + 20
            while runner.position() < target and time.monotonic() < deadline:
                time.sleep(0.01)
            assert runner.position() == target
    finally:
        stop.set()
        # Stopped, it ends when next woken: by an append, not only by its 120 s poll.
        app.run("t.ok", {}, actor="a", tenant="t")
        follower.join(timeout=30)
        app.close()
    assert not follower.is_alive()


def test_counts_are_as_of_the_position_they_name_while_submits_run(store_url: str) -> None:
    """``observedPosition`` is the position the counts are as of: read in one snapshot with
    them (found by a defect hunt: read in a second transaction, 18 of 202 answers named a
    later position than their counts while submits ran). Each answer's counts sum to the
    operations received at or before its position."""
    import threading
    from bisect import bisect_right

    app = Application(store_url)
    try:

        @app.operation("t.ok")
        def ok(ctx: ExecutionContext, params: dict[str, Any]) -> None:
            return None

        app.projections.operation_counts()  # opened: the readers start at once
        submitted = threading.Event()
        answers: list[dict[str, Any]] = []
        errors: list[BaseException] = []

        def seen_submits() -> int:  # answers that counted some submit
            return sum(1 for answer in answers[-100:] if answer["observedPosition"] > 0)

        def submit() -> None:  # until 100 answers came while submits ran (at most 120 s)
            try:
                deadline = time.monotonic() + 120
                i = 0
                while seen_submits() < 100 and time.monotonic() < deadline:
                    i += 1
                    app.submit("t.ok", {"i": i}, actor="a", tenant="acme")
                    time.sleep(0.01)  # a journal that grows as fast as it can outruns readers
            except BaseException as error:  # reported below
                errors.append(error)

        def read() -> None:
            try:
                while not submitted.is_set():
                    answers.append(app.projections.operation_counts())
            except BaseException as error:  # reported below
                errors.append(error)

        submitters = [threading.Thread(target=submit) for _ in range(3)]
        readers = [threading.Thread(target=read) for _ in range(3)]
        for thread in readers + submitters:
            thread.start()
        for thread in submitters:
            thread.join()
        submitted.set()
        for thread in readers:
            thread.join()
        assert errors == []
        received = [e.position for e in app.store.read_topics(["operation.received"])]
        assert seen_submits() >= 100
        for answer in answers:
            total = sum(
                sum(statuses.values())
                for types in answer["counts"].values()
                for statuses in types.values()
            )
            assert total == bisect_right(received, answer["observedPosition"]), answer
    finally:
        app.close()


def test_a_reader_that_began_before_a_rebuild_sees_the_rows_of_its_position() -> None:
    """H8 through a rebuild (PostgreSQL: SQLite's reader keeps its snapshot of the schema
    too): a snapshot taken before the reset reads the old counts beside the old position.
    The rebuild dropped the tables, and such a snapshot read the new, empty ones: every
    count 0 "as of" the journal's end (found by a defect hunt)."""
    import psycopg

    schema = postgres_schema_url()
    store_url = next(schema)
    app = Application(store_url)
    app.operation("t.ok")(lambda ctx, params: None)
    try:
        for n in range(5):
            app.run("t.ok", {"n": n}, actor="a", tenant="t")
        runner = app.projections.runner("operation_counts")
        runner.catch_up()
        table = f"{runner.prefix}blackops_operation_counts"
        before = runner.query(f"SELECT * FROM {table}")
        assert before
        location = app.store.location.settings
        dsn = store_url.split("?")[0]
        with psycopg.connect(dsn) as reader:
            reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            [(position,)] = reader.execute(
                f"SELECT position FROM {location['POSTGRES_SCHEMA']}.blackops_projection_positions "
                "WHERE name = %s",
                (runner.projection.name,),
            ).fetchall()
            runner.rebuild()
            seen = reader.execute(f"SELECT * FROM {table}").fetchall()
            reader.execute("ROLLBACK")
        assert position == app.store.last_position()
        assert sorted(seen) == sorted(before)
    finally:
        app.close()
        next(schema, None)  # past its yield: the schema is dropped


def test_a_projection_opens_while_another_process_commits_meanwhile(tmp_path: Path) -> None:
    """Its set-up read then wrote; on SQLite a write after a read is refused at once when
    another process committed in between (a first query failed under load: found by a
    defect hunt). It now takes the write lock first and waits for it like any writer."""
    url = f"sqlite:///{tmp_path / 'journal.sqlite3'}"
    with EventStore(url) as first:
        ProjectionRunner(first, OperationCounts())
    with EventStore(url, create=False) as store:
        other = sqlite3.connect(
            tmp_path / "journal.sqlite3", timeout=0, isolation_level=None, check_same_thread=False
        )
        other.execute("BEGIN IMMEDIATE")
        other.execute("CREATE TABLE elsewhere (x)")  # another process's write, not committed
        committer = threading.Timer(0.5, lambda: other.execute("COMMIT"))
        committer.start()
        try:
            runner = ProjectionRunner(store, OperationCounts())  # waits, then sets up
        finally:
            committer.join()
            other.close()
        assert runner.position() == 0


def test_opening_a_projection_still_runs_its_migrations(tmp_path: Path) -> None:
    """`tables()` carries a projection's migrations (its listing indexes): every open runs
    them, also on a store whose projection is set up (a fast path skipped them: found by
    review)."""
    url = f"sqlite:///{tmp_path / 'journal.sqlite3'}"

    def indexes() -> set[str]:
        with sqlite3.connect(tmp_path / "journal.sqlite3") as db:
            rows = db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' "
                "AND tbl_name = 'blackops_operation_status' AND name LIKE 'blackops_%'"
            )
            return {row[0] for row in rows}

    with EventStore(url) as store:
        ProjectionRunner(store, OperationStatus())
    made = indexes()
    assert made
    with sqlite3.connect(tmp_path / "journal.sqlite3") as db:
        for name in made:
            db.execute(f"DROP INDEX {name}")
    with EventStore(url, create=False) as store:
        ProjectionRunner(store, OperationStatus())
    assert indexes() == made


def test_a_rebuild_racing_a_catch_up_counts_each_event_once() -> None:
    """A catch-up in flight when a rebuild began kept rows the rebuild's DELETE could not
    see, and the refill counted their events again (found by review): the rebuild now
    takes the position row first, as a catch-up does (PostgreSQL)."""
    schema = postgres_schema_url()
    store_url = next(schema)
    app = Application(store_url)
    app.operation("t.old")(lambda ctx, params: None)
    app.operation("t.new")(lambda ctx, params: None)
    try:
        app.run("t.old", {}, actor="a", tenant="t")
        runner = app.projections.runner("operation_counts")
        runner.catch_up()
        app.run("t.new", {}, actor="a", tenant="t")
        apply = runner.projection.apply
        applying = threading.Event()

        def slowly(sql: Any, events: Any) -> None:
            apply(sql, events)
            applying.set()
            time.sleep(1.0)  # the batch's rows are written, not yet committed

        runner.projection.apply = slowly  # type: ignore[method-assign]
        catching_up = threading.Thread(target=runner.catch_up)
        catching_up.start()
        assert applying.wait(20)
        with EventStore(store_url, create=False) as other:
            ProjectionRunner(other, OperationCounts()).rebuild()
        catching_up.join()
        runner.projection.apply = apply  # type: ignore[method-assign]
        counts = app.operation_counts()
        assert counts["t"]["t.new"]["completed"] == 1, counts
    finally:
        app.close()
        next(schema, None)  # past its yield: the schema is dropped
