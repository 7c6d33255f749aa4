"""Durable workflows on SQLite and PostgreSQL: throughput, resume, memory (printed only).

Every scenario runs on a fresh store (a new SQLite file; a new PostgreSQL schema, dropped
afterwards). After each one a fresh connection counts the journal's events by SQL and checks
that exactly what the run claims was persisted.

  sequential  a started in-process worker (workflow_processes=P); one 10-step instance at a
              time: create -> wait until its context has ended -> status() must say
              complete -> next. The wait reads the worker's in-memory counter
              (``contexts_ended``) every 1 ms: no store reads compete with the worker.
  in flight   create N instances, then start a worker (P executor processes) and time from
              worker.start() (executor forks included) until all N contexts have ended.
  resume      instances whose history holds 999 completed `do` steps, then a sleep (the
              clock is a FakeClock, advanced past the sleep). In-process: plan_for() +
              run_context() until the 1000th `do` step's effect runs (a stub host answers
              the sleep without committing). End to end: WorkflowEngine.claim() (reserve,
              read the ~1,000-event stream, fold, commit context_started, plan) + run_context
              with the engine as host (commits the sleep's completion) until the effect runs.
  memory      M instances of a workflow that sleeps for a day at its first step; a separate
              worker process (`blackops worker --app sleepers:WORKER_APP`, what users run)
              runs until the journal shows all M step_suspended; its peak RSS (VmHWM), its
              executors' and their group reapers' are read from /proc, plus PSS (shared
              pages divided among the processes) and USS (private pages) from smaps_rollup.
  --peers     DBOS Transact's bench (/tmp/peers/dbos_bench.py, see ../shared/peers/README.md)
              with the same N and K on sqlite_wal and postgres, each right after our
              throughput scenarios on that store: wf_seq (one thread), wf_threads (T client
              threads), queue (worker_concurrency 10). Says so if /tmp/peers/.venv is missing.

Usage: .venv/bin/python bench/workflows.py [--seq-n 300] [--many-n 1000]
       [--processes 1,4,8,16] [--memory-n 10000] [--stores sqlite,postgresql] [--peers]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pickle
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runnable as a plain script
sys.path.append(str(Path(__file__).resolve().parent))  # benchstores, also when imported as bench.x

from benchstores import POSTGRES, Stores
from sleepers import Sleeper

from blackops import Application
from blackops.testing import FakeClock
from blackops.workflows.api import WorkflowEvent
from blackops.workflows.binding import WorkflowBinding
from blackops.workflows.context import Step, run_context
from blackops.workflows.engine import HeldContext, WorkflowEngine, plan_for
from domain.clock import Clock
from journal.locator import resolve_store

#: The DBOS harness, copied from ../shared/peers (it writes ./data beside its scripts).
PEERS = Path(os.environ.get("BLACKOPS_BENCH_PEERS", "/tmp/peers"))
ROOT = Path(__file__).resolve().parent.parent
PEER_PYTHON = PEERS / ".venv" / "bin" / "python"
STEPS = 10  # K: steps per workflow, as DBOS's wf_seq
HISTORY = 999  # completed `do` steps before the resumed one
NAP = 3600  # seconds the resumed instances sleep (the FakeClock jumps past it)
WARM = 5  # untimed instances before each sequential run

#: perf_counter() taken by the resumed step's effect (in this process only).
MARKS: list[float] = []


# -- workflows -------------------------------------------------------------------------------


class Ten:
    """STEPS `do` steps, each returning a small dict (DBOS's ``small_step`` shape)."""

    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: WorkflowEvent, step: Step) -> dict[str, Any]:
        total = 0
        for i in range(STEPS):
            result = await step.do(f"s{i}", partial(small, i))
            assert result is not None
            total += result["i"]
        return {"total": total}


def small(i: int) -> dict[str, Any]:
    """DBOS's ``small_step`` result."""
    return {"i": i, "ok": True, "tag": "step"}


def tiny(i: int) -> dict[str, Any]:
    return {"i": i}


def _mark() -> dict[str, Any]:
    MARKS.append(time.perf_counter())
    return {"i": HISTORY}


class Long:
    """HISTORY `do` steps, a sleep of NAP seconds, then one more `do` (the measured one)."""

    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: WorkflowEvent, step: Step) -> dict[str, Any]:
        for i in range(HISTORY):
            await step.do(f"s{i}", partial(tiny, i))
        await step.sleep("nap", NAP)
        await step.do(f"s{HISTORY}", _mark)
        return {"steps": HISTORY + 1}


def build(store: str | None, clock: Clock | None = None) -> Application:
    app = Application(store, clock=clock)
    for cls in (Ten, Long, Sleeper):
        app.register_workflow(cls)
    return app


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- stores ----------------------------------------------------------------------------------


def query(url: str, text: str) -> list[tuple[Any, ...]]:
    """Run ``text`` on a fresh connection; ``EVENTS`` in it names the events table."""
    location = resolve_store(url)
    if location.kind == "sqlite":
        path = location.sqlite_path
        assert path is not None
        with closing(sqlite3.connect(path, timeout=30)) as conn:
            return list(conn.execute(text.replace("EVENTS", "stored_events")).fetchall())
    schema = location.settings["POSTGRES_SCHEMA"]
    table = f'"{schema}".blackops_events'  # a schema this bench named
    import psycopg  # here: the --worker-child on SQLite must not carry it (see drop_schema)

    with psycopg.connect(POSTGRES, autocommit=True) as conn:
        return list(conn.execute(text.replace("EVENTS", table).encode()).fetchall())


def topic_counts(url: str) -> Counter[str]:
    rows = query(url, "SELECT topic, count(*) FROM EVENTS GROUP BY topic")
    return Counter({str(topic): int(count) for topic, count in rows})


def expect(counts: Counter[str], wanted: dict[str, int]) -> list[str]:
    """Differences between the journal's topic counts and ``wanted`` (exactly these)."""
    problems = [
        f"{counts.get(topic, 0)} {topic} events, expected {n}"
        for topic, n in wanted.items()
        if counts.get(topic, 0) != n
    ]
    extra = {t: n for t, n in counts.items() if t not in wanted}
    if extra:
        problems.append(f"unexpected events: {dict(extra)}")
    return problems


# -- helpers ---------------------------------------------------------------------------------


Figures = dict[str, float]


def wait_for(condition: Callable[[], bool], timeout: float, interval: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


def count_commits(app: Application) -> list[int]:
    """A one-element list counting this process's commits to ``app``'s store."""
    counter = [0]

    def bump() -> None:
        counter[0] += 1

    app.store.add_append_listener(bump)
    return counter


async def create_many(binding: WorkflowBinding, n: int, params: dict[str, Any]) -> list[str]:
    """Create ``n`` instances, several at a time (the default thread pool)."""
    instances = await asyncio.gather(*(binding.create(params={**params, "n": i}) for i in range(n)))
    return [instance.id for instance in instances]


def statuses(app: Application, binding: WorkflowBinding, ids: list[str]) -> Counter[str]:
    return Counter(app.instances.status(binding.resource, i)["status"] for i in ids)


def proc_status(pid: int) -> dict[str, int]:
    """The kB figures of /proc/<pid>/status (VmRSS, VmHWM, ...); {} if it is gone."""
    return _kb_figures(Path(f"/proc/{pid}/status"))


def rollup_kb(pid: int) -> dict[str, int]:
    """/proc/<pid>/smaps_rollup: Pss (shared pages divided among their users), Private_*."""
    return _kb_figures(Path(f"/proc/{pid}/smaps_rollup"))


def _kb_figures(path: Path) -> dict[str, int]:
    found: dict[str, int] = {}
    try:
        text = path.read_text()
    except OSError:
        return found
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if value.strip().endswith("kB"):
            found[key] = int(value.split()[0])
    return found


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces, so split after the last ')'.
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def descendants_of(pid: int) -> list[int]:
    """Every process below ``pid``: its children, theirs (an executor's group reaper), ..."""
    found, level = [], [pid]
    while level:
        level = [child for parent in level for child in children_of(parent)]
        found += level
    return found


# -- throughput ------------------------------------------------------------------------------


def sequential(stores: Stores, kind: str, processes: int, n: int, timeout: float) -> Figures:
    with stores.fresh(kind) as url:
        app = build(url)
        binding = app.workflow("Ten")
        app.store.last_position()  # open (and create) the store outside the timings
        commits = count_commits(app)
        worker = app.worker(workflow_processes=processes).start()
        runner = worker.workflows
        assert runner is not None
        out: Figures = {}

        async def one_by_one() -> str:
            for i in range(WARM + n):
                if i == WARM:
                    start, first_commit = time.perf_counter(), commits[0]
                before = runner.contexts_ended
                instance = await binding.create(params={"n": i})
                deadline = time.monotonic() + timeout
                while runner.contexts_ended == before:
                    if time.monotonic() > deadline:
                        return f"instance {i} not done after {timeout:g} s"
                    await asyncio.sleep(0.001)
                status = await instance.status()
                if status["status"] != "complete":
                    return f"instance {i} ended {status}"
            elapsed = time.perf_counter() - start
            out["inst_per_s"] = n / elapsed
            out["steps_per_s"] = n * STEPS / elapsed
            out["ms_per_inst"] = elapsed / n * 1000
            out["commits_per_inst"] = (commits[0] - first_commit) / n
            return ""

        try:
            failure = asyncio.run(one_by_one())
        finally:
            worker.stop(1)
            app.close()
        if failure:
            raise Failure(failure)
        total = WARM + n
        problems = expect(
            topic_counts(url),
            {
                "workflow.created": total,
                "workflow.context_started": total,
                "workflow.step_completed": total * STEPS,
                "workflow.completed": total,
            },
        )
    if problems:
        raise Failure("; ".join(problems))
    return out


def in_flight(stores: Stores, kind: str, processes: int, n: int, timeout: float) -> Figures:
    with stores.fresh(kind) as url:
        app = build(url)
        binding = app.workflow("Ten")
        app.store.last_position()
        start = time.perf_counter()
        ids = asyncio.run(create_many(binding, n, {}))
        out: Figures = {"creates_per_s": n / (time.perf_counter() - start)}
        commits = count_commits(app)
        worker = app.worker(workflow_processes=processes)
        runner = worker.workflows
        assert runner is not None
        start = time.perf_counter()
        worker.start()
        try:
            done = wait_for(lambda: runner.contexts_ended >= n, timeout, 0.005)
            elapsed = time.perf_counter() - start
            steps = runner.steps_committed
        finally:
            worker.stop(1)
        if not done:
            raise Failure(f"{runner.contexts_ended} of {n} contexts ended after {timeout:g} s")
        out["inst_per_s"] = n / elapsed
        out["steps_per_s"] = n * STEPS / elapsed
        out["steps_per_commit"] = steps / max(1, commits[0])
        out["commits_per_inst"] = commits[0] / n
        seen = statuses(app, binding, ids)
        app.close()
        problems = [] if seen == {"complete": n} else [f"statuses {dict(seen)}"]
        problems += expect(
            topic_counts(url),
            {
                "workflow.created": n,
                "workflow.context_started": n,
                "workflow.step_completed": n * STEPS,
                "workflow.completed": n,
            },
        )
    if problems:
        raise Failure("; ".join(problems))
    return out


# -- resume at step 1000 ---------------------------------------------------------------------


class StubHost:
    """Answers the (due) sleep as the engine would, and stops the context at the next step
    request: nothing is committed, so the same history can be replayed again and again."""

    def request(self, message: tuple[Any, ...]) -> tuple[Any, ...]:
        if message[0] == "sleep":
            return ("ok", None)
        return ("stop", "fenced", "")


class EngineHost:
    """The engine as host, in this thread: each step request is decided and committed."""

    def __init__(self, engine: WorkflowEngine, held: HeldContext) -> None:
        self.engine, self.held = engine, held

    def request(self, message: tuple[Any, ...]) -> tuple[Any, ...]:
        return self.engine.request([(self.held, message)])[0]


def resume(stores: Stores, kind: str, instances: int, repeats: int, timeout: float) -> Figures:
    clock = FakeClock()
    out: Figures = {}
    with stores.fresh(kind) as url:
        app = build(url, clock)
        binding = app.workflow("Long")
        app.store.last_position()
        ids = asyncio.run(create_many(binding, instances, {}))
        start = time.perf_counter()
        worker = app.worker(workflow_processes=instances).start()
        runner = worker.workflows
        assert runner is not None
        try:
            done = wait_for(lambda: runner.contexts_ended >= instances, timeout, 0.01)
        finally:
            worker.stop(1)
        out["build_steps_per_s"] = instances * HISTORY / (time.perf_counter() - start)
        seen = statuses(app, binding, ids)
        if not done or seen != {"sleeping": instances}:
            raise Failure(f"building the histories: statuses {dict(seen)}")
        clock.advance(NAP + 1)

        # In-process: the state as the engine reads it, then plan + replay until the effect.
        loads = []
        for _ in range(repeats):
            begin = time.perf_counter()
            state = app.instances.load(binding.resource, ids[0])
            loads.append(time.perf_counter() - begin)
        code = app.code_provider.pick(state.workflow)
        plans, replays, totals, ends = [], [], [], Counter[str]()
        for _ in range(repeats):
            MARKS.clear()
            begin = time.perf_counter()
            plan = plan_for(state, code, state.contexts + 1)
            planned = time.perf_counter()
            end = run_context(plan, code.cls, code.env, StubHost())
            ends[f"{end.kind}/{end.reason}"] += 1
            if len(MARKS) != 1:
                raise Failure(f"in-process replay: the effect ran {len(MARKS)} times ({end})")
            plans.append(planned - begin)
            replays.append(MARKS[0] - planned)
            totals.append(MARKS[0] - begin)
        if ends != {"stopped/fenced": repeats}:
            raise Failure(f"in-process replay ended {dict(ends)}")
        out["load_ms"] = statistics.median(loads) * 1000
        out["plan_ms"] = statistics.median(plans) * 1000
        out["replay_ms"] = statistics.median(replays) * 1000
        out["inprocess_ms"] = statistics.median(totals) * 1000
        out["inprocess_max_ms"] = max(totals) * 1000
        out["history_steps"] = len(plan.steps)
        # What an executor process is sent: the plan, pickled through a pipe.
        blob = pickle.dumps(plan)
        begin = time.perf_counter()
        for _ in range(repeats):
            pickle.loads(pickle.dumps(plan))
        out["plan_pickle_ms"] = (time.perf_counter() - begin) / repeats * 1000
        out["plan_kb"] = len(blob) / 1024

        # End to end through the engine: claim (reserve, read, fold, commit, plan) -> run.
        engine = app.workflow_engine(f"bench-resume-{os.getpid()}")
        claims, runs, e2e = [], [], []
        for _ in range(instances):
            MARKS.clear()
            begin = time.perf_counter()
            helds, _ = engine.claim(1)
            claimed = time.perf_counter()
            if len(helds) != 1:
                raise Failure(f"claim returned {len(helds)} contexts")
            held = helds[0]
            end = run_context(held.plan, held.code.cls, held.code.env, EngineHost(engine, held))
            engine.finish([(held, end)])
            if len(MARKS) != 1 or end.kind != "complete":
                raise Failure(f"engine resume: effect ran {len(MARKS)} times, ended {end}")
            claims.append(claimed - begin)
            runs.append(MARKS[0] - claimed)
            e2e.append(MARKS[0] - begin)
        out["claim_ms"] = statistics.median(claims) * 1000
        out["engine_run_ms"] = statistics.median(runs) * 1000
        out["engine_ms"] = statistics.median(e2e) * 1000
        out["engine_max_ms"] = max(e2e) * 1000
        seen = statuses(app, binding, ids)
        app.close()
        problems = [] if seen == {"complete": instances} else [f"statuses {dict(seen)}"]
        problems += expect(
            topic_counts(url),
            {
                "workflow.created": instances,
                "workflow.context_started": 2 * instances,
                "workflow.step_completed": instances * (HISTORY + 2),
                "workflow.step_suspended": instances,
                "workflow.completed": instances,
            },
        )
    if problems:
        raise Failure("; ".join(problems))
    return out


# -- memory ----------------------------------------------------------------------------------


def memory(
    stores: Stores, kind: str, n: int, processes: int, timeout: float, logs: Path
) -> Figures:
    out: Figures = {}
    with stores.fresh(kind) as url:
        app = build(url)
        binding = app.workflow("Sleeper")
        app.store.last_position()
        start = time.perf_counter()
        asyncio.run(create_many(binding, n, {}))
        out["creates_per_s"] = n / (time.perf_counter() - start)
        app.close()
        path = logs / f"worker-{uuid.uuid4().hex[:8]}.log"
        # What users run: `blackops worker` on this module's application. Its state dir
        # is fresh (no signing key: it signs nothing, as a worker without --signing-key).
        here = Path(__file__).resolve().parent
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(here.parent), str(here)]),
            "BLACKOPS_HOME": str(logs / f"home-{uuid.uuid4().hex[:8]}"),
        }
        command = [sys.executable, "-m", "blackops", "worker", "--app", "sleepers:WORKER_APP",
                   "--store", url, "--workflow-processes", str(processes), "--json"]  # fmt: skip
        with path.open("wb") as err:
            child = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=err, text=True, cwd=here.parent, env=env
            )
        try:
            assert child.stdout is not None
            line = child.stdout.readline()  # its started document
            if not line:
                raise Failure(f"worker process exited: {path.read_text()[-400:]}")
            json.loads(line)
            baseline = proc_status(child.pid).get("VmRSS", 0)
            start = time.perf_counter()
            peak_total = 0
            suspended = 0
            deadline = time.monotonic() + timeout
            while True:
                family = [child.pid, *descendants_of(child.pid)]
                peak_total = max(peak_total, sum(proc_status(p).get("VmRSS", 0) for p in family))
                suspended = topic_counts(url).get("workflow.step_suspended", 0)
                if suspended >= n or child.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.25)
            elapsed = time.perf_counter() - start
            executors = children_of(child.pid)
            # Below the executors: each one's group reaper (decisions W16), a small shell.
            reapers = [p for p in descendants_of(child.pid) if p not in executors]
            own = proc_status(child.pid)
            theirs = [proc_status(p) for p in executors]
            out["reapers"] = len(reapers)
            out["reapers_hwm_mb"] = sum(proc_status(p).get("VmHWM", 0) for p in reapers) / 1024
            out["sleep_contexts_per_s"] = n / elapsed
            out["executors"] = len(executors)
            out["baseline_rss_mb"] = baseline / 1024
            out["worker_hwm_mb"] = own.get("VmHWM", 0) / 1024
            out["worker_rss_mb"] = own.get("VmRSS", 0) / 1024
            out["executors_hwm_mb"] = sum(s.get("VmHWM", 0) for s in theirs) / 1024
            out["executors_rss_mb"] = sum(s.get("VmRSS", 0) for s in theirs) / 1024
            out["total_hwm_mb"] = (
                out["worker_hwm_mb"] + out["executors_hwm_mb"] + out["reapers_hwm_mb"]
            )
            out["sampled_peak_rss_mb"] = peak_total / 1024
            rollups = [rollup_kb(p) for p in [child.pid, *executors, *reapers]]
            out["total_pss_mb"] = sum(r.get("Pss", 0) for r in rollups) / 1024
            out["total_uss_mb"] = (
                sum(r.get("Private_Clean", 0) + r.get("Private_Dirty", 0) for r in rollups) / 1024
            )
            out["executor_uss_mb"] = (
                sum(
                    r.get("Private_Clean", 0) + r.get("Private_Dirty", 0)
                    for r in rollups[1 : 1 + len(executors)]
                )
                / 1024
                / max(1, len(executors))
            )
        finally:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        if suspended < n:
            raise Failure(f"{suspended} of {n} instances sleeping; log: {path.read_text()[-400:]}")
        counts = topic_counts(url)
        # Each instance's last event must be its step_suspended (none woke, none ended).
        last = query(
            url,
            "SELECT count(*) FROM EVENTS e WHERE e.topic = 'workflow.step_suspended' AND "
            "e.originator_version = (SELECT max(originator_version) FROM EVENTS l "
            "WHERE l.originator_id = e.originator_id)",
        )[0][0]
    problems = expect(
        counts,
        {
            "workflow.created": n,
            "workflow.context_started": n,
            "workflow.step_suspended": n,
        },
    )
    if last != n:
        problems.append(f"{last} of {n} instances end with step_suspended")
    if problems:
        raise Failure("; ".join(problems))
    return out


# -- DBOS ------------------------------------------------------------------------------------


def peer_python() -> str | None:
    """/tmp/peers/.venv's Python if it can import dbos."""
    if not PEER_PYTHON.exists():
        return None
    probe = subprocess.run([str(PEER_PYTHON), "-c", "import dbos"], capture_output=True)
    return str(PEER_PYTHON) if probe.returncode == 0 else None


def dbos(python: str, args: argparse.Namespace, backend: str) -> Figures:
    """dbos_bench.py --reps 1 on one backend (sqlite_wal or postgres): {metric: median}."""
    parts = urlsplit(POSTGRES)
    env = {
        **os.environ,
        "PEER_PG_HOST": parts.hostname or "127.0.0.1",
        "PEER_PG_PORT": str(parts.port or 5432),
        "PEER_PG_USER": parts.username or "postgres",
    }
    command = [python, str(PEERS / "dbos_bench.py"), "--backends", backend]
    command += ["--n", str(args.seq_n), "--k", str(STEPS), "--reps", "1"]
    command += ["--threads", str(args.dbos_threads), "--queue-n", str(args.many_n)]
    # Scenarios not compared here, kept short: durable sleep, send/recv round trips.
    command += ["--sleep-n", "10", "--pingpong-m", "3", "--pingpong-m-sqlite", "1"]
    done = subprocess.run(
        command, stdout=subprocess.PIPE, text=True, env=env, cwd=PEERS, timeout=1800
    )
    lines = done.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        raise Failure(f"dbos_bench.py printed no result (exit {done.returncode})") from None
    if not result.get("ok", True) or "results" not in result:
        raise Failure(f"dbos_bench.py failed: {lines[-1][:400]}")
    metrics = result["results"].get(backend, {})
    found = {
        key: float(value["median"])
        for key, value in metrics.items()
        if isinstance(value, dict) and "median" in value
    }
    found["load1"] = os.getloadavg()[0]
    return found


# -- running and reporting -------------------------------------------------------------------


class Failure(Exception):
    """A scenario did not do what it claims (or could not run)."""


@dataclass
class Results:
    figures: dict[str, Figures]
    failures: list[str]

    def run(self, name: str, scenario: Callable[[], Figures]) -> None:
        log(f"  {name} ...")
        try:
            figures = scenario()
        except Failure as failure:
            self.failures.append(f"{name}: {failure}")
            log(f"  FAILED {name}: {failure}")
            return
        figures["load1"] = os.getloadavg()[0]  # machine noise: 1-minute load at the end
        self.figures[name] = figures
        log(f"  {name}: " + ", ".join(f"{k}={v:.2f}" for k, v in figures.items()))

    def get(self, name: str, key: str) -> float | None:
        return self.figures.get(name, {}).get(key)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stores", default="sqlite,postgresql", help="sqlite,postgresql")
    parser.add_argument("--seq-n", type=int, default=300, help="sequential instances (300)")
    parser.add_argument("--many-n", type=int, default=1000, help="instances in flight (1000)")
    parser.add_argument("--processes", default="1,4,8,16", help="executor processes, in flight")
    parser.add_argument("--seq-processes", default="1,4", help="executor processes, sequential")
    parser.add_argument("--resume-instances", type=int, default=5, help="999-step histories (5)")
    parser.add_argument("--resume-repeats", type=int, default=20, help="in-process replays (20)")
    parser.add_argument("--memory-n", type=int, default=10_000, help="sleeping instances")
    parser.add_argument("--memory-processes", type=int, default=4, help="its executors (4)")
    parser.add_argument("--skip", default="", help="any of sequential,flight,resume,memory")
    parser.add_argument("--peers", action="store_true", help="DBOS's bench in the same run")
    parser.add_argument("--peer-backends", default="sqlite_wal,postgres")
    parser.add_argument("--dbos-threads", type=int, default=4, help="DBOS wf_threads (4)")
    parser.add_argument("--timeout", type=float, default=300.0, help="per wait, seconds")
    args = parser.parse_args()
    args.stores = [s for s in args.stores.split(",") if s]
    args.processes = [int(p) for p in args.processes.split(",") if p]
    args.seq_processes = [int(p) for p in args.seq_processes.split(",") if p]
    args.skip = {s for s in args.skip.split(",") if s}
    args.peer_backends = [b for b in args.peer_backends.split(",") if b]
    if not set(args.stores) <= {"sqlite", "postgresql"} or not args.stores:
        parser.error("--stores takes sqlite and/or postgresql")
    return args


PEER_BACKEND = {"sqlite": "sqlite_wal", "postgresql": "postgres"}


def main() -> None:
    args = parse()
    python = peer_python() if args.peers else None
    if args.peers and python is None:
        log(
            f"--peers: {PEER_PYTHON} is missing or cannot import dbos; the DBOS comparison is "
            "SKIPPED (set it up as ../shared/peers/README.md says: cp -r ../shared/peers "
            "/tmp/peers && cd /tmp/peers && python3 -m venv .venv && .venv/bin/pip install "
            "-r requirements.txt)"
        )
    results = Results({}, [])
    peers: dict[str, Figures] = {}
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-wf-") as tmp:
        stores = Stores(Path(tmp), "wf")
        t = args.timeout
        for kind in args.stores:
            log(f"{kind}:")
            if "sequential" not in args.skip:
                for p in args.seq_processes:
                    scenario = partial(sequential, stores, kind, p, args.seq_n, t)
                    results.run(f"{kind} sequential P={p}", scenario)
            if "flight" not in args.skip:
                for p in args.processes:
                    scenario = partial(in_flight, stores, kind, p, args.many_n, t)
                    results.run(f"{kind} in flight P={p}", scenario)
            backend = PEER_BACKEND[kind]
            if python is not None and backend in args.peer_backends:
                log(f"  DBOS {backend} (dbos_bench.py --reps 1) ...")
                try:
                    peers[backend] = dbos(python, args, backend)
                except (Failure, subprocess.TimeoutExpired) as error:
                    results.failures.append(f"DBOS {backend}: {error}")
                    log(f"  FAILED DBOS {backend}: {error}")
            if "resume" not in args.skip:
                scenario = partial(
                    resume, stores, kind, args.resume_instances, args.resume_repeats, t
                )
                results.run(f"{kind} resume", scenario)
            if "memory" not in args.skip:
                scenario = partial(
                    memory, stores, kind, args.memory_n, args.memory_processes, t, Path(tmp)
                )
                results.run(f"{kind} memory", scenario)
    report(args, results, peers, python, time.perf_counter() - began)
    if results.failures:
        print("\nFAILED:")
        for failure in results.failures:
            print(f"  {failure}")
        raise SystemExit(2)


def fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def report(
    args: argparse.Namespace,
    results: Results,
    peers: dict[str, Figures],
    python: str | None,
    seconds: float,
) -> None:
    shown = urlsplit(POSTGRES)
    print(
        f"Workflows: {STEPS}-step workflows (each step.do returns a small dict); one run; "
        f"SQLite (WAL) and PostgreSQL {shown.hostname}:{shown.port}{shown.path}; "
        f"{seconds:.0f} s in all; code {code_version()}"
    )
    throughput(args, results)
    comparison(args, results, peers, python)
    table(
        args.stores,
        results,
        "resume",
        "\nResume at step 1000: a context whose history holds 999 completed `do` steps (ms)",
        [
            ("read + fold the instance stream (app.instances.load)", "load_ms", 2),
            ("plan_for()", "plan_ms", 2),
            ("run_context(): start -> 1000th do's effect (replay)", "replay_ms", 2),
            ("in-process: plan_for + run_context -> effect", "inprocess_ms", 2),
            ("in-process, max", "inprocess_max_ms", 2),
            ("pickle round trip of the plan (what an executor gets)", "plan_pickle_ms", 2),
            ("plan size pickled, kB", "plan_kb", 0),
            ("engine: claim() (reserve, read, fold, commit, plan)", "claim_ms", 2),
            ("engine: run_context -> effect (commits the sleep's end)", "engine_run_ms", 2),
            ("engine end to end: claim -> plan -> run -> effect", "engine_ms", 2),
            ("engine end to end, max", "engine_max_ms", 2),
            ("building the histories, steps/s", "build_steps_per_s", 0),
        ],
        f"  in-process: median of {args.resume_repeats} replays of one instance; engine: median "
        f"of {args.resume_instances} instances; target < 20 ms",
    )
    table(
        args.stores,
        results,
        "memory",
        f"\nMemory: a worker process (workflow_processes={args.memory_processes}) until "
        f"{args.memory_n:,} instances sleep (a day, at their first step); MB",
        [
            ("worker process once started (VmRSS)", "baseline_rss_mb", 1),
            ("worker process peak (VmHWM)", "worker_hwm_mb", 1),
            ("executor processes, sum of their peaks (VmHWM)", "executors_hwm_mb", 1),
            ("executors' group reapers, sum of their peaks (VmHWM)", "reapers_hwm_mb", 1),
            ("worker + executors + reapers, sum of peaks", "total_hwm_mb", 1),
            ("all of them, peak of the sampled RSS sum (4/s)", "sampled_peak_rss_mb", 1),
            ("all of them, PSS at the end (shared pages once)", "total_pss_mb", 1),
            ("all of them, private (USS) at the end", "total_uss_mb", 1),
            ("one executor, private (USS) at the end, mean", "executor_uss_mb", 1),
            ("instances put to sleep per second", "sleep_contexts_per_s", 0),
            ("creates per second (before the worker started)", "creates_per_s", 0),
        ],
        "  target: < 150 MB (worker + executors + reapers, issue 17); forked executors share most "
        "pages with the worker, which RSS counts once per process and PSS divides among them",
    )
    summary = {
        "bench": "blackops-workflows",
        "ok": not results.failures,
        "params": {
            k: (sorted(v) if isinstance(v, set) else v)
            for k, v in vars(args).items()
            if not k.startswith("worker_")
        },
        "results": results.figures,
        "dbos": peers,
        "code": code_version(),
        "failures": results.failures,
    }
    print(json.dumps(summary))


def throughput(args: argparse.Namespace, results: Results) -> None:
    """The sequential and in-flight rows, if any ran."""
    if not any(" sequential " in n or " in flight " in n for n in results.figures):
        return
    print(
        f"\nThroughput: sequential N={args.seq_n} (create -> complete -> next), in flight "
        f"N={args.many_n} (create all, then one worker; wall from worker start)"
    )
    print(
        f"{'store':<11} {'scenario':<12} {'P':>3} {'inst/s':>8} {'steps/s':>9} "
        f"{'steps/commit':>13} {'commits/inst':>13} {'load1':>6}"
    )
    for kind in args.stores:
        rows = [("sequential", p) for p in args.seq_processes]
        rows += [("in flight", p) for p in args.processes]
        for scenario, p in rows:
            name = f"{kind} {scenario} P={p}"
            if name not in results.figures:
                continue
            f = results.figures[name]
            print(
                f"{kind:<11} {scenario:<12} {p:>3} {fmt(f.get('inst_per_s'), 1):>8} "
                f"{fmt(f.get('steps_per_s')):>9} {fmt(f.get('steps_per_commit'), 1):>13} "
                f"{fmt(f.get('commits_per_inst'), 1):>13} {fmt(f.get('load1'), 1):>6}"
            )
    print(
        "  commits/inst counts this process's event commits (claims, steps, ends; sequential: "
        "the create too); load1: the 1-minute load average "
        "at its end (2 cores)"
    )
    for kind in args.stores:
        creates = results.get(f"{kind} in flight P={args.processes[0]}", "creates_per_s")
        if creates:
            print(f"  {kind}: creates {creates:,.0f}/s (gathered from 1 event loop, 6 threads)")


def table(
    stores: list[str],
    results: Results,
    scenario: str,
    title: str,
    lines: list[tuple[str, str, int]],
    note: str,
) -> None:
    """One row per figure, one column per store; nothing if the scenario did not run."""
    if not any(f"{k} {scenario}" in results.figures for k in stores):
        return
    print(title)
    print(f"{'':<58} " + " ".join(f"{k:>11}" for k in stores))
    for label, key, digits in lines:
        values = [fmt(results.get(f"{k} {scenario}", key), digits) for k in stores]
        print(f"{label:<58} " + " ".join(f"{v:>11}" for v in values))
    print(note)


def code_version() -> str:
    """The commit measured, and whether the work tree differed from it (read-only git)."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            cwd=ROOT,
        ).stdout.strip()
    except OSError:
        return "unknown"
    return f"{head or 'unknown'}{' + uncommitted changes' if dirty else ''}"


def comparison(
    args: argparse.Namespace, results: Results, peers: dict[str, Figures], python: str | None
) -> None:
    print("\nDBOS Transact, same run, same stores (steps/s; ratio = ours / DBOS)")
    if python is None:
        if not args.peers:
            print("  not run (add --peers)")
        else:
            print(f"  SKIPPED: {PEER_PYTHON} is missing or cannot import dbos (see --help)")
        return
    if not peers:
        print("  DBOS bench failed (see FAILED below)")
        return
    print(f"{'store':<11} {'DBOS scenario':<40} {'DBOS':>7} {'ours (best)':>22} {'ratio':>6}")
    for kind in args.stores:
        backend = PEER_BACKEND[kind]
        if backend not in peers:
            continue
        d = peers[backend]
        seq = [
            (results.get(f"{kind} sequential P={p}", "steps_per_s"), f"sequential P={p}")
            for p in args.seq_processes
        ]
        flight = [
            (results.get(f"{kind} in flight P={p}", "steps_per_s"), f"in flight P={p}")
            for p in args.processes
        ]
        rows = [
            (f"wf_seq N={args.seq_n} (1 thread)", "wf_seq_steps_per_s", seq),
            (
                f"wf_threads N={args.seq_n} ({args.dbos_threads} threads)",
                "wf_threads_steps_per_s",
                flight,
            ),
            (f"queue N={args.many_n} (concurrency 10)", "queue_steps_per_s", flight),
        ]
        for label, key, ours in rows:
            theirs = d.get(key)
            known = [(v, name) for v, name in ours if v is not None]
            best = max(known) if known else None
            ratio = best[0] / theirs if best and theirs else None
            shown = f"{best[0]:,.0f} ({best[1]})" if best else "-"
            print(
                f"{backend:<11} {label:<40} {fmt(theirs):>7} {shown:>22} "
                f"{fmt(ratio, 2) + 'x' if ratio else '-':>6}"
            )
        print(
            f"{'':<11}   DBOS child: raw INSERT+COMMIT {fmt(d.get('raw_commits_per_s'))}/s on "
            f"this store; load1 at its end {fmt(d.get('load1'), 1)}"
        )
        wf_seq = d.get("wf_seq_steps_per_s")
        if wf_seq:
            for value, name in seq + flight:
                if value is not None:
                    print(
                        f"{'':<11}   ours {name:<18} {value:>8,.0f} = {value / wf_seq:.2f}x wf_seq"
                    )
    print(
        "  bar (the issue): >= 3x DBOS's steps/s on the same store in the same run; "
        f"DBOS ran from {python}"
    )


if __name__ == "__main__":
    main()
