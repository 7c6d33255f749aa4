"""The read side under a growing journal (printed, not asserted).

For journals of 20,000 and 200,000 events (2,000,000 with --huge), on SQLite and PostgreSQL,
in the same run:

  listings      first-page and tenth-page latency of every listing (operations with each
                filter it has an index for; instances of a Workflow, with and without a
                status), the median of several calls, through the projections as a route
                calls them
  HTTP          request rates of `GET /v1/operations/{id}` (status) and `GET /v1/operations`
                (first page) at 1, 8 and 32 concurrent clients against a real `blackops
                serve` process on 127.0.0.1
  stream        latency from an append's commit (in another process) to its line arriving on
                an open `GET /v1/journal/stream`

The journal is grown in place (20,000, then 200,000, ...), so each size adds to the last.
A listing that is an index range scan costs the same at every size: compare the rows.

Usage: .venv/bin/python bench/read_api.py [--huge] [--stores sqlite,postgresql]
(BLACKOPS_BENCH_POSTGRES_URL overrides the server).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

# Runnable as a plain script: the project first (bench/journal.py would shadow ``journal``).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.append(str(Path(__file__).resolve().parent))  # benchstores

import httpx
from benchstores import Stores

from domain.events import NewEvent
from journal.store import Append, EventStore
from projections.catalog import Projections

ROOT = Path(__file__).resolve().parent.parent
TENANTS = ["acme", "globex", "initech", "umbrella"]
TYPES = ["shop.order", "shop.refund", "shop.invoice", "shop.ship", "shop.audit"]
WORKFLOWS = ["wf-" + "a" * 32, "wf-" + "b" * 32]
BASE = datetime(2026, 11, 1, tzinfo=UTC)
PAGE = 50


def instant(n: int) -> str:
    return (BASE + timedelta(microseconds=n * 1000)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def operation(n: int, operation_id: str) -> list[NewEvent]:
    """Operation ``n``: one of three endings (completed, failed, still queued)."""
    at = instant(n)
    tenant, kind = TENANTS[n % len(TENANTS)], TYPES[n % len(TYPES)]
    context = {"operation_id": operation_id, "operation_type": kind,
               "actor": {"id": "ana", "kind": "principal"}, "tenant": tenant, "attempt": 1,
               "correlation_id": operation_id}  # fmt: skip
    claim = {"attempt": 1, "fencing_token": 1, "worker": "w", "lease_expires_at": at}
    events = [
        NewEvent("operation.received", at, context, {
            "operation_type": kind, "mode": "deferred", "tenant": tenant,
            "correlation_id": operation_id, "params": {"n": n}}),
        NewEvent("operation.accepted", at, context, {}),
    ]  # fmt: skip
    if n % 3 == 2:
        return events
    events += [NewEvent("attempt.started", at, context, claim),
               NewEvent("attempt.finalizing", at, context, {"attempt": 1})]  # fmt: skip
    ending = "operation.completed" if n % 3 == 0 else "operation.failed"
    events.append(NewEvent(ending, at, context, {
        "attempt": 1, "outcome_type": None, "outcome_schema_version": 1,
        "outcome_digest": None, "outcome_recorded": False}))  # fmt: skip
    return events


def instance(n: int) -> list[NewEvent]:
    """Instance ``n`` of one of two Workflows: queued or complete."""
    at = instant(n)
    workflow = WORKFLOWS[n % len(WORKFLOWS)]
    context = {"tenant": TENANTS[0], "actor": {"id": "ana", "kind": "principal"}}
    events = [NewEvent("workflow.created", at, context,
                       {"workflow": workflow, "instance_id": f"i-{n}", "params": {}})]  # fmt: skip
    if n % 3 >= 1:
        events.append(NewEvent("workflow.completed", at, context, {"output": None}))
    return events


class Journal:
    """Grows one store to a number of events, remembering one operation id for status."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self.events = 0
        self.made = 0
        self.first_operation = ""

    def grow(self, target: int) -> None:
        while self.events < target:
            batch: list[Append] = []
            for _ in range(40):
                n = self.made
                self.made += 1
                stream = str(uuid.uuid4())
                made = instance(n) if n % 10 == 9 else operation(n, stream)
                self.first_operation = self.first_operation or stream
                batch.append(Append(stream, 0, made))
                self.events += len(made)
            self.store.append(*batch)


def median_ms(call: Callable[[], object], repeat: int = 7) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def listing_rows(projections: Projections) -> list[tuple[str, float, float]]:
    """(listing, first page ms, tenth page ms) for every indexed listing."""
    cases: list[tuple[str, Callable[[str | None], dict[str, Any]]]] = []
    for label, filters in [
        ("operations", {}),
        ("operations tenant", {"tenant": "acme"}),
        ("operations tenant+status", {"tenant": "acme", "status": "completed"}),
        ("operations tenant+type", {"tenant": "acme", "type": "shop.order"}),
        ("operations status", {"status": "failed"}),
        ("operations type", {"type": "shop.refund"}),
    ]:
        cases.append((label, lambda c, f=filters: projections.list_operations(  # type: ignore[misc]
            limit=PAGE, cursor=c, **f)))  # fmt: skip
    for label, status in [("instances", None), ("instances status", "complete")]:
        cases.append((label, lambda c, s=status: projections.list_instances(  # type: ignore[misc]
            WORKFLOWS[0], status=s, limit=PAGE, cursor=c)))  # fmt: skip
    rows = []
    for label, page in cases:
        first = median_ms(lambda page=page: page(None))  # type: ignore[misc]
        cursor: str | None = None
        for _ in range(9):
            cursor = page(cursor)["next"]
        tenth = median_ms(lambda page=page, cursor=cursor: page(cursor))  # type: ignore[misc]
        rows.append((label, first, tenth))
    return rows


@contextlib.contextmanager
def served(store: str, home: Path) -> Iterator[tuple[str, str]]:
    """A real ``blackops serve`` (no worker) on a free port: (base url, system token)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "BLACKOPS_HOME": str(home), "BLACKOPS_DEV_TOKEN": ""}
    log = open(home / "serve.log", "w")  # noqa: SIM115 (closed below)
    process = subprocess.Popen(
        [sys.executable, "-m", "blackops", "serve", "--app", "examples.shop:app", "--no-worker",
         "--port", str(port), "--store", store, "--heartbeat-seconds", "5"],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/openapi.json", timeout=1).status_code == 200:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((home / "serve.log").read_text()[-2000:])
            time.sleep(0.1)
        yield url, (home / "dev-token").read_text().strip()
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


async def request_rate(url: str, token: str, path: str, clients: int, seconds: float) -> float:
    """Requests per second (each answered 200) from ``clients`` concurrent loops."""
    done = 0
    headers = {"Authorization": f"Bearer {token}"}
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits) as client:
        await client.get(path)  # warm up
        stop = time.perf_counter() + seconds

        async def loop() -> None:
            nonlocal done
            while time.perf_counter() < stop:
                answer = await client.get(path)
                if answer.status_code != 200:
                    raise RuntimeError(f"{path}: {answer.status_code} {answer.text[:200]}")
                done += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(loop() for _ in range(clients)))
        return done / (time.perf_counter() - t0)


def stream_latency(url: str, token: str, store: EventStore, journal: Journal) -> float:
    """Median ms from an append's commit (this process) to its line on an open stream."""
    import threading

    last = store.last_position() or 0
    arrived: dict[int, float] = {}
    ready = threading.Event()

    def listen() -> None:
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.stream("GET", f"{url}/v1/journal/stream?after={last}&max_seconds=60",
                          headers=headers, timeout=70) as response:  # fmt: skip
            ready.set()
            for line in response.iter_lines():
                if line.startswith("id: "):
                    arrived[int(line[4:])] = time.perf_counter()
                    if len(arrived) >= 20:
                        return

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    ready.wait(30)
    time.sleep(0.5)
    committed: dict[int, float] = {}
    for _ in range(20):
        n = journal.made
        journal.made += 1
        stream = str(uuid.uuid4())
        store.append(Append(stream, 0, operation(n, stream)[:1]))
        committed[store.last_position() or 0] = time.perf_counter()
        time.sleep(0.1)
    listener.join(30)
    delays = [arrived[p] - t for p, t in committed.items() if p in arrived]
    if len(delays) < len(committed):
        return float("nan")
    return statistics.median(delays) * 1000


def run(kind: str, url: str, sizes: list[int], home: Path) -> None:
    store = EventStore(url)
    journal = Journal(store)
    try:
        for size in sizes:
            t0 = time.perf_counter()
            journal.grow(size)
            grown = time.perf_counter() - t0
            projections = Projections(store)
            t0 = time.perf_counter()
            for name in ("operation_status", "operation_counts", "instance_status",
                         "instance_counts"):  # fmt: skip
                projections.runner(name).catch_up()
            caught = time.perf_counter() - t0
            print(f"\n{kind}, {journal.events:,} events (appended in {grown:.1f} s, "
                  f"projections caught up in {caught:.1f} s)")  # fmt: skip
            print(f"  {'listing':<26} {'first page':>11} {'tenth page':>11}   (ms, median)")
            for label, first, tenth in listing_rows(projections):
                print(f"  {label:<26} {first:>11.2f} {tenth:>11.2f}")
            with served(url, home / f"{kind}-{size}") as (base, token):
                paths = {
                    "status": f"/v1/operations/{journal.first_operation}",
                    "listing": f"/v1/operations?limit={PAGE}",
                }
                for label, path in paths.items():
                    rates = [asyncio.run(request_rate(base, token, path, c, 3.0))
                             for c in (1, 8, 32)]  # fmt: skip
                    print(
                        f"  HTTP {label:<9} req/s at 1/8/32 clients: "
                        + " / ".join(f"{r:,.0f}" for r in rates)
                    )
                print(
                    f"  stream latency (commit -> line): "
                    f"{stream_latency(base, token, store, journal):.1f} ms median"
                )
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--huge", action="store_true", help="also 2,000,000 events")
    parser.add_argument("--stores", default="sqlite,postgresql")
    parser.add_argument("--sizes", default="20000,200000", help="comma-separated event counts")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")] + ([2_000_000] if args.huge else [])
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        for kind in args.stores.split(","):
            for size in sizes:
                (tmp / f"{kind}-{size}").mkdir()
            with Stores(tmp, "read").fresh(kind) as url:
                run(kind, url, sizes, tmp)


if __name__ == "__main__":
    main()
