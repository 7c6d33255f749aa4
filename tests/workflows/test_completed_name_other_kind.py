"""A completed step name called again as another kind of step (decisions D7, DW-STEP-2)
on SQLite and PostgreSQL: step_definition_mismatch, as for an unfinished name, whatever
was recorded (a result, a failure, a timeout), and the app cannot catch it away. Stops
33-35 replayed the recorded outcome instead (a do's document for a sleep, whose promise is
void; a wait's timeout from a do): the spec's decisions say "replaying a result across
kinds has no meaning" (found by a spec review, stop 36). The success pairs are in
test_failures_and_limits.py; here are the recorded failures, and replay determinism: a
fresh context replaying the recorded history with the same code ends as the live run did
and appends nothing.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from workflow_cases import create, send, status, step_record, topics, work

from blackops import (
    Application,
    StepFailed,
    WorkflowBinding,
    WorkflowInstance,
    WorkflowStepError,
)
from blackops.testing import FakeClock, recorded_histories, replay_histories


def fail() -> None:
    raise RuntimeError("effect failed")


async def _first(step: Any, first: str) -> None:
    """Complete step "x" as ``first``: a do that fails, or a wait that times out."""
    if first == "failed do":
        await step.do("x", fail)
    else:
        await step.wait_for_event("x", type="never", timeout_seconds=1)


def _again(step: Any, then: str, ran: list[str]) -> Any:
    """Call "x" as ``then`` with arguments that would start new work if used."""

    def effect() -> dict[str, Any]:
        ran.append("x")
        return {"new": True}

    if then == "do":
        return step.do("x", effect)
    if then == "sleep":
        return step.sleep("x", 10)
    return step.wait_for_event("x", type="go", timeout_seconds=10)


FAILURES = [
    ("failed do", "sleep"),
    ("failed do", "wait"),
    ("timed-out wait", "do"),
    ("timed-out wait", "sleep"),
]


def _run_to_end(
    app: Application, clock: FakeClock, cls: type, uid: str
) -> tuple[WorkflowBinding, WorkflowInstance]:
    binding = app.register_workflow(cls, uid=uid)
    instance = create(binding, "i")
    send(instance, "go", {"p": 1})  # a match for a wait_for_event("x", type="go") if used
    work(app)
    clock.advance(2)  # past the timed-out wait's deadline
    work(app)
    return binding, instance


@pytest.mark.parametrize(("first", "then"), FAILURES)
def test_a_recorded_failure_called_as_another_kind_is_a_mismatch(
    app: Application, clock: FakeClock, first: str, then: str
) -> None:
    """A failed do called as sleep or wait_for_event, a timed-out wait called as do or
    sleep: step_definition_mismatch, though the app catches everything; nothing runs and
    nothing more is recorded for the name."""
    ran: list[str] = []

    class Failing:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            with contextlib.suppress(WorkflowStepError):
                await _first(step, first)
            with contextlib.suppress(BaseException):
                await _again(step, then, ran)
            return {"caught": True}

    binding, instance = _run_to_end(app, clock, Failing, "failing")
    view = status(instance)
    assert view["status"] == "errored", view
    assert view["error"]["reason"] == "step_definition_mismatch"
    assert ran == []
    assert topics(app, binding, "i").count("step_completed") == 1
    recorded = "step_failed" if first == "failed do" else "wait_timeout"
    assert step_record(app, binding, "i", "x").data["error"]["name"] == recorded


class Rekinded:
    """Four kinds of step completed, then, in a later context, one of them called as
    another kind."""

    def __init__(self, env: Any) -> None:
        pass

    async def run(self, event: Any, step: Any) -> Any:
        await step.do("d", lambda: {"done": True})
        await step.sleep("s", 0)
        await step.wait_for_event("w", type="go", timeout_seconds=60)
        with contextlib.suppress(StepFailed):
            await step.do("f", fail)
        await step.sleep("between", 5)  # what follows runs in a later context
        return {"seen": await step.sleep("d", 10)}  # do -> sleep


def test_replaying_a_history_that_reused_a_name_ends_as_the_live_run_did(
    app: Application, clock: FakeClock
) -> None:
    """The live run and a replay of its recorded history in a fresh context (the replay
    checker, twice, under shifted clocks and hash seeds) end alike, in the mismatch, and
    append nothing; the checker names the step whose kind changed."""
    binding, instance = _run_to_end(app, clock, Rekinded, "rekinded")
    clock.advance(5)  # the sleep "between": the reused call runs in the second context
    work(app)
    view = status(instance)
    assert view["status"] == "errored" and view["error"]["reason"] == "step_definition_mismatch"
    # d, s, w, f and between: nothing for the reused call.
    assert topics(app, binding, "i").count("step_completed") == 5
    before = list(app.store.iter_after(0))
    report = replay_histories(Rekinded, recorded_histories(app, "rekinded"))
    (replayed,) = report.instances
    assert replayed.end["kind"] == "errored", replayed.end
    assert [(f.kind, f.step, f.step_kind) for f in replayed.findings] == [
        ("kind_changed", "d", "sleep")
    ]
    assert list(app.store.iter_after(0)) == before
