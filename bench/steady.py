"""Steady state on PostgreSQL: completions per second while submitters and workers run at once,
beside the drain rate of the same work in the same run (figures printed, never asserted).

Per worker count W (1, 2, 4 `blackops worker` processes) and submitter count S (4, 16 threads
of this process, each calling ``app.submit`` in a loop), on fresh schemas, interleaved:

  drain    N operations submitted first, then W workers started; N / (first attempt.started
           to last operation.completed), as bench/operations.py measures it;
  steady   W workers running and answering; S threads submit N together; N / (first submit
           to last operation.completed).

Every run is read back by a fresh connection: each operation completed exactly once. Also
printed: how many appends shared a transaction in the submitting process (the commit queue),
and how many operations a worker transaction carried (distinct xmin per operation).

Usage: .venv/bin/python bench/steady.py [--n 3000] [--workers 1,2,4] [--submitters 4,16]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.append(str(Path(__file__).resolve().parent))

from benchstores import Stores
from operations import TYPE, Journal, Settings, Workers, build, drain, wait_idle, warm


def steady(
    stores: Stores, workers: int, submitters: int, s: Settings
) -> tuple[dict[str, float], str]:
    out: dict[str, float] = {}
    with stores.fresh("postgresql") as url:
        app = build(url)
        warm(app)
        pool = Workers(app, url, workers, s.concurrency, "process", s.logs)
        pool.start()
        ids: list[str] = []
        failures: list[BaseException] = []
        try:
            ready = app.submit(TYPE, {"n": -1}, actor="bench", tenant="bench")
            why = wait_idle(app, pool, s.timeout)
            if not why:
                before = getattr(app.store, "commit_groups", (0, 0))
                share = s.n // submitters

                def submit(t: int) -> None:
                    try:
                        for n in range(share):
                            ids.append(app.submit(TYPE, {"t": t, "n": n}, actor="b", tenant="b"))
                    except BaseException as error:
                        failures.append(error)

                threads = [threading.Thread(target=submit, args=(t,)) for t in range(submitters)]
                first = time.time()
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                submitted = time.time()
                after = getattr(app.store, "commit_groups", (0, 0))
                why = wait_idle(app, pool, s.timeout)
        finally:
            problems = pool.stop()
            app.close()
        if failures:
            problems.append(f"submit failed: {failures[0]!r}")
        if why:
            return out, "; ".join([why, *problems])
        journal = Journal.read(url)
    problems += journal.check({ready, *ids})
    if problems:
        return out, "; ".join(problems)
    end = max(journal.completed[i] for i in ids)
    out["e2e_per_s"] = len(ids) / (end - first)
    out["submit_per_s"] = len(ids) / (submitted - first)
    groups, members = after[0] - before[0], after[1] - before[1]
    out["submits_per_txn"] = members / max(1, groups)
    out["claim_group"] = journal.mean_group(journal.claim_groups)
    out["end_group"] = journal.mean_group(journal.end_groups)
    if journal.transactions is not None:
        out["worker_txns_per_op"] = (journal.transactions - groups - 2) / len(ids)
    return out, ""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--submitters", default="4,16")
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=240.0)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-steady-") as tmp:
        s = Settings(args.n, args.concurrency, 0, 0.0, args.timeout, Path(tmp))
        stores = Stores(Path(tmp), "steady")
        for w in (int(x) for x in args.workers.split(",")):
            base, why = drain(stores, "postgresql", w, "process", s)
            rate = base.get("drain_journal_per_s", 0.0)
            print(f"drain W={w}: {rate:.0f} ops/s {why}", file=sys.stderr, flush=True)
            for c in (int(x) for x in args.submitters.split(",")):
                got, why = steady(stores, w, c, s)
                print(f"steady W={w} S={c}: {got} {why}", file=sys.stderr, flush=True)
                rows.append((w, c, got, rate, why))
    print("| workers | submitters | steady e2e ops/s | drain ops/s | ratio | submits/txn "
          "| claims/txn | ends/txn |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for w, c, got, rate, why in rows:
        if why:
            print(f"| {w} | {c} | FAILED: {why[:80]} | {rate:.0f} | | | | |")
            continue
        e2e = got["e2e_per_s"]
        print(
            f"| {w} | {c} | {e2e:.0f} | {rate:.0f} | {e2e / rate:.2f} | "
            f"{got['submits_per_txn']:.1f} | {got['claim_group']:.1f} | {got['end_group']:.1f} |"
        )


if __name__ == "__main__":
    main()
