"""Journal export, replay and verify throughput (printed, not asserted).

Builds a journal of N events (default 200,000: groups of 100 events appended per
commit, each a realistic operation event) on SQLite and PostgreSQL, then measures, in
the same run:

  export        Observed JSONL written to a file (events/s), with its manifest
  read limit    reading that file and parsing every line with orjson (the floor)
  replay        the file fed to a no-op observer with every check on (events/s)
  verify live   every event re-hashed and compared with its recorded leaf (events/s)
  verify file   the export checked offline against its manifest (events/s)

Usage: .venv/bin/python bench/journal.py [--events N] [--stores sqlite,postgresql]
(BLACKOPS_BENCH_POSTGRES_URL overrides the server).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runnable as a plain script

import orjson
import psycopg
from psycopg import sql

from blackops.runtime import SystemClock
from domain.context import Actor
from domain.events import NewEvent
from journal.store import Append, EventStore
from projections.framework import ProjectionRunner
from projections.operations import OperationCounts, OperationStatus
from replay.custody import export_with_manifest
from replay.replayer import replay
from replay.verify import verify_export, verify_store

POSTGRES = os.environ.get(
    "BLACKOPS_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
AT = "2026-11-30T09:00:00.000000Z"


def fill(store: EventStore, events: int) -> None:
    """``events`` events in streams of 5, 100 events per commit."""
    context = {
        "operation_id": "x",
        "operation_type": "bench.noop",
        "actor": {"id": "ana", "kind": "principal"},
        "tenant": "acme",
        "attempt": 1,
        "correlation_id": "x",
    }
    written = 0
    while written < events:
        batch = []
        for _ in range(20):
            stream = str(uuid.uuid4())
            batch.append(
                Append(
                    stream,
                    0,
                    lifecycle(context),
                )
            )
        store.append(*batch)
        written += 100


def lifecycle(context: dict[str, object]) -> list[NewEvent]:
    """One Deferred operation from received to completed: five events."""
    claim = {"attempt": 1, "fencing_token": 1, "worker": "w", "lease_expires_at": AT}
    return [
        NewEvent("operation.received", AT, context, {
            "operation_type": "bench.noop", "mode": "deferred", "tenant": "acme",
            "correlation_id": "x", "params": {"n": 1, "note": "a small params document"}}),
        NewEvent("operation.accepted", AT, context, {}),
        NewEvent("attempt.started", AT, context, claim),
        NewEvent("attempt.finalizing", AT, context, {"attempt": 1}),
        NewEvent("operation.completed", AT, context, {
            "attempt": 1, "outcome_type": None, "outcome_schema_version": 1,
            "outcome_digest": None, "outcome_recorded": False}),
    ]  # fmt: skip


def rate(count: int, seconds: float) -> str:
    return f"{count / seconds:>10,.0f} events/s  ({seconds:.2f} s)"


def run(url: str, label: str, events: int, folder: Path) -> None:
    store = EventStore(url)
    try:
        t0 = time.perf_counter()
        fill(store, events)
        print(f"{label}: {events:,} events appended in {time.perf_counter() - t0:.1f} s")
        target = folder / f"{label}.jsonl"
        with open(target, "wb") as out:
            t0 = time.perf_counter()
            manifest = export_with_manifest(store, out, actor=Actor("bench"), clock=SystemClock())
            exported = time.perf_counter() - t0
        count = manifest["count"]
        print(f"  export             {rate(count, exported)}")
        t0 = time.perf_counter()
        with open(target, "rb") as lines:
            parsed = sum(1 for line in lines if orjson.loads(line))
        limit = time.perf_counter() - t0
        print(f"  read + orjson      {rate(parsed, limit)}   <- the floor")
        t0 = time.perf_counter()
        with open(target, "rb") as lines:
            report = replay(lines, lambda event: None)
        replayed = time.perf_counter() - t0
        print(f"  replay (checked)   {rate(report.delivered, replayed)}   "
              f"= {limit / replayed:.2f}x the floor")  # fmt: skip
        for projection in (OperationStatus(), OperationCounts()):
            runner = ProjectionRunner(store, projection, batch=2000)
            t0 = time.perf_counter()
            applied = runner.catch_up()
            name = f"catch-up {projection.name}"
            print(f"  {name:<18} {rate(applied, time.perf_counter() - t0)}")
        t0 = time.perf_counter()
        live = verify_store(store)
        checked = time.perf_counter() - t0
        print(f"  verify live        {rate(live.events, checked)}   ok={live.ok}")
        t0 = time.perf_counter()
        with open(target, "rb") as lines:
            offline = verify_export(lines, json.loads(json.dumps(manifest)))
        print(f"  verify file        {rate(offline.events, time.perf_counter() - t0)}   "
              f"ok={offline.ok}")  # fmt: skip
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--stores", default="sqlite,postgresql")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for kind in args.stores.split(","):
            if kind == "sqlite":
                run(f"sqlite:///{folder}/bench.sqlite3", "sqlite", args.events, Path(folder))
            elif kind == "postgresql":
                schema = f"bench_journal_{uuid.uuid4().hex[:8]}"
                try:
                    run(f"{POSTGRES}?schema={schema}", "postgresql", args.events, Path(folder))
                finally:
                    with psycopg.connect(POSTGRES, autocommit=True) as conn:
                        conn.execute(
                            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                                sql.Identifier(schema)
                            )
                        )


if __name__ == "__main__":
    main()
