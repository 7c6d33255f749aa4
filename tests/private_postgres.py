"""A private PostgreSQL server for fault tests that stop and restart the database.

The shared server must never be stopped from a test (a test that dies half-way would
take every later test's database with it), so tests that crash PostgreSQL get their
own: ``initdb`` into a temporary directory owned by ``postgres``, on a free port,
with its socket in that directory. PostgreSQL refuses to run as root, so as root its
binaries run as ``postgres`` through ``runuser``.

The ``private_postgres`` fixture (session scope) creates it, yields a
:class:`PrivateServer` and always stops and removes it. Under ``CI=true`` a server
that cannot be started fails the test; elsewhere the test is skipped.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _bindir() -> Path:
    """``$BLACKOPS_TEST_PG_BINDIR``, else the newest /usr/lib/postgresql/N/bin."""
    configured = os.environ.get("BLACKOPS_TEST_PG_BINDIR")
    if configured:
        return Path(configured)
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda p: (
            int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0
        ),
    )
    if not found:
        raise RuntimeError("no PostgreSQL binaries under /usr/lib/postgresql/*/bin")
    return Path(found[-1]).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateServer:
    """One throw-away PostgreSQL cluster: ``url(schema)``, ``stop()``, ``start()``."""

    def __init__(self, root: Path, port: int, bindir: Path) -> None:
        self.root = root
        self.port = port
        self.bindir = bindir
        self.data = root / "data"
        self.log = root / "server.log"
        self._as_postgres = os.geteuid() == 0

    def _run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        command = [str(self.bindir / args[0]), *args[1:]]
        if self._as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, cwd=self.root
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"{' '.join(command)} exited {result.returncode}:\n{result.stdout}\n"
                f"{result.stderr}\n--- server log ---\n{self.server_log()}"
            )
        return result

    def server_log(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-4000:]
        except OSError:
            return "(no server log)"

    def init(self) -> None:
        self._run("initdb", "-A", "trust", "-U", "postgres", "-E", "UTF8", "-D", str(self.data))

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.log), "-w",
                  "-t", "60", "start")  # fmt: skip
        self.wait_ready()

    def stop(self, mode: str = "immediate") -> None:
        """``immediate`` is a crash: no checkpoint, clients cut off mid-transaction."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    @property
    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.url_base(), connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.Error:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def url_base(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def url(self, schema: str) -> str:
        """A store URL for ``schema`` on this server (short connect timeout)."""
        return f"{self.url_base()}?schema={schema}&connect_timeout=1"

    def kill(self) -> None:
        """Last resort at teardown: SIGKILL the postmaster we started."""
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int((self.data / "postmaster.pid").read_text().splitlines()[0])
            os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def private_server() -> Iterator[PrivateServer]:
    """Create, start, yield and always stop and remove a private server."""
    root = Path(tempfile.mkdtemp(prefix="blackops-pg-"))
    server: PrivateServer | None = None
    try:
        if os.geteuid() == 0:
            shutil.chown(root, "postgres", "postgres")
        server = PrivateServer(root, _free_port(), _bindir())
        server.init()
        server.start()
        yield server
    finally:
        if server is not None and server.running:
            try:
                server.stop("immediate")
            except Exception:
                server.kill()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def private_postgres() -> Iterator[PrivateServer]:
    """A private PostgreSQL server that tests may crash and restart."""
    manager = private_server()
    try:
        server = manager.__enter__()
    except Exception as error:
        manager.__exit__(type(error), error, error.__traceback__)
        message = f"cannot start a private PostgreSQL server: {error}"
        if IN_CI:
            pytest.fail(f"CI=true requires it. {message}")
        pytest.skip(message)
    try:
        yield server
    finally:
        manager.__exit__(None, None, None)
