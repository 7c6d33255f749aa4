"""Per-request costs against the journal's size (figures printed, never asserted).

For each size (20,000 and 200,000 events; 2,000,000 with --huge) and store, a fresh journal
is filled with completed Deferred operations (6 events each: cloned from one real run with
new ids, 100 operations per transaction; 1% of them terminal in 2020, so that a 30-day
journal retention makes them due), then it times, medians of --reps calls:

  catch-up     the first listing after filling (the projections fold every event): events/s
  inline run   ``app.run`` of a no-op          submit   ``app.submit`` of a no-op
  status       ``app.status`` of one operation
  list p1/p10  first and tenth page (limit 50) of the operation listing, unfiltered and by
               tenant, status and type (the page cursor is followed, not timed)
  resources    the Space's resource listings as their routes read them: Spaces,
               principals, Workers, Versions, the Deployment, Workflows (one of each
               kind was made before the fill: a Space, a Worker, a Version, a Workflow)
  delete scan  a Workflow DELETE's search for the instances to stop (its ``workflow:<uid>``
               rows of the due-work index)
  purge dry    ``app.purge(dry_run=True)`` with 30-day retention (1% due) and with none
               configured (nothing due): the first call of a freshly opened application
               (it opens connections and imports, whatever the size) and the median after
  export       ``export_with_manifest`` of the whole journal to a file: events/s
  verify       ``verify_store`` (every leaf re-hashed, the tree checked): events/s

A cost that does not grow with the journal stays flat from row to row; catch-up, export and
verify are rates (they read everything, once).

Usage: .venv/bin/python bench/scale.py [--sizes 20000,200000] [--huge] [--stores sqlite,postgresql]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.append(str(Path(__file__).resolve().parent))

from benchstores import Stores
from operations import TYPE, build

from blackops import Retention
from blackops.ids import new_id as new_id_of
from blackops.runtime import SystemClock
from domain.context import Actor
from domain.events import NewEvent
from journal.store import Append
from replay.custody import export_with_manifest
from replay.verify import verify_store

PER_OPERATION = 6
OLD = "2020-01-01T00:00:00.000000Z"
SPACE = "bench-space"
ACTOR = Actor("bench", "principal")
#: A Version bundle with one workflow class (it is uploaded, not verified: listings only).
BUNDLE = {
    "modules": {"flows": "class Flow:\n    async def run(self, event, step):\n        pass\n"},
    "main": "flows",
}
FILTERS: dict[str, dict[str, str]] = {
    "": {},
    "tenant": {"tenant": "t3"},
    "status": {"status": "completed"},
    "type": {"type": TYPE},
}


def resources(app: Any) -> Callable[[], dict[str, Callable[[], Any]]]:
    """One Space, principal, Worker and Version; returns the listings of them to time."""
    context = app.access_context(Actor("root", "system"), SPACE)
    app.access.create_space(SPACE, context)
    app.access.create_principal("ana", context)
    worker = str(app.control.create_worker(SPACE, "w1", ACTOR)["uid"])
    app.control.upload_version(SPACE, worker, BUNDLE, ACTOR)
    return lambda: {
        "res_spaces_ms": app.access.spaces,
        "res_principals_ms": lambda: app.access.principals(SPACE),
        "res_workers_ms": lambda: app.control.workers(SPACE),
        "res_versions_ms": lambda: app.control.versions(SPACE, worker),
        "res_deployment_ms": lambda: app.control.deployment(SPACE, worker),
        "res_workflows_ms": lambda: app.workflow_views(SPACE),
    }


def template(app: Any) -> tuple[str, list[tuple[str, str, NewEvent]]]:
    """One real Deferred run: its id and its events as (stream, type, event)."""
    worker = app.worker(concurrency=1).start()
    try:
        operation_id = app.submit(TYPE, {"n": 0}, actor="bench", tenant="t0")
        deadline = time.monotonic() + 60
        while app.status(operation_id)["status"] != "completed":
            if time.monotonic() > deadline:
                raise RuntimeError("the template operation never completed")
            time.sleep(0.05)
    finally:
        worker.stop(5)
    events = [
        e for e in app.store.iter_after(0) if e.stream in (operation_id, f"outcome:{operation_id}")
    ]
    return operation_id, [
        (e.stream, e.type, NewEvent(e.type, e.at, e.context, e.data)) for e in events
    ]


def clone(value: Any, old: str, new: str, tenant: str) -> Any:
    if isinstance(value, str):
        return tenant if value == "t0" else value.replace(old, new)
    if isinstance(value, dict):
        return {k: clone(v, old, new, tenant) for k, v in value.items()}
    if isinstance(value, list):
        return [clone(v, old, new, tenant) for v in value]
    return value


def fill(app: Any, events: int) -> None:
    old_id, shape = template(app)
    operations = events // PER_OPERATION
    batch: list[Append] = []
    for n in range(1, operations):
        new_id = new_id_of(app.clock)
        tenant = f"t{n % 10}"
        aged = n % 100 == 0
        streams: dict[str, list[NewEvent]] = {}
        for stream, _type, event in shape:
            data = clone(event.data, old_id, new_id, tenant)
            context = clone(event.context, old_id, new_id, tenant)
            at = OLD if aged else event.at
            streams.setdefault(stream.replace(old_id, new_id), []).append(
                NewEvent(event.type, at, context, data)
            )
        batch.extend(Append(stream, 0, evs) for stream, evs in streams.items())
        if len(batch) >= 200:
            app.store.append(*batch)
            batch = []
    if batch:
        app.store.append(*batch)


def timed(call: Callable[[], Any], reps: int) -> float:
    took = []
    for _ in range(reps):
        start = time.perf_counter()
        call()
        took.append(time.perf_counter() - start)
    return statistics.median(took) * 1000


def page(app: Any, number: int, **filters: Any) -> Callable[[], Any]:
    cursor = None
    for _ in range(number - 1):
        cursor = app.list_operations(limit=50, cursor=cursor, **filters)["next"]
    return lambda: app.list_operations(limit=50, cursor=cursor, **filters)


def measure(url: str, size: int, reps: int, *, purge_only: bool = False) -> dict[str, float]:
    app = build(url)
    out: dict[str, float] = {}
    listings = resources(app)
    start = time.perf_counter()
    fill(app, size)
    out["fill_s"] = time.perf_counter() - start
    if purge_only:
        out["events"] = app.store.last_position()
        app.close()
        return {**out, **purge_figures(url, reps)}
    total = app.store.last_position()
    start = time.perf_counter()
    app.list_operations(limit=1)
    out["catch_up_events_per_s"] = total / (time.perf_counter() - start)
    some = app.list_operations(limit=1, tenant="t3")["items"][0]["operationId"]
    out["inline_ms"] = timed(lambda: app.run(TYPE, {}, actor="b", tenant="t1"), reps)
    out["submit_ms"] = timed(lambda: app.submit(TYPE, {}, actor="b", tenant="t1"), reps)
    out["status_ms"] = timed(lambda: app.status(some), reps)
    for label, filters in FILTERS.items():
        name = f"list_{label}_" if label else "list_"
        out[name + "p1_ms"] = timed(page(app, 1, **filters), reps)
        out[name + "p10_ms"] = timed(page(app, 10, **filters), reps)
    for label, call in listings().items():
        out[label] = timed(call, reps)
    # A Workflow DELETE's instance search (blackops/control/handlers.py _instance_streams).
    uid = "wf-" + "c" * 32
    out["delete_scan_ms"] = timed(lambda: app.store.work_rows_of(f"workflow:{uid}"), reps)
    out["events"] = app.store.last_position()
    out.update(export_verify(app, size))
    app.close()
    return {**out, **purge_figures(url, reps)}


def export_verify(app: Any, size: int) -> dict[str, float]:
    with tempfile.TemporaryFile() as file:
        start = time.perf_counter()
        manifest = export_with_manifest(
            app.store, file, actor=Actor("bench", "cli"), clock=SystemClock()
        )
        exported = manifest["count"] / (time.perf_counter() - start)
    start = time.perf_counter()
    report = verify_store(app.store)
    if not report.ok:
        raise RuntimeError(f"the journal does not verify: {report}")
    return {
        "export_events_per_s": exported,
        "verify_events_per_s": report.events / (time.perf_counter() - start),
    }


def purge_figures(url: str, reps: int) -> dict[str, float]:
    """Each dry run's first call on a freshly opened application (``_first``: it opens the
    connections and imports what purging needs) and the median of ``reps`` more."""
    out: dict[str, float] = {}
    for label, retention in (("purge_dry_none", None), ("purge_dry_1pct", 30 * 86400)):
        scoped = build(url) if retention is None else build_with(url, retention)
        start = time.perf_counter()
        report = scoped.purge(actor="bench", dry_run=True)
        out[label + "_first_ms"] = (time.perf_counter() - start) * 1000

        def again(app: Any = scoped) -> Any:
            return app.purge(actor="bench", dry_run=True)

        out[label + "_ms"] = timed(again, reps)
        out[label + "_items"] = len(report.items)
        scoped.close()
    return out


def build_with(url: str, seconds: float) -> Any:
    app = build(url)
    app.close()
    from blackops import Application

    scoped = Application(url, retention=Retention(journal_seconds=seconds))
    scoped.operation(TYPE)(lambda ctx, params: None)
    return scoped


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="20000,200000")
    parser.add_argument("--huge", action="store_true", help="also 2,000,000 events")
    parser.add_argument("--stores", default="sqlite,postgresql")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument(
        "--purge-only", action="store_true", help="fill, then time only purge --dry-run"
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")] + ([2_000_000] if args.huge else [])
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        stores = Stores(Path(tmp), "scale")
        for kind in args.stores.split(","):
            for size in sizes:
                with stores.fresh(kind) as url:
                    got = measure(url, size, args.reps, purge_only=args.purge_only)
                print(f"{kind} {size}: {got}", file=sys.stderr, flush=True)
                rows.append((kind, size, got))
    keys = [
        "purge_dry_none_first_ms", "purge_dry_none_ms", "purge_dry_1pct_first_ms",
        "purge_dry_1pct_ms", "purge_dry_1pct_items",
    ] if args.purge_only else [
        "catch_up_events_per_s", "inline_ms", "submit_ms", "status_ms",
        *(f"list_{f + '_' if f else ''}p{n}_ms" for f in FILTERS for n in (1, 10)),
        "res_spaces_ms", "res_principals_ms", "res_workers_ms", "res_versions_ms",
        "res_deployment_ms", "res_workflows_ms", "delete_scan_ms",
        "purge_dry_none_first_ms", "purge_dry_none_ms", "purge_dry_1pct_first_ms",
        "purge_dry_1pct_ms", "purge_dry_1pct_items", "export_events_per_s", "verify_events_per_s",
    ]  # fmt: skip
    # One row per figure, one column per (store, size): reads down a size's growth.
    print("| figure | " + " | ".join(f"{k} {g['events']:.0f}" for k, _s, g in rows) + " |")
    print("|---|" + "---:|" * len(rows))
    for key in keys:
        cells = " | ".join(_cell(got[key]) for _k, _s, got in rows)
        print(f"| {key} | {cells} |")


def _cell(value: float) -> str:
    return f"{value:.2f}" if value < 100 else f"{value:,.0f}"


if __name__ == "__main__":
    main()
