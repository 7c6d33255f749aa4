"""Executors forked before the worker's store opens (decisions F80).

- a worker built before its PostgreSQL store opens forks its executors first: they do not
  carry psycopg; built after the store opened, they do (forked from that image, as before);
- a worker built but never started, or whose store does not open, leaves no executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import postgres_schema_url  # type: ignore[import-not-found, unused-ignore]

from blackops import Application
from domain.errors import BackendUnavailable

CHILD = """
import asyncio, json, sys, time
from blackops import Application


class Probe:
    def __init__(self, env):
        self.env = env

    async def run(self, event, step):
        def look():
            return {"psycopg": sorted(m for m in sys.modules if m.startswith("psycopg"))}

        return await step.do("look", look)


app = Application(sys.argv[1])
binding = app.register_workflow(Probe)
if sys.argv[2] == "open-first":
    app.store.last_position()
worker = app.worker(workflow_processes=1, lease_seconds=5).start()
instance = asyncio.run(binding.create())
deadline = time.monotonic() + 60
while (status := asyncio.run(instance.status()))["status"] != "complete":
    assert time.monotonic() < deadline, status
    time.sleep(0.05)
worker.stop(1)
app.close()
print(json.dumps({"executor": status["output"]["psycopg"], "worker": "psycopg" in sys.modules}))
"""


def executor_modules(tmp_path: Path, how: str) -> dict[str, object]:
    script = tmp_path / "probe_app.py"  # a file: a local Version digests its class's code
    script.write_text(CHILD)
    urls = iter(postgres_schema_url())
    url = next(urls)
    try:
        done = subprocess.run(
            [sys.executable, str(script), url, how],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=Path(__file__).parents[2],
        )
    finally:
        next(urls, None)  # drops the schema
    assert done.returncode == 0, done.stderr[-2000:]
    found: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return found


def test_executors_forked_before_the_store_opens_do_not_carry_psycopg(tmp_path: Path) -> None:
    found = executor_modules(tmp_path, "worker-first")
    assert found == {"executor": [], "worker": True}


def test_a_worker_built_after_the_store_opened_forks_from_that_image(tmp_path: Path) -> None:
    """Nothing to gain then: the executors carry what the process had (as before F80)."""
    found = executor_modules(tmp_path, "open-first")
    assert found["worker"] is True
    assert "psycopg" in found["executor"]  # type: ignore[operator]


def children() -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that ended meanwhile
            found.update(int(pid) for pid in (task / "children").read_text().split())
    return {pid for pid in found if _running(pid)}


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class Idle:
    def __init__(self, env: object) -> None:
        self.env = env

    async def run(self, event: object, step: object) -> dict[str, object]:
        return {}


def wait_for_exit(pids: set[int]) -> set[int]:
    deadline = time.monotonic() + 10
    while (left := pids & children()) and time.monotonic() < deadline:
        time.sleep(0.02)
    return left


def completed(binding: Any, instance_id: str) -> dict[str, Any]:
    """Create an instance and wait for it to end; its status."""
    instance = asyncio.run(binding.create(id=instance_id))
    deadline = time.monotonic() + 60
    while (status := asyncio.run(instance.status()))["status"] != "complete":
        assert status["status"] not in ("errored", "terminated"), status
        assert time.monotonic() < deadline, status
        time.sleep(0.05)
    return dict(status)


def test_a_worker_never_started_leaves_no_executor(store_url: str) -> None:
    before = children()
    app = Application(store_url)
    app.register_workflow(Idle)
    worker = app.worker(workflow_processes=2)
    forked = children() - before
    assert len(forked) == 2  # forked at once, before the store opened
    worker.stop()
    app.close()
    assert wait_for_exit(forked) == set()


def test_a_worker_whose_store_does_not_open_leaves_no_executor() -> None:
    before = children()
    app = Application("postgresql://postgres@127.0.0.1:1/nothing_listens_here")
    app.register_workflow(Idle)
    with pytest.raises(BackendUnavailable):
        app.worker(workflow_processes=2)
    assert wait_for_exit(children() - before) == set()


class Late:
    def __init__(self, env: object) -> None:
        self.env = env

    async def run(self, event: object, step: object) -> dict[str, str]:
        return {"ran": "late"}


def test_a_workflow_registered_after_the_worker_was_built_still_runs(store_url: str) -> None:
    """The early executors do not hold a workflow registered after they were forked: the
    context of the late workflow goes to a fresh fork, and its instance completes."""
    app = Application(store_url)
    app.register_workflow(Idle)
    before = children()
    worker = app.worker(workflow_processes=1, lease_seconds=5)
    early = children() - before
    assert len(early) == 1
    late = app.register_workflow(Late)
    worker.start()
    try:
        assert completed(late, "late-1")["output"] == {"ran": "late"}
        assert wait_for_exit(early) == set()  # the stale fork was replaced
    finally:
        worker.stop(1)
        app.close()


class Marked:
    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: object, step: object) -> dict[str, str]:
        return {"mark": self.env.mark}


@pytest.mark.parametrize("forked", ["early", "by the loop"])
def test_a_workflow_registered_while_the_worker_runs_runs_with_its_code(
    store_url: str, forked: str
) -> None:
    """Decisions F150: executors forked before a registration (early, or by the runner's
    loop once the store was open) do not hold its code; the runner hands such a context to a
    fresh fork, so a workflow registered, or registered again with another env, while the
    worker runs runs with what was registered last."""
    app = Application(store_url)
    app.register_workflow(Idle)
    if forked == "by the loop":
        app.store.last_position()  # the store is open: no early executors
    worker = app.worker(workflow_processes=2, lease_seconds=5).start()
    try:
        assert completed(app.workflow("Idle"), "i-1")["output"] == {}
        late = app.register_workflow(Late)
        assert completed(late, "l-1")["output"] == {"ran": "late"}
        first = app.register_workflow(Marked, env={"mark": "first"})
        assert completed(first, "m-1")["output"] == {"mark": "first"}
        again = app.register_workflow(Marked, env={"mark": "second"})
        assert completed(again, "m-2")["output"] == {"mark": "second"}
        assert completed(app.workflow("Idle"), "i-2")["output"] == {}
    finally:
        worker.stop(1)
        app.close()
