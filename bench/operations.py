"""Deferred no-op operations on SQLite and PostgreSQL: drain rate and latencies (printed only).

Per repetition, every scenario on a fresh store (a new SQLite file, a new PostgreSQL schema that
is dropped afterwards), interleaved so that machine noise hits all of them alike:

  drain       submit N operations one by one (that is also the submit-latency sample), then
              start the worker(s) and time until all N are completed, as procrastinate's peer
              bench does. "wall" counts from spawning the workers (process start included);
              "journal" from the first attempt.started to the last operation.completed.
  concurrent  start the worker(s), then submit N one by one; first submit to last completed.
  low load    one running worker; 200 submits ~10 ms apart; latency = operation.completed `at`
              (taken just before its commit) - submit start, both from the system clock.
  raw PG      single-row INSERT + COMMIT from one psycopg connection: the physical limit.
  --peers     procrastinate's no-op bench (/work/shared/peers) with --reps 1, in each rep.

Workers are `blackops worker` OS processes unless said otherwise (SQLite: --sqlite-worker).
After every scenario a fresh store connection reads the whole journal back and checks that every
operation was completed exactly once (one operation.completed, one outcome.recorded).

Usage: .venv/bin/python bench/operations.py [--n 2000] [--reps 3] [--peers] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runnable as a plain script
sys.path.append(str(Path(__file__).resolve().parent))  # benchstores, also when imported as bench.x

import psycopg
from benchstores import POSTGRES, Stores, drop_schema
from psycopg import sql

from blackops import Application, ExecutionContext
from blackops.worker import Worker, WorkerOptions
from journal.store import EventStore

ROOT = Path(__file__).resolve().parent.parent
PEERS = Path(os.environ.get("BLACKOPS_BENCH_PEERS", "/work/shared/peers"))
TYPE = "bench.noop"
CLI = Path(sys.executable).with_name("blackops")
EVENTS_PER_OPERATION = 6  # received, accepted, attempt.started, finalizing, completed, outcome


def build(store: str | None) -> Application:
    app = Application(store)

    @app.operation(TYPE)
    def noop(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        return None

    return app


#: What the worker processes run: `blackops worker --app bench.operations:WORKER_APP --store URL`.
WORKER_APP = build(None)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def instant(at: str) -> float:
    return datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()


def quantile(values: list[float], q: int) -> float:
    """The q-th percentile (1..99) of ``values``."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


# -- stores ----------------------------------------------------------------------------------


# -- workers ---------------------------------------------------------------------------------


class Workers:
    """``count`` workers on ``url``: `blackops worker` processes, or threads of this process."""

    def __init__(
        self, app: Application, url: str, count: int, concurrency: int, mode: str, logs: Path
    ) -> None:
        self.app, self.url, self.count, self.concurrency, self.mode = (
            app,
            url,
            count,
            concurrency,
            mode,
        )
        self.logs = logs
        self.processes: list[tuple[subprocess.Popen[bytes], Path]] = []
        self.threads: list[Worker] = []

    def start(self) -> float:
        """Start them; returns the wall-clock start time."""
        started = time.time()
        for index in range(self.count):
            if self.mode == "thread":
                self.threads.append(self.app.worker(concurrency=self.concurrency).start())
                continue
            path = self.logs / f"worker-{uuid.uuid4().hex[:8]}-{index}.log"
            with path.open("wb") as out:
                command = [
                    str(CLI),
                    "worker",
                    "--app",
                    "bench.operations:WORKER_APP",
                    "--store",
                    self.url,
                    "--concurrency",
                    str(self.concurrency),
                    "--grace-seconds",
                    "5",
                ]
                process = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
            self.processes.append((process, path))
        return started

    def dead(self) -> list[str]:
        return [
            f"worker process exited with {p.returncode}: {tail(path)}"
            for p, path in self.processes
            if p.poll() is not None
        ]

    def stop(self) -> list[str]:
        """Stop them all (SIGTERM for processes); returns problems seen."""
        problems = self.dead()
        for worker in self.threads:
            worker.stop(5)
        for process, _ in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process, path in self.processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                problems.append(f"worker process {process.pid} ignored SIGTERM: {tail(path)}")
        return problems


def tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def wait_idle(app: Application, workers: Workers | None, timeout: float) -> str | None:
    """Wait until no operation of TYPE is left in the due-work index; None, or why not."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if app.store.next_due([TYPE]) is None:
            return None
        if workers and workers.processes and len(workers.dead()) == len(workers.processes):
            return "every worker process died: " + "; ".join(workers.dead())
        time.sleep(0.02)
    return f"operations still pending after {timeout:g} s"


# -- reading the journal back ----------------------------------------------------------------


@dataclass
class Journal:
    """What a fresh connection reads back after a scenario."""

    events: int = 0
    received: dict[str, float] = field(default_factory=dict)
    started: Counter[str] = field(default_factory=Counter)
    completed: dict[str, float] = field(default_factory=dict)
    completions: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    started_at: list[float] = field(default_factory=list)
    claim_groups: Counter[str] = field(default_factory=Counter)  # `at` -> claims in that commit
    end_groups: Counter[str] = field(default_factory=Counter)  # `at` -> completions in it
    #: PostgreSQL: distinct xmin (inserting transaction) among the events, in the table that
    #: eventsourcing names after the Environment ("blackops") in journal/store.py.
    transactions: int | None = None

    @classmethod
    def read(cls, url: str) -> Journal:
        found = cls()
        with EventStore(url) as store:
            for event in store.iter_after(0, page=5000):
                found.events += 1
                if event.type == "operation.received":
                    found.received[event.stream] = instant(event.at)
                elif event.type == "attempt.started":
                    found.started[event.stream] += 1
                    found.started_at.append(instant(event.at))
                    found.claim_groups[event.at] += 1
                elif event.type == "operation.completed":
                    found.completions[event.stream] += 1
                    found.completed[event.stream] = instant(event.at)
                    found.end_groups[event.at] += 1
                elif event.type == "outcome.recorded":
                    found.outcomes[event.data["operation_id"]] += 1
            if store.location.kind == "postgresql":
                schema = store.settings["POSTGRES_SCHEMA"]
                with psycopg.connect(POSTGRES, autocommit=True) as conn:
                    row = conn.execute(
                        sql.SQL("SELECT count(DISTINCT xmin::text) FROM {}.blackops_events").format(
                            sql.Identifier(schema)
                        )
                    ).fetchone()
                    found.transactions = int(row[0]) if row else None
        return found

    def check(self, ids: set[str]) -> list[str]:
        """Every operation in ``ids`` completed exactly once, and nothing else is there."""
        problems = []
        if set(self.received) != ids:
            problems.append(f"{len(self.received)} operations received, {len(ids)} submitted")
        missing = ids - set(self.completed)
        if missing:
            problems.append(f"{len(missing)} of {len(ids)} operations never completed")
        twice = [i for i, n in self.completions.items() if n != 1]
        if twice:
            problems.append(f"{len(twice)} operations have more than one operation.completed")
        if set(self.outcomes) != ids or any(n != 1 for n in self.outcomes.values()):
            problems.append(f"{sum(self.outcomes.values())} outcome records for {len(ids)} ops")
        if not self.extra_claims and self.events != EVENTS_PER_OPERATION * len(ids):
            problems.append(f"{self.events} events for {len(ids)} operations (unexpected shape)")
        return problems

    @property
    def extra_claims(self) -> int:
        return sum(self.started.values()) - len(self.started)

    def last_completed(self) -> float:
        return max(self.completed.values())

    def mean_group(self, groups: Counter[str]) -> float:
        return sum(groups.values()) / max(1, len(groups))


# -- scenarios -------------------------------------------------------------------------------


@dataclass
class Settings:
    n: int
    concurrency: int
    low_load: int
    spacing: float
    timeout: float
    logs: Path


Figures = dict[str, float]


def submit_many(app: Application, count: int) -> tuple[list[str], list[float], float]:
    """Submit ``count`` operations one at a time; ids, latencies (s), and first start time."""
    ids, latencies = [], []
    first = time.time()
    for n in range(count):
        start = time.perf_counter()
        ids.append(app.submit(TYPE, {"n": n}, actor="bench", tenant="bench"))
        latencies.append(time.perf_counter() - start)
    return ids, latencies, first


def warm(app: Application) -> None:
    """Open the store (and create it) and take the first-call costs outside the timings."""
    app.store.last_position()


def drain(stores: Stores, kind: str, workers: int, mode: str, s: Settings) -> tuple[Figures, str]:
    """Submit N, then start the workers and time until all N are completed."""
    out: Figures = {}
    with stores.fresh(kind) as url:
        app = build(url)
        warm(app)
        ids, latencies, _ = submit_many(app, s.n)
        out["submit_per_s"] = s.n / sum(latencies)
        out["submit_p50_ms"] = quantile(latencies, 50) * 1000
        out["submit_p99_ms"] = quantile(latencies, 99) * 1000
        pool = Workers(app, url, workers, s.concurrency, mode, s.logs)
        spawned = pool.start()
        try:
            why = wait_idle(app, pool, s.timeout)
        finally:
            problems = pool.stop()
            app.close()
        journal = Journal.read(url)
    problems += journal.check(set(ids))
    if why:
        problems.insert(0, why)
    if problems:
        return out, "; ".join(problems)
    end = journal.last_completed()
    out["drain_wall_per_s"] = s.n / (end - spawned)
    out["drain_journal_per_s"] = s.n / (end - min(journal.started_at))
    out["claim_group"] = journal.mean_group(journal.claim_groups)
    out["end_group"] = journal.mean_group(journal.end_groups)
    out["extra_claims"] = journal.extra_claims
    if journal.transactions is not None:
        out["worker_txns_per_op"] = (journal.transactions - s.n) / s.n
    return out, ""


def concurrent(
    stores: Stores, kind: str, workers: int, mode: str, s: Settings
) -> tuple[Figures, str]:
    """Workers already running; submit N one by one; first submit to last completed."""
    out: Figures = {}
    with stores.fresh(kind) as url:
        app = build(url)
        warm(app)
        pool = Workers(app, url, workers, s.concurrency, mode, s.logs)
        pool.start()
        try:
            ready = app.submit(
                TYPE, {"n": -1}, actor="bench", tenant="bench"
            )  # wait until a worker answers
            why = wait_idle(app, pool, s.timeout)
            if not why:
                ids, latencies, first = submit_many(app, s.n)
                submitted = time.time()
                why = wait_idle(app, pool, s.timeout)
        finally:
            problems = pool.stop()
            app.close()
        if why:
            return out, "; ".join([why, *problems])
        journal = Journal.read(url)
    problems += journal.check({ready, *ids})
    if problems:
        return out, "; ".join(problems)
    end = max(journal.completed[i] for i in ids)
    out["e2e_per_s"] = s.n / (end - first)
    out["submit_per_s"] = s.n / (submitted - first)
    out["submit_p50_ms"] = quantile(latencies, 50) * 1000
    out["claim_group"] = journal.mean_group(journal.claim_groups)
    out["end_group"] = journal.mean_group(journal.end_groups)
    return out, ""


def low_load(stores: Stores, kind: str, mode: str, s: Settings) -> tuple[Figures, str]:
    """One running worker; operations submitted ~spacing apart; submit-to-completed."""
    out: Figures = {}
    with stores.fresh(kind) as url:
        app = build(url)
        warm(app)
        pool = Workers(app, url, 1, s.concurrency, mode, s.logs)
        pool.start()
        starts: dict[str, float] = {}
        try:
            ready = app.submit(TYPE, {"n": -1}, actor="bench", tenant="bench")
            why = wait_idle(app, pool, s.timeout)
            if not why:
                tick = time.perf_counter()
                for n in range(s.low_load):
                    start = time.time()
                    starts[app.submit(TYPE, {"n": n}, actor="bench", tenant="bench")] = start
                    tick += s.spacing
                    time.sleep(max(0.0, tick - time.perf_counter()))
                why = wait_idle(app, pool, s.timeout)
        finally:
            problems = pool.stop()
            app.close()
        if why:
            return out, "; ".join([why, *problems])
        journal = Journal.read(url)
    problems += journal.check({ready, *starts})
    if problems:
        return out, "; ".join(problems)
    latencies = [journal.completed[i] - start for i, start in starts.items()]
    out["p50_ms"] = quantile(latencies, 50) * 1000
    out["p99_ms"] = quantile(latencies, 99) * 1000
    out["max_ms"] = max(latencies) * 1000
    return out, ""


def raw_postgres(rows: int) -> tuple[Figures, str]:
    """Single-row INSERT + COMMIT from one connection, on a scratch table in a fresh schema."""
    schema = f"bench_raw_{uuid.uuid4().hex[:8]}"
    table = sql.Identifier(schema, "raw")
    try:
        with psycopg.connect(POSTGRES, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
            admin.execute(
                sql.SQL("CREATE TABLE {} (id bigserial PRIMARY KEY, seq int, body text)").format(
                    table
                )
            )
        insert = sql.SQL("INSERT INTO {} (seq, body) VALUES (%s, %s)").format(table)
        with psycopg.connect(POSTGRES) as conn:
            for n in range(50):  # warm-up
                conn.execute(insert, (-1 - n, "warm"))
                conn.commit()
            start = time.perf_counter()
            for n in range(rows):
                conn.execute(insert, (n, "x" * 64))
                conn.commit()
            elapsed = time.perf_counter() - start
        with psycopg.connect(POSTGRES, autocommit=True) as check:
            query = sql.SQL("SELECT count(*), count(DISTINCT seq) FROM {} WHERE seq >= 0")
            row = check.execute(query.format(table)).fetchone()
        if row != (rows, rows):
            return {}, f"raw table holds {row}, expected {rows} distinct rows"
        return {"commits_per_s": rows / elapsed}, ""
    finally:
        drop_schema(schema)


def peer_python(given: str | None) -> str | None:
    """A Python that can import procrastinate: --peers-python, /tmp/peers/.venv, or ours."""
    candidates = [given] if given else ["/tmp/peers/.venv/bin/python", sys.executable]
    for python in candidates:
        if Path(python).exists():
            probe = subprocess.run(
                [python, "-c", "import procrastinate"], capture_output=True, check=False
            )
            if probe.returncode == 0:
                return python
    return None


def procrastinate(python: str, n: int) -> tuple[Figures, str]:
    """procrastinate_bench.py --reps 1 (its own database, peer_procrastinate)."""
    parts = urlsplit(POSTGRES)
    env = {
        **os.environ,
        "PEER_PG_HOST": parts.hostname or "127.0.0.1",
        "PEER_PG_PORT": str(parts.port or 5432),
        "PEER_PG_USER": parts.username or "postgres",
    }
    command = [python, str(PEERS / "procrastinate_bench.py"), "--n", str(n), "--reps", "1"]
    command += ["--concurrency", "10"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    lines = done.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        return {}, f"procrastinate bench printed no result: {done.stderr.strip()[-400:]}"
    if not result.get("ok", True) or "results" not in result:
        return {}, f"procrastinate bench failed: {lines[-1][:400]}"
    return {k: float(v["median"]) for k, v in result["results"].items()}, ""


# -- profile ---------------------------------------------------------------------------------


class ProfiledWorker(Worker):
    """A worker whose coordinator thread (every journal read and write) runs under cProfile."""

    profile: cProfile.Profile | None = None

    def _loop(self) -> None:
        self.profile = cProfile.Profile()
        self.profile.runcall(super()._loop)


def profile_drain(stores: Stores, s: Settings) -> None:
    """One PostgreSQL drain with an in-process worker under cProfile; where its time goes."""
    with stores.fresh("postgresql") as url:
        app = build(url)
        warm(app)
        ids, _, _ = submit_many(app, s.n)
        calls: Counter[str] = Counter()
        events: Counter[str] = Counter()
        original = app.store.append

        def counted(*appends: Any) -> list[list[int]]:
            topics = {e.type for a in appends for e in a.events}
            kind = "claim" if "attempt.started" in topics else "end"
            calls[kind] += 1
            events[kind] += sum(1 for a in appends if not a.stream.startswith("outcome:"))
            return original(*appends)

        app.store.append = counted  # type: ignore[method-assign]
        worker = ProfiledWorker(app.runtime, WorkerOptions(concurrency=s.concurrency))
        start = time.perf_counter()
        worker.start()
        why = wait_idle(app, None, s.timeout)
        elapsed = time.perf_counter() - start
        worker.stop(5)
        app.close()
        problems = Journal.read(url).check(set(ids))
    if why or problems:
        print(f"\nprofile run FAILED: {why or '; '.join(problems)}")
        return
    print(
        f"\nProfile: PostgreSQL drain of {s.n} with one in-process worker (concurrency "
        f"{s.concurrency}) under cProfile: {s.n / elapsed:.0f} ops/s (profiler overhead included)"
    )
    for kind in ("claim", "end"):
        if calls[kind]:
            print(
                f"  {kind:<5} appends: {calls[kind]:>5} transactions, "
                f"{events[kind] / calls[kind]:.1f} operations each on average"
            )
    assert worker.profile is not None
    stats = pstats.Stats(worker.profile)
    entries: dict[tuple[str, int, str], Any] = stats.stats  # type: ignore[attr-defined]
    wall = elapsed
    wanted = {
        ("store.py", "append"): "EventStore.append (claims + ends)",
        ("store.py", "reserve_due"): "EventStore.reserve_due",
        ("store.py", "read_streams"): "EventStore.read_streams (load claimed)",
        ("store.py", "next_due"): "EventStore.next_due (idle timeout)",
        ("backend_postgres.py", "insert_events"): "recorder.insert_events (transaction)",
        ("deferred.py", "_claim_one"): "DeferredEngine._claim_one (Python)",
        ("deferred.py", "_record_end"): "DeferredEngine._record_end (Python)",
        ("codec.py", "encode_state"): "encode_state (canonical JSON)",
        ("work_index.py", "changes"): "work_index.changes",
        ("threading.py", "wait"): "waiting (Event.wait)",
    }
    print(f"  coordinator thread, {wall:.2f} s wall; cumulative time per call site:")
    sites: dict[str, list[float]] = {}
    for (filename, _, name), (_, ncalls, _, cumtime, _) in entries.items():
        label = wanted.get((Path(filename).name, name))
        # Event.wait and the Condition.wait inside it share a label: keep the outer one.
        if label and ncalls and cumtime > sites.get(label, [0, -1.0])[1]:
            sites[label] = [ncalls, cumtime]
    for label, (ncalls, cumtime) in sorted(sites.items(), key=lambda item: -item[1][1]):
        print(f"    {label:<42} {ncalls:>7.0f} calls {cumtime:>7.2f} s {cumtime / wall:>6.0%}")
    print("  top 12 functions by own time:")
    for (filename, line, name), (_, ncalls, tottime, _, _) in sorted(
        entries.items(), key=lambda item: -item[1][2]
    )[:12]:
        where = f"{Path(filename).name}:{line}({name})"
        print(f"    {where[:60]:<60} {ncalls:>7} calls {tottime:>7.2f} s")


# -- reporting -------------------------------------------------------------------------------


def spread(values: list[float], digits: int = 0) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:,.{digits}f}"
    mid, low, high = statistics.median(values), min(values), max(values)
    return f"{mid:,.{digits}f} ({low:,.{digits}f}-{high:,.{digits}f})"


class Results:
    def __init__(self) -> None:
        self.reps: list[dict[str, Figures]] = []
        self.failures: list[str] = []

    def new_rep(self) -> None:
        self.reps.append({})

    def record(self, name: str, figures: Figures, failure: str) -> None:
        if failure:
            self.failures.append(f"rep {len(self.reps)}, {name}: {failure}")
            log(f"  FAILED {name}: {failure}")
            return
        self.reps[-1][name] = figures
        log(f"  {name}: " + ", ".join(f"{k}={v:.1f}" for k, v in figures.items()))

    def values(self, name: str, key: str) -> list[float]:
        return [rep[name][key] for rep in self.reps if name in rep and key in rep[name]]

    def ratios(self, name: str, key: str, base: str, base_key: str) -> list[float]:
        """``name.key / base.base_key`` within each repetition."""
        return [
            rep[name][key] / rep[base][base_key]
            for rep in self.reps
            if name in rep and base in rep and rep[base].get(base_key)
        ]


# -- main ------------------------------------------------------------------------------------


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=2000, help="operations per drain (2000)")
    parser.add_argument("--reps", type=int, default=3, help="repetitions (3)")
    parser.add_argument("--stores", default="sqlite,postgresql", help="sqlite,postgresql")
    parser.add_argument("--workers", default="1,4", help="PostgreSQL worker processes (1,4)")
    parser.add_argument("--concurrency", type=int, default=10, help="handler threads per worker")
    parser.add_argument(
        "--sqlite-worker", choices=["process", "thread"], default="process", help="SQLite drain"
    )
    parser.add_argument("--low-load", type=int, default=200, help="low-load operations (200)")
    parser.add_argument("--spacing-ms", type=float, default=10.0, help="low-load spacing (10)")
    parser.add_argument("--raw-rows", type=int, default=3000, help="raw PG commits (3000)")
    parser.add_argument("--no-concurrent", action="store_true", help="skip the concurrent runs")
    parser.add_argument("--peers", action="store_true", help="also run procrastinate's bench")
    parser.add_argument("--peers-python", help="a Python with procrastinate installed")
    parser.add_argument("--profile", action="store_true", help="profile an in-process drain")
    parser.add_argument("--timeout", type=float, default=120.0, help="per wait, seconds")
    args = parser.parse_args()
    args.stores = [s for s in args.stores.split(",") if s]
    args.workers = [int(w) for w in args.workers.split(",") if w]
    if not set(args.stores) <= {"sqlite", "postgresql"} or not args.stores:
        parser.error("--stores takes sqlite and/or postgresql")
    return args


def plan(args: argparse.Namespace) -> list[tuple[str, str, int, str]]:
    """(name, store, workers, mode) of each drain configuration."""
    configs = []
    if "sqlite" in args.stores:
        configs.append((f"sqlite 1 {args.sqlite_worker}", "sqlite", 1, args.sqlite_worker))
    if "postgresql" in args.stores:
        configs += [
            (f"postgresql {w} process{'es' if w > 1 else ''}", "postgresql", w, "process")
            for w in args.workers
        ]
    return configs


def main() -> None:
    args = parse()
    configs = plan(args)
    latency_configs = [(f"{k} 1 {m}", k, m) for k in args.stores for m in ("process", "thread")]
    latency_configs = [c for c in latency_configs if c[1] == "sqlite" or c[2] == "process"]
    python = peer_python(args.peers_python) if args.peers else None
    args.peers_used = python
    if args.peers and python is None:
        log("--peers: procrastinate is not importable (see /work/shared/peers/README.md); skipped")
    results = Results()

    def step(name: str, outcome: tuple[Figures, str]) -> None:
        results.record(name, *outcome)

    with tempfile.TemporaryDirectory(prefix="bench-ops-") as tmp:
        s = Settings(
            n=args.n,
            concurrency=args.concurrency,
            low_load=args.low_load,
            spacing=args.spacing_ms / 1000,
            timeout=args.timeout,
            logs=Path(tmp),
        )
        stores = Stores(Path(tmp), "ops")
        for rep in range(args.reps):
            log(f"rep {rep + 1}/{args.reps}")
            results.new_rep()
            if "postgresql" in args.stores:
                step("raw", raw_postgres(args.raw_rows))
            for name, kind, workers, mode in configs:
                step(f"drain {name}", drain(stores, kind, workers, mode, s))
                if not args.no_concurrent:
                    step(f"concurrent {name}", concurrent(stores, kind, workers, mode, s))
            for name, kind, mode in latency_configs:
                step(f"low {name}", low_load(stores, kind, mode, s))
            if python is not None:
                step("procrastinate", procrastinate(python, args.n))
        report(args, results, configs, latency_configs)
        if args.profile and "postgresql" in args.stores:
            profile_drain(stores, s)
    if results.failures:
        print("\nFAILED (what was persisted is not what the run claims):")
        for failure in results.failures:
            print(f"  {failure}")
        raise SystemExit(2)


def report(
    args: argparse.Namespace,
    results: Results,
    configs: list[tuple[str, str, int, str]],
    latency_configs: list[tuple[str, str, str]],
) -> None:
    shown = urlsplit(POSTGRES)
    each = "median (min-max) of" if args.reps > 1 else "one run,"
    print(
        f"Deferred no-op operations: N={args.n}, {each} {args.reps} reps, "
        f"worker concurrency {args.concurrency}, PostgreSQL {shown.hostname}:{shown.port}"
        f"{shown.path}"
    )
    print("\nDrain: submit N, then start the worker(s); until all N are completed (ops/s)")
    print(
        f"{'store / workers':<25} {'wall (incl. start)':>20} {'journal':>20} "
        f"{'claims/txn':>10} {'ends/txn':>9} {'txns/op':>8}"
    )
    for name, *_ in configs:
        key = f"drain {name}"
        print(
            f"{name:<25} {spread(results.values(key, 'drain_wall_per_s')):>20} "
            f"{spread(results.values(key, 'drain_journal_per_s')):>20} "
            f"{spread(results.values(key, 'claim_group'), 1):>10} "
            f"{spread(results.values(key, 'end_group'), 1):>9} "
            f"{spread(results.values(key, 'worker_txns_per_op'), 2):>8}"
        )
        extra = sum(results.values(key, "extra_claims"))
        if extra:
            print(f"{'':<25} ({extra:.0f} operations were claimed more than once)")
    print(
        "  wall: from spawning the worker processes; journal: first attempt.started to last "
        "operation.completed;\n  claims/txn, ends/txn: operations per claim / completion "
        "commit; txns/op: worker commits that wrote events"
    )
    if not args.no_concurrent:
        print("\nConcurrent: worker(s) running, N submitted one by one from one thread")
        print(
            f"{'store / workers':<25} {'end-to-end ops/s':>20} {'submits/s':>20} "
            f"{'submit p50 ms':>16} {'ends/txn':>9}"
        )
        for name, *_ in configs:
            key = f"concurrent {name}"
            print(
                f"{name:<25} {spread(results.values(key, 'e2e_per_s')):>20} "
                f"{spread(results.values(key, 'submit_per_s')):>20} "
                f"{spread(results.values(key, 'submit_p50_ms'), 2):>16} "
                f"{spread(results.values(key, 'end_group'), 1):>9}"
            )
    print("\nSubmit latency: one at a time, one thread, idle workers (the drain's N submits)")
    print(f"{'store':<25} {'submits/s':>20} {'p50 ms':>20} {'p99 ms':>20}")
    for kind in args.stores:
        first = next(f"drain {name}" for name, k, *_ in configs if k == kind)
        print(
            f"{kind:<25} {spread(results.values(first, 'submit_per_s')):>20} "
            f"{spread(results.values(first, 'submit_p50_ms'), 2):>20} "
            f"{spread(results.values(first, 'submit_p99_ms'), 2):>20}"
        )
    print(
        f"\nSubmit-to-completed at low load: {args.low_load} submits {args.spacing_ms:g} ms "
        "apart, one worker running (target p50 < 50 ms)"
    )
    print(f"{'store / worker':<25} {'p50 ms':>20} {'p99 ms':>20} {'max ms':>20}")
    for name, *_ in latency_configs:
        key = f"low {name}"
        print(
            f"{name:<25} {spread(results.values(key, 'p50_ms'), 1):>20} "
            f"{spread(results.values(key, 'p99_ms'), 1):>20} "
            f"{spread(results.values(key, 'max_ms'), 1):>20}"
        )
    print("  end = the operation.completed `at`, taken just before its commit")
    if "postgresql" in args.stores:
        physical(args, results, configs)


def physical(
    args: argparse.Namespace, results: Results, configs: list[tuple[str, str, int, str]]
) -> None:
    print("\nPhysical limit and peers; ratios are taken within each rep, then summarised")
    print(
        f"{'raw PG INSERT+COMMIT, 1 connection':<42} "
        f"{spread(results.values('raw', 'commits_per_s')):>20} commits/s"
    )
    peers = [rep["procrastinate"] for rep in results.reps if "procrastinate" in rep]
    for label, key in (("1", "run_c1_jobs_per_s"), ("10", "run_c10_jobs_per_s")):
        if peers:
            values = [p[key] for p in peers if key in p]
            print(f"{'procrastinate no-op, concurrency ' + label:<42} {spread(values):>20} jobs/s")
    if peers:
        print(f"  procrastinate: {PEERS / 'procrastinate_bench.py'} run by {args.peers_used}")
    if args.peers and not peers:
        print("procrastinate: not run (not installed, or its bench failed: see above)")
    print(f"{'PostgreSQL drain':<25} {'ratio to':<16} {'wall':>20} {'journal':>20}")
    bases = [("raw commits", "raw", "commits_per_s", 3)]
    if peers:
        bases.append(("procrastinate c10", "procrastinate", "run_c10_jobs_per_s", 2))
    for name, kind, *_ in configs:
        if kind != "postgresql":
            continue
        key = f"drain {name}"
        for label, base, base_key, digits in bases:
            wall = results.ratios(key, "drain_wall_per_s", base, base_key)
            journal = results.ratios(key, "drain_journal_per_s", base, base_key)
            print(
                f"{name:<25} {label:<16} {spread(wall, digits):>20} {spread(journal, digits):>20}"
            )
    if peers:
        print("  target: drain >= 2x procrastinate c10 on the same PostgreSQL in the same run")


if __name__ == "__main__":
    main()
