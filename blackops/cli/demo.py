"""``blackops demo``: the tour of `blackops.demo` on a journal, and what it recorded."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from blackops.cli.common import EXIT_ERROR, EXIT_OK, OPENED, Commands, add_common, emit


def register(commands: Commands) -> None:
    demo = commands.add_parser(
        "demo",
        help="a short tour: operations, a retry, a workflow, a verified journal",
        description="Run an Inline operation, a rejected one, a Deferred one that is "
        "retried, and a workflow that sleeps and waits for an event, in this process; "
        "then verify the journal. Without --store or $BLACKOPS_STORE the journal is a new "
        "SQLite file in a new temporary folder, kept to look at.",
    )
    add_common(demo, app=False)
    demo.set_defaults(handler=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    import asyncio
    import tempfile

    from blackops.demo import demo_application, tour

    store = args.store or os.environ.get("BLACKOPS_STORE")
    if not store:  # never the user's own journal by default
        store = f"sqlite:///{tempfile.mkdtemp(prefix='blackops-demo-')}/journal.sqlite3"
    app = demo_application(store)
    OPENED.append(app)
    report = asyncio.run(tour(app))
    location = app.store.location
    # Where to look at it: nowhere for a memory store; the URL given, unless what is shown
    # of it masks its password.
    shown = None if location.kind == "memory" else store
    if shown is not None and location.display != store:
        shown = "STORE_URL"
    emit(report, args.json, lambda: _lines(report, shown))
    # As `verify`: a journal that does not verify is a failure, whatever else went well.
    return EXIT_OK if report["journal"]["verified"] else EXIT_ERROR


def _lines(report: dict[str, Any], shown: str | None) -> str:
    inline, rejected, deferred = report["inline"], report["rejected"], report["deferred"]
    workflow, journal = report["workflow"], report["journal"]
    verified = "verified" if journal["verified"] else "NOT VERIFIED"
    return "\n".join(
        [
            f"journal: {report['store']}",
            f"Inline demo.greet      {inline['operationId']}  {inline['status']}: "
            + " -> ".join(inline["events"]),
            f"Inline demo.greet      {rejected['operationId']}  {rejected['status']} "
            f"({rejected['rejection']})",
            f"Deferred demo.flaky    {deferred['operationId']}  {deferred['status']}: "
            + " -> ".join(deferred["events"]),
            f"workflow DemoOrder     {workflow['instance']}  {workflow['status']}: "
            + json.dumps(workflow.get("output"), sort_keys=True),
            f"journal: {verified} through position {journal['events']}",
            *([f"look around: blackops op list --store {shown}"] if shown else []),
        ]
    )
