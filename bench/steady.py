"""Steady state on PostgreSQL: completions per second while submitters and workers run at once,
beside the drain rate of the same work in the same run (figures printed, never asserted).

Per worker count W (1, 2, 4 `blackops worker` processes) and submitter count S (4, 16 threads
of this process, each calling ``app.submit`` in a loop; with --via http also S concurrent HTTP
clients of a `blackops serve` process without its own worker, each POSTing Deferred submits
one at a time), on fresh schemas, interleaved:

  drain    N operations submitted first, then W workers started; N / (first attempt.started
           to last operation.completed), as bench/operations.py measures it;
  steady   W workers running and answering; S threads submit N together; N / (first submit
           to last operation.completed).

Every run is read back by a fresh connection: each operation completed exactly once. Also
printed: how many appends shared a transaction in the submitting process (the commit queue),
and how many operations a worker transaction carried (distinct xmin per operation), and
the CPU time per operation of the submitting process and of the worker processes during the
steady window (on a CPU-bound machine the submitters' share is work the drain never times).

--peers: per W and S, also procrastinate measured the same way in the same run
(bench/procrastinate_steady.py, run by the peers' Python: /tmp/peers/.venv, see
/work/shared/peers/README.md; never imported here): its drain, and its W workers running
while S concurrent submitters defer N jobs; the ratio is ours ÷ its end-to-end rate.

Usage: .venv/bin/python bench/steady.py [--n 3000] [--workers 1,2,4] [--submitters 4,16]
       [--via threads,http] [--reps 1] [--peers] [--peers-python PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.append(str(Path(__file__).resolve().parent))

import httpx
from benchstores import POSTGRES, Stores
from http_bench import Server, ours
from operations import (
    TYPE,
    Journal,
    Settings,
    Workers,
    build,
    drain,
    peer_python,
    wait_idle,
    warm,
)

PEER_BENCH = Path(__file__).resolve().parent / "procrastinate_steady.py"


def procrastinate(
    python: str, workers: int, submitters: int, s: Settings
) -> tuple[dict[str, float], str]:
    """procrastinate's drain and steady state with the same W, S and N (its own database)."""
    command = [python, str(PEER_BENCH), "--conninfo", POSTGRES, "--n", str(s.n)]
    command += ["--workers", str(workers), "--submitters", str(submitters)]
    command += ["--concurrency", str(s.concurrency), "--timeout", str(s.timeout)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {}, f"procrastinate bench failed ({done.returncode}): {done.stderr[-300:]}"
    found = json.loads(lines[-1])
    return {k: float(v) for k, v in found.items() if isinstance(v, int | float)}, ""


@contextmanager
def server(url: str, home: Path) -> Iterator[Server]:
    """``blackops serve`` on ``url`` without its in-process worker (the W processes work)
    and without automatic checkpoints; its answers are Deferred submits."""
    with ours(url, home, worker=False, options=("--checkpoint-seconds", "0")) as served:
        yield Server(served.url, {**served.headers, "Prefer": "respond-async"}, served.process)


def submit_http(target: Server, clients: int, share: int, ids: list[str]) -> None:
    """``clients`` concurrent HTTP clients (one connection each) POST ``share`` Deferred
    submits each, one at a time; every answer must be 202."""

    async def run() -> None:
        limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
        async with httpx.AsyncClient(limits=limits, timeout=60) as client:

            async def one(t: int) -> None:
                for n in range(share):
                    body = b'{"t":%d,"n":%d}' % (t, n)
                    answer = await client.post(target.url, headers=target.headers, content=body)
                    if answer.status_code != 202:
                        raise RuntimeError(f"{answer.status_code} {answer.text[:200]}")
                    ids.append(answer.json()["operationId"])

            await asyncio.gather(*(one(t) for t in range(clients)))

    asyncio.run(run())


def steady(
    stores: Stores, workers: int, submitters: int, s: Settings, via: str = "threads"
) -> tuple[dict[str, float], str]:
    """``via``: "threads" of this process calling ``app.submit``, or "http" clients of a
    ``blackops serve`` process (its commit queue is not visible here: no submits/txn)."""
    out: dict[str, float] = {}
    with stores.fresh("postgresql") as url, ExitStack() as stack:
        app = build(url)
        warm(app)
        target = stack.enter_context(server(url, s.logs)) if via == "http" else None
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
                        if target is not None:
                            submit_http(target, submitters, share, ids)
                            return
                        for n in range(share):
                            ids.append(app.submit(TYPE, {"t": t, "n": n}, actor="b", tenant="b"))
                    except BaseException as error:
                        failures.append(error)

                count = 1 if target is not None else submitters
                threads = [threading.Thread(target=submit, args=(t,)) for t in range(count)]
                serving = target.process.pid if target is not None else None
                cpu = time.process_time(), worker_cpu(pool), process_cpu(serving)
                first = time.time()
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                submitted = time.time()
                after = getattr(app.store, "commit_groups", (0, 0))
                why = wait_idle(app, pool, s.timeout)
                cpu = (
                    time.process_time() - cpu[0],
                    worker_cpu(pool) - cpu[1],
                    process_cpu(serving) - cpu[2],
                )
        finally:
            problems = pool.stop()
            app.close()
        if failures:
            problems.append(f"submit failed: {failures[0]!r}")
        if why:
            return out, "; ".join([why, *problems])
        journal = Journal.read(url)
    problems += journal.check({ready, *ids})
    if target is not None:  # the server's own set-up (space, principal, token) is journaled
        problems = [p for p in problems if "(unexpected shape)" not in p]
    if problems:
        return out, "; ".join(problems)
    end = max(journal.completed[i] for i in ids)
    out["e2e_per_s"] = len(ids) / (end - first)
    out["submit_per_s"] = len(ids) / (submitted - first)
    groups, members = after[0] - before[0], after[1] - before[1]
    if target is None:
        out["submits_per_txn"] = members / max(1, groups)
    out["claim_group"] = journal.mean_group(journal.claim_groups)
    out["end_group"] = journal.mean_group(journal.end_groups)
    if journal.transactions is not None:
        out["worker_txns_per_op"] = (journal.transactions - groups - 2) / len(ids)
    # CPU per operation (ms): this process (the submitters) and the worker processes.
    # With HTTP clients the submitters are this process (the client) and the server.
    out["submit_cpu_ms"] = cpu[0] * 1000 / len(ids)
    out["worker_cpu_ms"] = cpu[1] * 1000 / len(ids)
    if target is not None:
        out["server_cpu_ms"] = cpu[2] * 1000 / len(ids)
    return out, ""


def worker_cpu(pool: Workers) -> float:
    """CPU seconds (user + system) the worker processes have used so far (Linux /proc)."""
    return sum(process_cpu(process.pid) for process, _ in pool.processes)


def process_cpu(pid: int | None) -> float:
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


Figures = dict[str, float]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--submitters", default="4,16")
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=240.0)
    parser.add_argument("--reps", type=int, default=1, help="repetitions, interleaved (1)")
    parser.add_argument("--via", default="threads", help="threads and/or http (threads)")
    parser.add_argument("--peers", action="store_true", help="also measure procrastinate")
    parser.add_argument("--peers-python", help="a Python with procrastinate installed")
    args = parser.parse_args()
    python = peer_python(args.peers_python) if args.peers else None
    if args.peers and python is None:
        print("--peers: procrastinate is not importable; skipped", file=sys.stderr)
    workers = [int(x) for x in args.workers.split(",")]
    submitters = [int(x) for x in args.submitters.split(",")]
    vias = [v for v in args.via.split(",") if v]
    if not vias or not set(vias) <= {"threads", "http"}:
        parser.error("--via takes threads and/or http")
    # (W, S, via) -> one dict per repetition: ours, our drain as "drain", "peer_*" figures
    runs: dict[tuple[int, int, str], list[Figures]] = {
        (w, c, v): [] for w in workers for c in submitters for v in vias
    }
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-steady-") as tmp:
        s = Settings(args.n, args.concurrency, 0, 0.0, args.timeout, Path(tmp))
        stores = Stores(Path(tmp), "steady")
        for rep in range(args.reps):
            for w in workers:
                base, why = drain(stores, "postgresql", w, "process", s)
                rate = base.get("drain_journal_per_s", 0.0)
                log(f"rep {rep + 1} drain W={w}: {rate:.0f} ops/s {why}")
                if why:
                    failures.append(f"rep {rep + 1} drain W={w}: {why}")
                    continue
                for c in submitters:
                    theirs: Figures = {}
                    if python is not None:
                        theirs, why = procrastinate(python, w, c, s)
                        log(f"rep {rep + 1} procrastinate W={w} S={c}: {theirs} {why}")
                        if why:
                            failures.append(f"rep {rep + 1} procrastinate W={w} S={c}: {why}")
                    for via in vias:
                        got, why = steady(stores, w, c, s, via)
                        log(f"rep {rep + 1} steady W={w} S={c} via {via}: {got} {why}")
                        if why:
                            failures.append(f"rep {rep + 1} steady W={w} S={c} {via}: {why}")
                            continue
                        got["drain"] = rate
                        got.update({f"peer_{k}": v for k, v in theirs.items()})
                        runs[(w, c, via)].append(got)
    table(runs, args.reps)
    if failures:
        print("\nFAILED (what was persisted is not what the run claims, or a peer run failed):")
        for failure in failures:
            print(f"  {failure}")
        raise SystemExit(2)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def spread(values: list[float], digits: int = 0) -> str:
    """Median, and (min-max) when there is more than one value."""
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{mid:.{digits}f} ({low:.{digits}f}-{high:.{digits}f})"


def table(runs: dict[tuple[int, int, str], list[Figures]], reps: int) -> None:
    """Medians over the repetitions; every ratio is taken within one repetition first."""
    peers = any("peer_e2e_per_s" in r for got in runs.values() for r in got)
    print(f"Steady state, PostgreSQL: {'median (min-max) of ' if reps > 1 else ''}{reps} run(s)")
    head = "| workers | submitters | via | steady e2e ops/s | drain ops/s | ratio (goal ≥ 0.8) "
    head += "| submits/txn | claims/txn | ends/txn | CPU ms/op: submitters (+ server), workers |"
    rule = "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"
    if peers:
        head += " procrastinate steady / drain jobs/s | ours ÷ procrastinate (goal ≥ 3) |"
        rule += "---:|---:|"
    print(head)
    print(rule)
    for (w, c, via), got in runs.items():

        def values(key: str, got: list[Figures] = got) -> list[float]:
            return [r[key] for r in got if key in r]

        ratio = [r["e2e_per_s"] / r["drain"] for r in got]
        line = (
            f"| {w} | {c} | {via} | {spread(values('e2e_per_s'))} | {spread(values('drain'))} "
            f"| {spread(ratio, 2)} | {spread(values('submits_per_txn'), 1)} "
            f"| {spread(values('claim_group'), 1)} | {spread(values('end_group'), 1)} "
            f"| {spread(values('submit_cpu_ms'), 2)}"
            + (f" + {spread(values('server_cpu_ms'), 2)}" if via == "http" else "")
            + f", {spread(values('worker_cpu_ms'), 2)} |"
        )
        if peers:
            theirs = [r for r in got if "peer_e2e_per_s" in r]
            versus = [r["e2e_per_s"] / r["peer_e2e_per_s"] for r in theirs]
            line += (
                f" {spread([r['peer_e2e_per_s'] for r in theirs])} / "
                f"{spread([r['peer_drain_per_s'] for r in theirs])} | {spread(versus, 2)} |"
            )
        print(line)


if __name__ == "__main__":
    main()
