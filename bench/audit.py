"""Signed checkpoints, receipts and proofs: what they cost (printed only, never asserted).

One run, one SQLite journal per size, each figure the median of its samples:

  sign note     Ed25519 over a checkpoint body (``sign_note``): the cryptography alone
  1st sign      the first ``CheckpointService.sign`` of a process: the start-up check of
                every leaf and event (decisions A11)
  sign          ``CheckpointService.sign(force=True)`` after it: lock, the new leaves, the
                signed tail and a rotating window of 4,096 older leaves re-read and their
                events re-hashed, the compact range extended, note, journal.checkpoint append
  full sign     the same preceded by a re-read of every leaf: what each signing cost before
                A11 (``JournalTree.sync(recheck=True)``), measured in the same run
  receipt       ``receipt_for`` of a random event (tree warm, a checkpoint covering it)
  consistency   ``JournalTree.consistency(m, n)`` for a random m
  deferred      Deferred no-op operations submitted then drained in process
                (``work_until_idle``), with the automatic signer running (every 0.5 s, 10x
                the default rate) and without, interleaved, same journal size

Receipts and proofs are O(log n) in the tree (256-leaf tile hashes in memory): compare the
two sizes. Usage: .venv/bin/python bench/audit.py [--sizes 2000,20000,200000] [--big] [--json]
(``--big`` adds 2,000,000 events; it takes minutes and about 1 GB).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # runnable as a plain script
from journal_throughput import fill

from blackops import Application, ExecutionContext
from blackops.audit.checkpoints import AutoCheckpointer, CheckpointService
from blackops.audit.receipts import receipt_for
from blackops.runtime import SystemClock
from journal.store import EventStore
from replay.notes import Checkpoint, SigningKey, sign_note


def median_ms(samples: int, run: Callable[[], object]) -> float:
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def sizes_bench(events: int, key: SigningKey, folder: Path) -> dict[str, Any]:
    store = EventStore(f"sqlite:///{folder}/journal-{events}.sqlite3")
    try:
        fill(store, events)
        service = CheckpointService(store, key, SystemClock())
        start = time.perf_counter()
        service.sign(force=True)
        first = (time.perf_counter() - start) * 1000
        tree = service.synced_tree()
        positions = [p for p, _ in store.read_leaves(0, events)[: min(events, 5000)]]
        rng = random.Random(7)
        receipt = median_ms(200, lambda: receipt_for(service, rng.choice(positions)))
        n = tree.size
        consistency = median_ms(200, lambda: tree.consistency(rng.randrange(1, n), n))
        sign = median_ms(9, lambda: service.sign(force=True))

        def full() -> None:
            service.tree.sync(recheck=True)
            service.sign(force=True)

        full_sign = median_ms(5, full)
        return {
            "events": events,
            "firstSignMs": round(first, 1),
            "signMs": round(sign, 1),
            "fullSignMs": round(full_sign, 1),
            "receiptMs": round(receipt, 3),
            "consistencyMs": round(consistency, 3),
        }
    finally:
        store.close()


def deferred_bench(folder: Path, operations: int, reps: int) -> dict[str, Any]:
    rates: dict[str, list[float]] = {"off": [], "on": []}
    checkpoints = 0
    for rep in range(reps):
        for mode in ("off", "on"):
            app = Application(f"sqlite:///{folder}/deferred-{rep}-{mode}.sqlite3")

            @app.operation("bench.noop")
            def noop(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
                return {}

            signer = None
            if mode == "on":
                service = CheckpointService(app.store, SigningKey.generate("bench/log"), app.clock)
                signer = AutoCheckpointer(service, cadence=0.5).start()
            start = time.perf_counter()
            for n in range(operations):
                app.submit("bench.noop", {"n": n}, actor="bench", tenant="default")
            asyncio.run(app.work_until_idle())
            rates[mode].append(operations / (time.perf_counter() - start))
            if signer is not None:
                signer.stop()
                checkpoints += len(app.store.read_topics(["journal.checkpoint"]))
            app.close()
    return {
        "operations": operations,
        "opsPerSecondOff": round(statistics.median(rates["off"]), 1),
        "opsPerSecondOn": round(statistics.median(rates["on"]), 1),
        "checkpointsSignedWhileOn": checkpoints,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes", default="2000,20000,200000", help="journal sizes, comma-separated"
    )
    parser.add_argument("--big", action="store_true", help="also 2,000,000 events")
    parser.add_argument("--operations", type=int, default=400)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    key = SigningKey.generate("bench.example/log")
    body = Checkpoint("bench.example/log", 20_000, bytes(32)).body()
    result: dict[str, Any] = {
        "signNoteMs": round(median_ms(1000, lambda: sign_note(body, key)), 4),
        "sizes": [],
    }
    with tempfile.TemporaryDirectory() as folder:
        sizes = [int(n) for n in args.sizes.split(",")] + ([2_000_000] if args.big else [])
        for events in sizes:
            result["sizes"].append(sizes_bench(events, key, Path(folder)))
        result["deferred"] = deferred_bench(Path(folder), args.operations, args.reps)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"sign note (Ed25519 only)        {result['signNoteMs']:.4f} ms")
    heads = ("events", "1st sign ms", "sign ms", "full sign ms", "receipt ms", "consist. ms")
    print(
        f"{heads[0]:>10} {heads[1]:>12} {heads[2]:>9} {heads[3]:>13} {heads[4]:>11} {heads[5]:>12}"
    )
    for row in result["sizes"]:
        print(
            f"{row['events']:>10} {row['firstSignMs']:>12} {row['signMs']:>9} "
            f"{row['fullSignMs']:>13} {row['receiptMs']:>11} {row['consistencyMs']:>12}"
        )
    d = result["deferred"]
    print(
        f"deferred no-ops ({d['operations']} per run, median of {args.reps}): "
        f"{d['opsPerSecondOff']} ops/s without automatic checkpoints, {d['opsPerSecondOn']} "
        f"ops/s with them every 0.5 s ({d['checkpointsSignedWhileOn']} signed in all)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
