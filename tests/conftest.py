"""Shared fixtures: every store-touching test runs on SQLite and on PostgreSQL.

PostgreSQL comes from ``BLACKOPS_TEST_POSTGRES_URL`` (default: the local server).
Each test gets its own schema, dropped afterwards; the run's prefix is swept at the
end. Under ``CI=true`` an unreachable PostgreSQL fails the run instead of skipping.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import tempfile
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from psycopg import sql
from worker_fleet import Fleet

from blackops import Application
from blackops.testing import FakeClock

# A loaded CI machine pauses a process for longer than Hypothesis's 200 ms deadline per
# example, which it then reports as a flaky test: time is the machine's, not the test's.
settings.register_profile("blackops", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("blackops")

# The CLI keeps its tokens and development signing key in $BLACKOPS_HOME, else ./.blackops:
# a checkout where `make run` had served holds a signing key there, and tests running the
# CLI from the checkout then signed checkpoints their journals did not expect. Each test
# process gets its own state dir; tests about the state dir set it themselves.
os.environ["BLACKOPS_HOME"] = tempfile.mkdtemp(prefix="blackops-home-")
atexit.register(shutil.rmtree, os.environ["BLACKOPS_HOME"], ignore_errors=True)

# A runner started in the background (CI's, `make test &`) has SIGINT ignored, which every
# process it starts inherits: Python then leaves SIGINT ignored, and a test's Ctrl-C to a
# command before that command took the signal itself was lost (serve ran on for ever: the
# CI timeouts of stop 34). A handler of our own, not Python's KeyboardInterrupt: exec resets
# a handled signal to its default, so the commands under test get SIGINT as from a terminal,
# while this process still ignores one, as its host chose. With Python's handler here (stop
# 35) a stray SIGINT raised KeyboardInterrupt inside a test worker, in a weakref callback and
# in an import's ast.parse, which left the parser's state broken for the next test's import
# (CI, stop 35: "AST constructor recursion depth mismatch").


def _sigint_ignored(signum: int, frame: object) -> None:
    test = os.environ.get("PYTEST_CURRENT_TEST", "between tests")
    os.write(2, f"conftest: SIGINT ignored in test process {os.getpid()} ({test})\n".encode())


if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, _sigint_ignored)

POSTGRES_URL = os.environ.get(
    "BLACKOPS_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
RUN_PREFIX = f"bt_{os.getpid()}_{uuid.uuid4().hex[:6]}"
STORES = ("sqlite", "postgresql")
_counter = iter(range(1_000_000))
_postgres_error: str | None = None


def _connect() -> psycopg.Connection[tuple[object, ...]]:
    parts = urlsplit(POSTGRES_URL)
    return psycopg.connect(
        host=parts.hostname,
        port=parts.port or 5432,
        user=parts.username or "postgres",
        password=parts.password or "",
        dbname=parts.path.lstrip("/"),
        autocommit=True,
        connect_timeout=5,
    )


def pytest_sessionstart(session: pytest.Session) -> None:
    global _postgres_error
    try:
        with _connect() as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as error:
        _postgres_error = f"PostgreSQL at {POSTGRES_URL} is unreachable: {error}"
        if IN_CI:
            raise pytest.UsageError(f"CI=true requires PostgreSQL. {_postgres_error}") from None


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _postgres_error is not None:
        return
    with _connect() as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE %s", (RUN_PREFIX + "%",)
        ).fetchall()
        for (name,) in rows:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(str(name))))


def postgres_schema_url() -> Iterator[str]:
    """A fresh schema for one test; dropped when the generator closes."""
    if _postgres_error is not None:
        pytest.skip(_postgres_error)
    schema = f"{RUN_PREFIX}_{next(_counter)}"
    separator = "&" if "?" in POSTGRES_URL else "?"
    try:
        yield f"{POSTGRES_URL}{separator}schema={schema}"
    finally:
        with _connect() as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def _private_store(kind: str, tmp_path: Path) -> Iterator[str]:
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path}/journal.sqlite3"
    elif kind == "memory":
        yield "memory://"
    else:
        yield from postgres_schema_url()


@pytest.fixture(params=STORES)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A private, empty durable store of each kind (SQLite, PostgreSQL)."""
    yield from _private_store(request.param, tmp_path)


@pytest.fixture(params=(*STORES, "memory"))
def any_store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Every backend, the in-memory one included."""
    yield from _private_store(request.param, tmp_path)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2026, 11, 30, 9, 0, 0, tzinfo=UTC))


@pytest.fixture
def app(store_url: str, clock: FakeClock) -> Iterator[Application]:
    application = Application(store_url, clock=clock)
    try:
        yield application
    finally:
        application.close()


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    """The worker processes of one test (tests/worker_fleet.py), killed at teardown."""
    workers = Fleet(tmp_path)
    try:
        yield workers
    finally:
        workers.close()
        # Shown by pytest only when the test fails.
        print(workers.report())


def spaces(app: Application, *names: str) -> None:
    """Create these Spaces (an HTTP route answers not_found for a Space nobody created,
    whoever asks, the system token included: decisions Q2)."""
    from domain.context import Actor

    for name in names:
        if not app.access.space_exists(name):
            app.access.create_space(name, app.access_context(Actor("test", "cli"), name))
