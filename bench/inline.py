"""Inline operations and a lone submit-like append on SQLite and PostgreSQL (printed, not
asserted).

  inline   a no-op handler run Inline, N runs per row from 1 and 4 threads of one process
           sharing one Application; each run commits twice (received + started, then
           finalizing + completed): ops/s, p50 and p99 of `app.run`, the process's CPU per run
  append   a lone 2-event append that starts a stream, what a Deferred submit writes
           (operation.received + operation.accepted), through `EventStore.append`, M per
           round after 200 to warm up: the process's CPU (`time.process_time`) and the wall
           time per append

``--ref REV`` also measures REV's library (bench/bench_ref.py): each round runs this tree and
REV in child processes, one after the other, alternating which goes first, so before and
after meet the same load; figures are medians over the rounds.

Usage: .venv/bin/python bench/inline.py [N] [--appends M] [--rounds R]
       [--stores sqlite,postgresql] [--ref REV] [--json]
(BLACKOPS_BENCH_POSTGRES_URL overrides the server)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # runnable as a plain script
import psycopg

# first: with --ref, the child's library comes from REV
from bench_ref import median_figures, run_at, run_here

from blackops import Application, ExecutionContext
from domain.events import NewEvent
from journal.store import Append

POSTGRES = os.environ.get(
    "BLACKOPS_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
AT = "2026-11-30T09:00:00.000000Z"


def build(store: str) -> Application:
    app = Application(store)

    @app.operation("bench.noop")
    def noop(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        return {"n": params["n"]}

    return app


def measure_inline(store: str, count: int, threads: int) -> dict[str, float]:
    app = build(store)
    app.run("bench.noop", {"n": -1}, actor="bench", tenant="bench")  # open and warm up
    latencies: list[float] = []

    def one(n: int) -> None:
        start = time.perf_counter()
        app.run("bench.noop", {"n": n}, actor="bench", tenant="bench")
        latencies.append(time.perf_counter() - start)

    cpu, start = time.process_time(), time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(one, range(count)))
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    app.close()
    cuts = statistics.quantiles(latencies, n=100)
    return {
        "rate": count / elapsed,
        "p50": cuts[49] * 1000,
        "p99": cuts[98] * 1000,
        "cpu": cpu / count * 1000,
    }


def measure_append(store: str, count: int) -> dict[str, float]:
    """A Deferred submit's append, alone: one transaction of two events starting a stream."""
    app = Application(store)
    context = {"actor": {"id": "bench", "kind": "principal"}, "operation_type": "bench.noop"}
    context["tenant"] = "bench"
    received = NewEvent("operation.received", AT, context, {"operation_type": "bench.noop"})
    accepted = NewEvent("operation.accepted", AT, context, {})
    journal = app.store

    def one() -> None:
        journal.append(Append(str(uuid.uuid4()), 0, [received, accepted]))

    for _ in range(200):
        one()
    cpu, start = time.process_time(), time.perf_counter()
    for _ in range(count):
        one()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    app.close()
    return {"cpu": cpu / count * 1000, "wall": wall / count * 1000}


def one_round(stores: list[str], count: int, appends: int, rows: list[str]) -> dict[str, Any]:
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:

        def url(name: str, tag: str) -> str:
            if name == "sqlite":
                return f"sqlite:///{tmp}/{tag}.sqlite3"
            return f"{POSTGRES}?schema={schema}_{tag}"

        try:
            for name in stores:
                result[name] = {}
                if "append" in rows:
                    result[name]["append"] = measure_append(url(name, "append"), appends)
                if "inline" in rows:
                    for t in (1, 4):
                        result[name][f"inline_{t}"] = measure_inline(
                            url(name, f"inline{t}"), count, t
                        )
        finally:
            if "postgresql" in stores:
                with psycopg.connect(POSTGRES, autocommit=True) as conn:
                    for tag in ("append", "inline1", "inline4"):
                        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}_{tag}" CASCADE')
    return result


def medians(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    first = rounds[0]
    return {
        store: {row: median_figures([r[store][row] for r in rounds]) for row in rows}
        for store, rows in first.items()
    }


def show(result: dict[str, Any], before: dict[str, Any] | None, ref: str | None) -> None:
    def pair(store: str, row: str, key: str, digits: int = 2) -> str:
        now = f"{result[store][row][key]:.{digits}f}"
        if before is None:
            return now
        return f"{before[store][row][key]:.{digits}f} -> {now}"

    label = f"  (before = {ref} -> this tree, medians of the rounds)" if before else ""
    if "append" in next(iter(result.values())):
        print(f"A lone submit-like append (2 events, starts a stream), per append{label}")
        print(f"{'store':<11} {'CPU ms':>16} {'wall ms':>16}")
        for store in result:
            cpu, wall = pair(store, "append", "cpu", 3), pair(store, "append", "wall")
            print(f"{store:<11} {cpu:>16} {wall:>16}")
        print()
    if "inline_1" not in next(iter(result.values())):
        return
    print("Inline no-op operations (2 commits each)")
    heads = ("ops/s", "p50 ms", "p99 ms", "CPU ms/op")
    print(f"{'store':<11} {'threads':>7} {heads[0]:>16} " + " ".join(f"{h:>14}" for h in heads[1:]))
    for store in result:
        for threads in (1, 4):
            row = f"inline_{threads}"
            print(
                f"{store:<11} {threads:>7} {pair(store, row, 'rate', 0):>16} "
                f"{pair(store, row, 'p50'):>14} {pair(store, row, 'p99'):>14} "
                f"{pair(store, row, 'cpu', 3):>14}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("count", nargs="?", type=int, default=2000, help="Inline runs per row")
    parser.add_argument("--appends", type=int, default=1000, help="lone appends per round")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--stores", default="sqlite,postgresql")
    parser.add_argument("--rows", default="append,inline", help="which measurements")
    parser.add_argument("--ref", help="also measure this git revision's library (before)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    stores = args.stores.split(",")
    rows = args.rows.split(",")
    child = [str(args.count), "--appends", str(args.appends), "--stores", args.stores]
    child += ["--rows", args.rows]
    after: list[dict[str, Any]] = []
    before: list[dict[str, Any]] = []
    for n in range(args.rounds):
        if args.ref is None:
            after.append(one_round(stores, args.count, args.appends, rows))
            continue
        runs = [(after, None), (before, args.ref)]
        for found, ref in runs if n % 2 == 0 else reversed(runs):
            answer = run_at(ref, Path(__file__), child) if ref else run_here(Path(__file__), child)
            found.append(answer["result"])
    if args.json:
        print(json.dumps({"result": medians(after)}))
        return
    show(medians(after), medians(before) if before else None, args.ref)
    if args.rounds > 1 and "append" in rows:
        print("\nthe lone append's CPU ms in each round:")
        for store in stores:
            for name, measured in (("before", before), ("after", after)):
                if measured:
                    cpus = ", ".join(f"{r[store]['append']['cpu']:.3f}" for r in measured)
                    print(f"  {store:<11} {name:<6} {cpus}")


if __name__ == "__main__":
    main()
