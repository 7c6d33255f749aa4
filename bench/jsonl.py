"""Observed JSONL: export, replay with every check on and offline verify, beside the floor of
reading the same file and parsing each line with orjson (printed, never asserted).

Builds a SQLite journal of N realistic operation events (bench/journal_throughput.py's
`fill`), exports it once to find the file, then measures, each the median of REPEATS runs:

  export       `export_with_manifest` to a file (every leaf checked against the recorded one)
  floor        read the file and `orjson.loads` every line
  replay       `replay` to a no-op observer (duplicates, order, gaps, strict lines)
  verify file  `verify_export` against the manifest (every line re-canonicalised and hashed)
  verify live  `verify_store` (every stored event re-hashed against its leaf)

Timed in this process's CPU time (`time.process_time`, SQLite's work included): the machine
is shared, and time other processes take does not count.

Usage: .venv/bin/python bench/jsonl.py [--events N] [--json] [--ref REV] [--rounds N]
(``--ref main`` runs the same measurements with main's library in a child process too;
``--rounds N`` alternates before and after N times and prints each figure's median).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # runnable as a plain script
import orjson

# first: with --ref, the child's library comes from REV
from bench_ref import median_figures, run_at
from journal_throughput import fill

from blackops.runtime import SystemClock
from domain.context import Actor
from journal.store import EventStore
from replay.custody import export_with_manifest
from replay.replayer import replay
from replay.verify import verify_export, verify_store

REPEATS = 5


def median_rate(count: int, run: Callable[[], object]) -> float:
    runs = []
    for _ in range(REPEATS):
        start = time.process_time()
        run()
        runs.append(time.process_time() - start)
    return count / statistics.median(runs)


def measure(events: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-jsonl-") as folder:
        store = EventStore(f"sqlite:///{folder}/bench.sqlite3")
        try:
            fill(store, events)
            target = Path(folder) / "journal.jsonl"
            clock, actor = SystemClock(), Actor("bench")

            def export() -> dict[str, Any]:
                with open(target, "wb") as out:
                    return export_with_manifest(store, out, actor=actor, clock=clock)

            manifest = json.loads(json.dumps(export()))
            count = manifest["count"]  # each later export adds its own journal.exported event
            lines = target.read_bytes().splitlines(keepends=True)

            def floor() -> None:
                with open(target, "rb") as file:
                    for line in file:
                        orjson.loads(line)

            def replayed() -> None:
                report = replay(lines, lambda event: None)
                assert report.delivered == count

            def verified_file() -> None:
                assert verify_export(lines, manifest).ok

            def verified_live() -> None:
                assert verify_store(store).ok

            return {
                "events": count,
                "export": median_rate(count, export),
                "floor": median_rate(count, floor),
                "replay": median_rate(count, replayed),
                "verify_file": median_rate(count, verified_file),
                "verify_live": median_rate(count, verified_live),
            }
        finally:
            store.close()


def show(result: dict[str, Any], title: str) -> None:
    floor = result["floor"]
    print(f"{title} {result['events']:,} events, SQLite (events/s; ÷ the orjson floor)")
    for key, name in [
        ("floor", "read + orjson.loads"),
        ("export", "export with manifest"),
        ("replay", "replay, every check"),
        ("verify_file", "verify --jsonl"),
        ("verify_live", "verify live"),
    ]:
        print(f"  {name:<22} {result[key]:>10,.0f}  {result[key] / floor:>5.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--ref", help="also measure this git revision's library (before)")
    parser.add_argument("--rounds", type=int, default=1, help="alternate before/after N times")
    args = parser.parse_args()
    extra = ["--events", str(args.events)]
    befores: list[dict[str, Any]] = []
    afters: list[dict[str, Any]] = []
    for _ in range(args.rounds):
        if args.ref:
            befores.append(run_at(args.ref, Path(__file__), extra)["result"])
        afters.append(measure(args.events))
    before = {"result": median_figures(befores)} if befores else None
    result = median_figures(afters)
    if args.json:
        previous = before and before["result"]
        print(json.dumps({"result": result, "before": previous, "ref": args.ref}))
        return
    if before is not None:
        show(before["result"], f"before ({args.ref}):")
    show(result, "this tree:" if before is not None else "")


if __name__ == "__main__":
    main()
