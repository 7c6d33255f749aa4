"""A completed step name called again as another kind of step (DW-STEP-3, DW-REPLAY-2,
decisions D7, D8) on SQLite and PostgreSQL.

"完了済み名は成功・失敗を問わず記録結果でreplayし、新たな効果を起こさない": the call
resolves to what was recorded for the name, whatever it is called as now, with no new
effect and no new journal event; step_definition_mismatch is only for an *unfinished*
name reused as another kind (test_failures_and_limits.py). The success pairs are
``test_dw_step_3_d7_a_completed_name_called_as_another_kind_replays`` there; here are
the recorded failures, and replay determinism: a fresh context replaying the recorded
history with the same code ends exactly as the live run did and appends nothing.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from workflow_cases import create, send, status, step_record, topics, work

from blackops import (
    Application,
    StepFailed,
    WaitTimeout,
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
    ("failed do", "sleep", StepFailed, "step_failed", "effect failed"),
    ("failed do", "wait", StepFailed, "step_failed", "effect failed"),
    ("timed-out wait", "do", WaitTimeout, "wait_timeout", "'never' event within 1 s"),
    ("timed-out wait", "sleep", WaitTimeout, "wait_timeout", "'never' event within 1 s"),
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


@pytest.mark.parametrize(("first", "then", "cls", "name", "message"), FAILURES)
def test_a_recorded_failure_is_raised_again_when_called_as_another_kind(
    app: Application,
    clock: FakeClock,
    first: str,
    then: str,
    cls: type[WorkflowStepError],
    name: str,
    message: str,
) -> None:
    """A failed do called as sleep or wait_for_event re-raises its recorded StepFailed;
    a timed-out wait called as do or sleep its WaitTimeout; nothing runs or is recorded."""
    ran: list[str] = []

    class Failing:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            with contextlib.suppress(WorkflowStepError):
                await _first(step, first)
            try:
                await _again(step, then, ran)
            except WorkflowStepError as error:
                return {"class": type(error).__name__, "name": error.name, "text": str(error)}
            return {"resolved": True}

    binding, instance = _run_to_end(app, clock, Failing, "failing")
    view = status(instance)
    assert view["status"] == "complete", view
    assert view["output"]["class"] == cls.__name__
    assert view["output"]["name"] == name
    assert message in view["output"]["text"]
    assert ran == []
    assert step_record(app, binding, "i", "x").data["error"]["name"] == name
    assert topics(app, binding, "i").count("step_completed") == 1


def test_a_failed_do_called_as_sleep_fails_the_run_as_a_replayed_do_would(
    app: Application, clock: FakeClock
) -> None:
    """The re-raised recorded StepFailed is genuine (D8): escaping run, it ends the
    instance exactly as the same name replayed as a do would (step_failed)."""

    def escaping(kind: str) -> type:
        class Escaping:
            def __init__(self, env: Any) -> None:
                pass

            async def run(self, event: Any, step: Any) -> Any:
                with contextlib.suppress(StepFailed):
                    await step.do("x", fail)
                await (step.sleep("x", 10) if kind == "sleep" else step.do("x", fail))
                return {"unreachable": True}

        return Escaping

    _, as_sleep = _run_to_end(app, clock, escaping("sleep"), "as-sleep")
    _, as_do = _run_to_end(app, clock, escaping("do"), "as-do")
    view = status(as_sleep)
    assert view["status"] == "errored" and view["error"]["reason"] == "step_failed", view
    assert "effect failed" in view["error"]["message"]
    assert view == status(as_do)


class Rekinded:
    """Every kind pair in one run, each completed name called again as another kind
    (the recorded outcomes are reported, so a replay must reproduce them)."""

    def __init__(self, env: Any) -> None:
        pass

    async def run(self, event: Any, step: Any) -> Any:
        seen: list[Any] = []
        await step.do("d", lambda: {"done": True})
        await step.sleep("s", 0)
        await step.wait_for_event("w", type="go", timeout_seconds=60)
        with contextlib.suppress(StepFailed):
            await step.do("f", fail)
        await step.sleep("between", 5)  # what follows runs in a later context too
        seen.append(await step.sleep("d", 10))  # do -> sleep
        seen.append(await step.do("s", fail))  # sleep -> do
        seen.append(await step.wait_for_event("d", type="never", timeout_seconds=9))
        seen.append(await step.do("w", fail))  # wait -> do
        try:
            await step.sleep("f", 10)  # failed do -> sleep
        except StepFailed as error:
            seen.append(error.name)
        return {"seen": seen}


def test_replaying_a_history_with_reused_names_is_deterministic(
    app: Application, clock: FakeClock
) -> None:
    """The live run and a replay of its recorded history in a fresh context (the
    replay checker, twice, under shifted clocks and hash seeds) end identically and
    append nothing: the replayed outcomes come from the journal alone."""
    binding, instance = _run_to_end(app, clock, Rekinded, "rekinded")
    clock.advance(5)  # the sleep "between": the reused calls run in the second context
    work(app)
    expected = {"seen": [{"done": True}, None, {"done": True}, {"p": 1}, "step_failed"]}
    assert status(instance) == {"status": "complete", "output": expected}
    # d, s, w, f and between: nothing for the reused calls.
    assert topics(app, binding, "i").count("step_completed") == 5
    before = list(app.store.iter_after(0))
    report = replay_histories(Rekinded, recorded_histories(app, "rekinded"))
    assert report.compatible, report.human()
    (replayed,) = report.instances
    assert replayed.end == {"kind": "complete", "output": expected}
    assert replayed.notes == []
    assert list(app.store.iter_after(0)) == before
