"""What an effect started stops with its context: executor process groups (real processes,
both stores).

An effect that starts a process (``subprocess``, here ``sh -c 'sleep N; echo late >> F'``)
must not outlive its context: its executor leads a process group, every kill takes the
whole group, and an executor that ends by itself takes it down too (DW-TERM-1, DW-DEL-2).

- terminate(): when it returns, the effect's process is gone and never writes;
- the worker SIGKILLed: the executor notices and kills its group at once;
- the worker frozen (SIGSTOP): the executor's watchdog kills its group at 0.8 x lease;
- the worker interrupted (SIGINT, as Ctrl-C; the executors are in their own session, so
  only the worker gets it): its drain kills the group.

The worker subprocesses run this module's ``app`` (``--app test_workflow_group_kills:app``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from worker_fleet import Fleet, WorkerProcess, wait_for

from blackops import Application

pytestmark = pytest.mark.faults

APP = "test_workflow_group_kills:app"
#: How long the effect's helper sleeps before it writes its line.
HELPER_SECONDS = 4


class Spawning:
    """One step whose effect starts a helper process and waits for it."""

    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> dict[str, Any]:
        folder = Path(event.params["folder"])

        def effect() -> dict[str, Any]:
            late = folder / "late"
            helper = subprocess.Popen(
                ["sh", "-c", f"sleep {event.params['seconds']}; echo late >> {late}"]
            )
            pids = folder / "pids.tmp"
            pids.write_text(f"{os.getpid()} {helper.pid}")
            pids.replace(folder / "pids")  # whole, or not there
            if event.params.get("crunch"):
                import concurrent.futures
                import math

                with concurrent.futures.ThreadPoolExecutor(1) as pool:  # C, the GIL held
                    pool.submit(math.factorial, 3_000_000).result()
            helper.wait()
            return {"ok": True}

        return await step.do("spawn", effect)  # type: ignore[no-any-return]


class Leaving:
    """An effect that starts a helper and returns without waiting for it; then a long sleep."""

    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> dict[str, Any]:
        folder = Path(event.params["folder"])

        def effect() -> dict[str, Any]:
            late = folder / "late"
            helper = subprocess.Popen(["sh", "-c", f"sleep {HELPER_SECONDS}; echo late >> {late}"])
            (folder / "pids.tmp").write_text(f"{os.getpid()} {helper.pid}")
            (folder / "pids.tmp").replace(folder / "pids")
            return {"helper": helper.pid}

        await step.do("leave", effect)
        await step.sleep("nap", 3600)
        return {"ok": True}


def build_app(store: str | None = None) -> Application:
    application = Application(store)
    application.register_workflow(Spawning)
    application.register_workflow(Leaving)
    return application


app = build_app()  # what the worker subprocesses run


@pytest.fixture
def spawning(store_url: str) -> Iterator[Application]:
    application = build_app(store_url)
    try:
        yield application
    finally:
        application.close()


def alive(pid: int) -> bool:
    """Runs code: exists and is not a zombie (whose new parent may not have reaped it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def start_effect(
    application: Application,
    fleet: Fleet,
    store_url: str,
    folder: Path,
    crunch: bool = False,
    **worker: Any,
) -> tuple[Any, WorkerProcess, int, int]:
    """A worker running the effect: (instance, worker, executor pid, helper pid)."""
    params = {"folder": str(folder), "seconds": HELPER_SECONDS, "crunch": crunch}
    instance = asyncio.run(application.workflow("Spawning").create(id="spawner", params=params))
    owner = fleet.start(store_url, "A", app=APP, **worker)
    wait_for(lambda: (folder / "pids").exists(), 60, "the effect to start its helper")
    executor_pid, helper_pid = (int(p) for p in (folder / "pids").read_text().split())
    assert executor_pid != owner.pid and alive(helper_pid)
    return instance, owner, executor_pid, helper_pid


def assert_never_written(folder: Path, helper_pid: int) -> None:
    """The helper is gone, and stays silent past the time it would have written."""
    assert not alive(helper_pid)
    time.sleep(HELPER_SECONDS + 1)
    assert not (folder / "late").exists()


def test_terminate_returns_after_the_effects_processes_are_gone(
    spawning: Application, fleet: Fleet, store_url: str, tmp_path: Path
) -> None:
    """DW-TERM-1: terminated is published only once the process the effect started has
    stopped too; it never writes afterwards."""
    instance, _, executor_pid, helper_pid = start_effect(
        spawning, fleet, store_url, tmp_path, lease=30.0
    )
    asyncio.run(instance.terminate())
    assert not alive(executor_pid) and not alive(helper_pid)
    assert asyncio.run(instance.status()) == {"status": "terminated"}
    assert_never_written(tmp_path, helper_pid)


def test_a_sigkilled_workers_executor_takes_its_group_down(
    spawning: Application, fleet: Fleet, store_url: str, tmp_path: Path
) -> None:
    """The worker dies without a word (SIGKILL): its executor notices at once (not at
    0.8 x lease) and kills the processes its effect started with itself."""
    _, owner, executor_pid, helper_pid = start_effect(
        spawning, fleet, store_url, tmp_path, lease=30.0
    )
    owner.signal(signal.SIGKILL)
    owner.wait_exit(10)
    wait_for(lambda: not alive(executor_pid), 5, "the executor to die with its worker")
    wait_for(lambda: not alive(helper_pid), 2, "the effect's helper to die with it")
    assert_never_written(tmp_path, helper_pid)


def test_a_sigkilled_workers_executor_dies_while_its_effect_holds_the_gil(
    spawning: Application, fleet: Fleet, store_url: str, tmp_path: Path
) -> None:
    """An effect computing in C (the GIL held for many seconds) runs no Python signal
    handler nor watchdog: the kernel kills the executor with its worker (PDEATHSIG), and the
    group's reaper then kills the helper (found by review: with a SIGTERM handled in Python
    the executor outlived its worker's lease)."""
    _, owner, executor_pid, helper_pid = start_effect(
        spawning, fleet, store_url, tmp_path, crunch=True, lease=2.0
    )
    time.sleep(0.5)  # inside the computation
    owner.signal(signal.SIGKILL)
    owner.wait_exit(10)
    wait_for(lambda: not alive(executor_pid), 1.5, "the kernel to kill the executor")
    wait_for(lambda: not alive(helper_pid), 2, "the group's reaper to kill the helper")
    assert_never_written(tmp_path, helper_pid)


def test_a_frozen_workers_executor_takes_its_group_down_before_the_lease_ends(
    spawning: Application, fleet: Fleet, store_url: str, tmp_path: Path
) -> None:
    """The worker freezes (SIGSTOP): the executor's watchdog stops it and its group at
    0.8 x lease after the last renewal, before another worker may take the context."""
    _, owner, executor_pid, helper_pid = start_effect(
        spawning, fleet, store_url, tmp_path, lease=2.0
    )
    owner.stop_now()
    wait_for(lambda: not alive(executor_pid), 3, "the executor's watchdog")
    wait_for(lambda: not alive(helper_pid), 1, "the effect's helper to die with it")
    assert_never_written(tmp_path, helper_pid)


def test_an_interrupted_worker_stops_the_effects_processes(
    spawning: Application, fleet: Fleet, store_url: str, tmp_path: Path
) -> None:
    """SIGINT (what Ctrl-C sends the terminal's foreground group; the executors lead their
    own sessions, so only the worker gets it): the worker drains for its grace period,
    kills the executor's group, and exits 0."""
    _, owner, executor_pid, helper_pid = start_effect(
        spawning, fleet, store_url, tmp_path, lease=30.0, grace=0.5
    )
    owner.signal(signal.SIGINT)
    assert owner.wait_exit(15) == 0
    assert not alive(executor_pid) and not alive(helper_pid)
    assert_never_written(tmp_path, helper_pid)


def test_a_process_an_effect_left_running_is_stopped_before_the_sleep_is_published(
    spawning: Application, fleet: Fleet, store_url: str, tmp_path: Path
) -> None:
    """DW-FENCE-1: sleeping is published only once the code has stopped, and what an effect
    started is code of the context (W16). A helper the effect did not wait for ran on after
    ``sleeping`` was published, and after ``terminate()`` returned ``terminated`` (no context
    was open: found by a spec review, stop 37); its executor is now replaced first."""
    params = {"folder": str(tmp_path)}
    instance = asyncio.run(spawning.workflow("Leaving").create(id="leaver", params=params))
    fleet.start(store_url, "A", app=APP)
    wait_for(
        lambda: asyncio.run(instance.status())["status"] == "sleeping", 60, "the instance to sleep"
    )
    executor_pid, helper_pid = (int(p) for p in (tmp_path / "pids").read_text().split())
    assert not alive(helper_pid) and not alive(executor_pid)
    asyncio.run(instance.terminate())
    assert asyncio.run(instance.status()) == {"status": "terminated"}
    assert_never_written(tmp_path, helper_pid)
