"""Worker processes for fault tests: ``blackops worker`` subprocesses a test can kill,
freeze, stop and read the output of (used by the operation and workflow fault tests)."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from journal.locator import postgres_connect, resolve_store

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"


def _worker_command() -> list[str]:
    script = Path(sys.executable).with_name("blackops")
    return [str(script)] if script.exists() else [sys.executable, "-m", "blackops.cli.main"]


# -- worker processes ------------------------------------------------------------------------


class WorkerProcess:
    """One ``blackops worker`` subprocess; its stdout and stderr go to a log file."""

    def __init__(
        self,
        store: str,
        label: str,
        folder: Path,
        *,
        concurrency: int = 1,
        lease: float = 1.5,
        grace: float = 5.0,
        poll: float = 0.1,
        env: dict[str, str] | None = None,
        app: str = "fault_apps:app",
    ) -> None:
        self.label = label
        self.log_path = folder / f"worker-{label}.log"
        command = [
            *_worker_command(),
            "worker",
            "--app",
            app,
            "--store",
            store,
            "--concurrency",
            str(concurrency),
            "--lease-seconds",
            str(lease),
            "--grace-seconds",
            str(grace),
            "--poll-seconds",
            str(poll),
        ]
        # Test modules name apps as ``module:attr``: every test folder is importable.
        folders = [str(TESTS), *(str(p) for p in sorted(TESTS.iterdir()) if p.is_dir())]
        path = os.pathsep.join([*folders, str(ROOT), os.environ.get("PYTHONPATH", "")])
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": path, "FAULT_LABEL": label, **(env or {})},
        )
        self.pid = self.process.pid
        self.id = ""

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"

    def wait_ready(self, timeout: float = 60) -> str:
        """Wait for the start line; returns the worker id the journal will name."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(r"^BlackOps worker (\S+): ", self.output(), re.MULTILINE)
            if found:
                self.id = found.group(1)
                return self.id
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(
            f"worker {self.label} did not start (exit {self.process.poll()}):\n{self.output()}"
        )

    def signal(self, signum: int) -> None:
        os.kill(self.pid, signum)

    def stop_now(self, timeout: float = 5.0) -> None:
        """SIGSTOP it and return once every thread is stopped. ``kill`` returns before the
        signal is acted on: a thread still running on the other core could begin a
        transaction after the caller looked, and freeze holding its lock."""
        self.signal(signal.SIGSTOP)
        deadline = time.monotonic() + timeout
        while not self._all_threads_stopped():
            if time.monotonic() > deadline:
                raise AssertionError(f"worker {self.label} did not stop within {timeout}s")
            time.sleep(0.001)

    def _all_threads_stopped(self) -> bool:
        states = []
        for task in Path(f"/proc/{self.pid}/task").iterdir():
            try:  # the state follows the command name, which may hold spaces or ")"
                states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
            except (OSError, IndexError):
                continue  # a thread that just ended
        return bool(states) and all(state in "tT" for state in states)

    def wait_exit(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"worker {self.label} did not exit within {timeout}s:\n{self.output()}"
            ) from None

    def close(self) -> None:
        """Kill it if it still runs (SIGCONT first, in case it is stopped) and reap it."""
        if self.process.poll() is None:
            for signum in (signal.SIGCONT, signal.SIGKILL):
                try:
                    self.signal(signum)
                except ProcessLookupError:
                    break
            self.process.wait(30)
        self._log.close()


class Fleet:
    """The worker processes of one test; all are killed and reaped at teardown."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.workers: list[WorkerProcess] = []

    def start(self, store: str, label: str, **options: Any) -> WorkerProcess:
        worker = WorkerProcess(store, label, self.folder, **options)
        self.workers.append(worker)
        worker.wait_ready()
        return worker

    def report(self) -> str:
        return "\n".join(
            f"----- worker {w.label} (pid {w.pid}, id {w.id}, exit {w.process.poll()}) -----\n"
            f"{w.output()}"
            for w in self.workers
        )

    def close(self) -> None:
        for worker in self.workers:
            worker.close()

    def stop_gracefully(self) -> None:
        """SIGTERM every worker; each must drain and exit 0."""
        for worker in self.workers:
            worker.signal(signal.SIGTERM)
        for worker in self.workers:
            assert worker.wait_exit(60) == 0


# -- freezing outside transactions --------------------------------------------------------


def store_is_quiet(store_url: str) -> bool:
    """No other process holds a transaction on the store (SQLite write lock, PG locks)."""
    location = resolve_store(store_url)
    if location.kind == "sqlite":
        lite = sqlite3.connect(str(location.sqlite_path), timeout=0)
        try:
            lite.execute("BEGIN IMMEDIATE")
            lite.rollback()
            return True
        except sqlite3.OperationalError:
            return False
        finally:
            lite.close()
    settings = location.settings
    # Looked at twice, a moment apart: a statement sent just before the stop may still be
    # on its way into the server, holding no lock yet at the first look.
    with postgres_connect(settings) as conn:
        for look in range(2):
            if look:
                time.sleep(0.02)
            row = conn.execute(
                "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s AND l.pid <> pg_backend_pid()",
                (settings["POSTGRES_SCHEMA"],),
            ).fetchone()
            if row is None or row[0] != 0:
                return False
    return True


def freeze(workers: WorkerProcess | Sequence[WorkerProcess], store_url: str) -> None:
    """SIGSTOP ``workers`` at a moment none holds a transaction open.

    A process frozen inside a transaction holds SQLite's write lock (or PostgreSQL's
    locks) and blocks every other writer, this test's own included: a real hazard, but
    not the one under test. Thaw and freeze again until the store is quiet.
    """
    group = [workers] if isinstance(workers, WorkerProcess) else list(workers)
    for _ in range(100):
        for worker in group:
            worker.stop_now()  # stopped for certain: it can begin nothing after the look
        if store_is_quiet(store_url):
            return
        for worker in group:
            worker.signal(signal.SIGCONT)
        time.sleep(0.01)
    raise AssertionError("could not freeze the workers outside a transaction")


def wait_for(
    condition: Callable[[], bool],
    timeout: float,
    what: str,
    explain: Callable[[], str] = lambda: "",
    interval: float = 0.05,
) -> float:
    """Poll ``condition`` until true; returns the seconds waited, fails saying ``what``."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{explain()}")
        time.sleep(interval)
    return time.monotonic() - start
