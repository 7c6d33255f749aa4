"""An executor that dies after the host's stop, while its code still unwinds (a slow
``finally:``, an OOM kill, an operator's ``kill -9``): what the stop decided stands. The
host fixes a sleep's deadline, or a failed attempt and its retry, at the step's call and
records it once the code has stopped (W5); an executor dying in between was taken as a
context lost, and the next context decided again: the deadline moved by the unwinding's
length, and the failed attempt was neither recorded nor waited for, the effect running
once more than ``maxAttempts`` allowed (DW-SLEEP-1, DW-DO-2; found by a spec hunt, stop
38). A host that kills a context ignoring its stop already recorded the stop's decision.
SQLite and PostgreSQL, a real worker and executor, SIGKILL."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from worker_fleet import wait_for

from blackops import Application, StepFailed
from domain.events import RecordedEvent

pytestmark = pytest.mark.faults


def _unwinding(marker: Path) -> None:
    """A ``finally:`` that takes a moment, the first time: says where and when it began."""
    if not marker.exists():
        marker.write_text(f"{os.getpid()} {time.time()}\n")
        time.sleep(10)


class SlowToStopSleeper:
    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> Any:
        try:
            await step.sleep("nap", 20)
        finally:
            _unwinding(Path(event.params["marker"]))
        return {}


class SlowToStopRetrier:
    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> Any:
        runs = Path(event.params["runs"])

        def effect() -> None:
            with runs.open("a") as out:
                out.write("ran\n")
            raise RuntimeError("flaky")

        try:
            policy = {"maxAttempts": 2, "initialDelaySeconds": 30}
            await step.do("call", effect, retry_policy=policy)
        except StepFailed:
            return {"gave_up": True}
        finally:
            _unwinding(Path(event.params["marker"]))
        return {}


def _history(app: Application, workflow: str) -> list[RecordedEvent]:
    binding = app.workflow(workflow)
    return app.store.read_stream(app.instances.load(binding.resource, "i1").stream)


def _killed_while_unwinding(
    store_url: str, tmp_path: Path, workflow: type
) -> tuple[list[RecordedEvent], float, Path]:
    """Run ``workflow``'s instance ``i1`` until its code unwinds after the step's stop,
    SIGKILL the executor then, and return its history once the stop's decision is recorded
    (with when the step was called, by the code's clock)."""
    marker, runs = tmp_path / "marker", tmp_path / "runs"
    app = Application(store_url)
    binding = app.register_workflow(workflow)
    worker = app.worker(workflow_processes=1, lease_seconds=5).start()
    try:
        asyncio.run(binding.create(id="i1", params={"marker": str(marker), "runs": str(runs)}))
        wait_for(marker.exists, 60, "the code unwinding after the step's stop")
        pid, called = marker.read_text().split()
        time.sleep(1.0)  # the stop was sent before the finally began; it is still running
        os.kill(int(pid), signal.SIGKILL)
        decided = ("workflow.step_suspended", "workflow.step_retry_scheduled")
        wait_for(
            lambda: any(e.type in decided for e in _history(app, workflow.__name__)),
            60,
            "the stop's decision recorded",
        )
        return _history(app, workflow.__name__), float(called), runs
    finally:
        worker.stop(2)
        app.close()


def _at(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def test_a_sleeps_deadline_is_the_one_fixed_at_its_call(store_url: str, tmp_path: Path) -> None:
    events, called, _ = _killed_while_unwinding(store_url, tmp_path, SlowToStopSleeper)
    suspended = [e for e in events if e.type == "workflow.step_suspended"]
    assert len(suspended) == 1, [e.type for e in events]
    # Fixed at the call (the code's clock read just after it): not a second later.
    assert abs(_at(suspended[0].data["due_at"]) - (called + 20)) < 0.5, suspended[0].data
    assert not any(e.data.get("previous_lost") for e in events)


def test_a_failed_attempt_is_recorded_and_its_retry_waits(store_url: str, tmp_path: Path) -> None:
    events, called, runs = _killed_while_unwinding(store_url, tmp_path, SlowToStopRetrier)
    scheduled = [e for e in events if e.type == "workflow.step_retry_scheduled"]
    assert len(scheduled) == 1 and scheduled[0].data["attempt"] == 1, [e.type for e in events]
    assert _at(scheduled[0].data["due_at"]) - called > 25  # 30 s after the failure
    assert runs.read_text().count("ran") == 1  # not run again at once
