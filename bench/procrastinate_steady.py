"""procrastinate measured like bench/steady.py measures us (figures printed, never asserted).

Run by a Python that has procrastinate installed (the peers' virtual environment, see
bench/steady.py --peers), never by ours: nothing of BlackOps is imported here, and nothing
of procrastinate is imported by BlackOps.

On a fresh database (dropped and created again):

  drain    N no-op jobs deferred one by one, then W worker processes started; N / (first
           job started to last job succeeded, from procrastinate_events);
  steady   W worker processes running (a warm-up job answered first); S concurrent
           submitters (asyncio tasks of this process, one pooled connection each) defer N
           jobs together, one at a time each; N / (first defer to last job succeeded).

Workers are `python procrastinate_steady.py --role worker` processes (concurrency C,
LISTEN/NOTIFY on, polling fallback 0.5 s as in the peers' harness, jobs kept). Every run is
read back by SQL: N jobs of the run's queue, all succeeded with distinct args, and N
succeeded events. Prints one JSON line.

Usage: python bench/procrastinate_steady.py --conninfo postgresql://... --workers 2
       --submitters 16 [--n 2000] [--concurrency 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

DATABASE = "peer_procrastinate_steady"
HERE = Path(__file__).resolve()


def database_url(admin: str, name: str) -> str:
    parts = urlsplit(admin)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, "", ""))


def make_app(conninfo: str, pool: int) -> tuple[Any, Any]:
    import procrastinate  # type: ignore[import-not-found]  # the peers' environment only

    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(conninfo=conninfo, min_size=1, max_size=pool)
    )

    @app.task(name="noop")  # type: ignore[untyped-decorator]
    async def noop(i: int) -> int:
        return i

    return app, noop


WORKER_OPTIONS: dict[str, Any] = {
    "delete_jobs": "never",
    "fetch_job_polling_interval": 0.5,
    "update_heartbeat_interval": 10,
}


async def run_worker(conninfo: str, queue: str, concurrency: int) -> None:
    app, _ = make_app(conninfo, concurrency + 4)
    async with app.open_async():
        await app.run_worker_async(
            queues=[queue], concurrency=concurrency, wait=True, **WORKER_OPTIONS
        )


class Workers:
    def __init__(self, conninfo: str, queue: str, count: int, concurrency: int) -> None:
        command = [sys.executable, str(HERE), "--role", "worker", "--conninfo", conninfo]
        command += ["--queue", queue, "--concurrency", str(concurrency)]
        self.processes = [subprocess.Popen(command) for _ in range(count)]

    def stop(self) -> None:
        for process in self.processes:
            process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def succeeded(conn: psycopg.Connection[Any], queue: str) -> int:
    row = conn.execute(
        "SELECT count(*) FROM procrastinate_jobs WHERE queue_name = %s AND status = 'succeeded'",
        (queue,),
    ).fetchone()
    return int(row[0]) if row else 0


def wait_done(conninfo: str, queue: str, n: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    with psycopg.connect(conninfo, autocommit=True) as conn:
        while succeeded(conn, queue) < n:
            if time.monotonic() > deadline:
                raise SystemExit(f"{queue}: not all {n} jobs succeeded after {timeout:g} s")
            time.sleep(0.02)


def verify(conninfo: str, queue: str, n: int) -> tuple[float, float]:
    """Exactly n succeeded jobs with distinct args and n succeeded events; returns the first
    started and last succeeded instants (epoch seconds)."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT status, count(*), count(DISTINCT args) FROM procrastinate_jobs "
            "WHERE queue_name = %s GROUP BY status",
            (queue,),
        ).fetchall()
        got = {str(r[0]): (int(r[1]), int(r[2])) for r in rows}
        if got != {"succeeded": (n, n)}:
            raise SystemExit(f"{queue}: expected {n} succeeded distinct jobs, found {got}")
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE e.type = 'succeeded'), "
            "extract(epoch FROM min(e.at) FILTER (WHERE e.type = 'started')), "
            "extract(epoch FROM max(e.at) FILTER (WHERE e.type = 'succeeded')) "
            "FROM procrastinate_events e JOIN procrastinate_jobs j ON j.id = e.job_id "
            "WHERE j.queue_name = %s",
            (queue,),
        ).fetchone()
    assert row is not None
    if int(row[0]) != n:
        raise SystemExit(f"{queue}: expected {n} succeeded events, found {row[0]}")
    return float(row[1]), float(row[2])


async def defer_all(noop: Any, queue: str, n: int, submitters: int) -> None:
    task = noop.configure(queue=queue)
    share = n // submitters

    async def one(t: int) -> None:
        for k in range(share):
            await task.defer_async(i=t * share + k)

    await asyncio.gather(*(one(t) for t in range(submitters)))


async def bench(args: argparse.Namespace, conninfo: str) -> dict[str, float]:
    app, noop = make_app(conninfo, args.submitters + 2)
    n = (args.n // args.submitters) * args.submitters
    out: dict[str, float] = {"n": n}
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        # drain: defer first, then start the workers
        for k in range(n):
            await noop.configure(queue="drain").defer_async(i=k)
        pool = Workers(conninfo, "drain", args.workers, args.concurrency)
        try:
            wait_done(conninfo, "drain", n, args.timeout)
        finally:
            pool.stop()
        first, last = verify(conninfo, "drain", n)
        out["drain_per_s"] = n / (last - first)
        # steady: workers running and answering, then S submitters at once
        pool = Workers(conninfo, "steady", args.workers, args.concurrency)
        try:
            await noop.configure(queue="steady").defer_async(i=-1)
            wait_done(conninfo, "steady", 1, args.timeout)
            start = time.time()
            await defer_all(noop, "steady", n, args.submitters)
            submitted = time.time()
            wait_done(conninfo, "steady", n + 1, args.timeout)
        finally:
            pool.stop()
        _, last = verify(conninfo, "steady", n + 1)
        out["e2e_per_s"] = n / (last - start)
        out["submit_per_s"] = n / (submitted - start)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--role", choices=["bench", "worker"], default="bench")
    parser.add_argument("--conninfo", required=True, help="admin URL (bench) or the database")
    parser.add_argument("--queue", default="steady")
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--submitters", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=240.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    # Its "app in the main module" warning concerns importing tasks by path; ours are here.
    logging.getLogger("procrastinate.blueprints").setLevel(logging.ERROR)
    if args.role == "worker":
        asyncio.run(run_worker(args.conninfo, args.queue, args.concurrency))
        return
    with psycopg.connect(args.conninfo, autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(DATABASE))
        )
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))
    conninfo = database_url(args.conninfo, DATABASE)
    try:
        result = asyncio.run(bench(args, conninfo))
    finally:
        with psycopg.connect(args.conninfo, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(DATABASE))
            )
    print(json.dumps({"bench": "procrastinate_steady", "ok": True, **result}))


if __name__ == "__main__":
    main()
