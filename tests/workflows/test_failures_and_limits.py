"""How runs fail (durable-workflow.md §2-§3) on SQLite and PostgreSQL: DW-STEP-2,
DW-STEP-5, DW-SLEEP-2 (the lifetime), DW-HERR-1, DW-HERR-2, DW-INST-5, DW-ABI-3
(decisions D7, D8, D10, D14).

Uncatchable stops derive from BaseException; these tests catch them in the app on
purpose and check that the host records the outcome anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from typing import Any

import pytest
from workflow_cases import (
    LIFETIME,
    MAX_STEPS,
    MICRO,
    contexts_started,
    create,
    of_type,
    send,
    status,
    step_record,
    topics,
    work,
)

from blackops import (
    Application,
    InvalidStepArgument,
    StepFailed,
    WaitTimeout,
    WorkflowBinding,
    WorkflowInstance,
    WorkflowStepError,
)
from blackops.testing import FakeClock


def errored(
    app: Application, cls: type, clock: FakeClock | None = None, later: float = 0
) -> dict[str, Any]:
    """Run instance "e" of ``cls`` (again ``later`` seconds on) and return its error."""
    instance = create(app.register_workflow(cls), "e")
    work(app)
    if clock is not None:
        clock.advance(later)
        work(app)
    view = status(instance)
    assert view["status"] == "errored", view
    assert set(view) == {"status", "error"}
    error: dict[str, Any] = view["error"]
    return error


def fail() -> None:
    raise RuntimeError("effect failed")


# -- DW-STEP-2: step_definition_mismatch ----------------------------------------------------------


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_dw_step_2_gather_of_two_steps_is_a_mismatch(app: Application) -> None:
    """DW-STEP-2 (W8): ``asyncio.gather`` of two steps overlaps them: uncatchable
    step_definition_mismatch, though the app catches everything and returns."""
    caught: list[bool] = []

    class Gathered:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            try:
                await asyncio.gather(step.do("a", lambda: None), step.do("b", lambda: None))
            except BaseException as stop:
                caught.append(isinstance(stop, Exception))
            return {"survived": True}

    error = errored(app, Gathered)
    assert error["reason"] == "step_definition_mismatch"
    assert caught == [False]  # not an Exception: ``except Exception`` cannot swallow it


def test_dw_step_2_steps_overlapping_in_tasks_are_a_mismatch(app: Application) -> None:
    """DW-STEP-2: two tasks whose steps are in flight at once (async effects that
    yield) overlap too."""
    ran: list[str] = []

    class Tasks:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            async def effect(name: str) -> None:
                await asyncio.sleep(0)
                await asyncio.sleep(0)
                ran.append(name)

            async def one(name: str) -> Any:
                await asyncio.sleep(0)
                return await step.do(name, lambda: effect(name))

            await asyncio.gather(one("a"), one("b"))
            return {"both": True}

    error = errored(app, Tasks)
    assert error["reason"] == "step_definition_mismatch"
    assert "b" not in ran


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_dw_step_2_a_step_called_inside_an_effect_overlaps(app: Application) -> None:
    """DW-STEP-2: a step called from another step's effect overlaps it; catching the
    stop inside the effect does not help."""
    inner: list[str] = []

    class Nested:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            def outer() -> dict[str, Any]:
                try:
                    step.sleep("inner", 0)
                    inner.append("inner started")
                except BaseException:
                    inner.append("caught")
                return {"outer": True}

            return await step.do("outer", outer)

    binding = app.register_workflow(Nested)
    assert errored(app, Nested)["reason"] == "step_definition_mismatch"
    assert inner == ["caught"]
    assert of_type(app, binding, "e", "step_completed") == []


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_dw_step_2_run_settling_with_an_unsettled_step_is_a_mismatch(app: Application) -> None:
    """DW-STEP-2: run returning while a step it called is still unsettled."""

    class Forgot:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            step.sleep("never awaited", 10)
            return {"done": True}

    assert errored(app, Forgot)["reason"] == "step_definition_mismatch"


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_dw_step_2_run_raising_with_an_unsettled_step_is_a_mismatch(app: Application) -> None:
    """DW-STEP-2: a run that settles by raising while a step is unsettled is a mismatch
    too, not run_threw."""

    class Forgot:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            step.do("never awaited", lambda: None)
            raise ValueError("left early")

    assert errored(app, Forgot)["reason"] == "step_definition_mismatch"


def _call(step: Any, kind: str, name: str) -> Any:
    if kind == "do":
        return step.do(name, fail, retry_policy={"maxAttempts": 2, "initialDelaySeconds": 10})
    if kind == "sleep":
        return step.sleep(name, 10)
    return step.wait_for_event(name, type="never", timeout_seconds=10)


KIND_CHANGES = [
    (first, then)
    for first in ("do", "sleep", "wait")
    for then in ("do", "sleep", "wait")
    if first != then
]


@pytest.mark.parametrize(("first", "then"), KIND_CHANGES)
def test_dw_step_2_an_unfinished_name_reused_for_another_kind(
    app: Application, clock: FakeClock, first: str, then: str
) -> None:
    """DW-STEP-2: a pending step (retry delay, sleep, wait) called in the next context
    as another kind of step: step_definition_mismatch, though the app catches it."""
    calls: list[str] = []

    class Changed:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            kind = first if not calls else then
            calls.append(kind)
            try:
                await _call(step, kind, "x")
            except BaseException:
                if len(calls) == 1:
                    raise
            return {"ignored": True}

    error = errored(app, Changed, clock, later=10 + MICRO)
    assert calls == [first, then]
    assert error["reason"] == "step_definition_mismatch"


def _run_with_go(
    app: Application, clock: FakeClock, cls: type, id: str
) -> tuple[WorkflowBinding, WorkflowInstance]:
    """Instance ``id`` of ``cls``, sent the event "go" ``{"p": 1}``, run, then run again
    past the 5 s sleep "between" of `_complete_x`."""
    binding = app.register_workflow(cls)
    instance = create(binding, id)
    send(instance, "go", {"p": 1})
    work(app)
    clock.advance(6)
    work(app)
    return binding, instance


async def _complete_x(step: Any, kind: str, where: str) -> None:
    """Complete step "x" as ``kind`` (a wait consumes the instance's "go" event), then, for
    "later context", sleep so that what follows runs in the next context."""
    if kind == "do":
        await step.do("x", lambda: {"done": True})
    elif kind == "sleep":
        await step.sleep("x", 0)
    else:
        await step.wait_for_event("x", type="go", timeout_seconds=60)
    if where == "later context":
        await step.sleep("between", 5)


@pytest.mark.parametrize("kind", ["do", "sleep", "wait"])
@pytest.mark.parametrize("where", ["same context", "later context"])
def test_dw_step_3_a_completed_name_needs_none_of_its_other_arguments(
    app: Application, clock: FakeClock, kind: str, where: str
) -> None:
    """DW-STEP-3: "完了済み名の残りの引数は使わない" (as JavaScript passes undefined): a
    completed name called with the name alone replays; an unfinished one refuses what is
    missing (InvalidStepArgument, the spec's TypeError). Left out, they raised Python's own
    TypeError, which ended the run as run_threw (found by a spec review, stop 36)."""

    class Bare:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            await _complete_x(step, kind, where)
            again = {"do": step.do, "sleep": step.sleep, "wait": step.wait_for_event}[kind]
            replayed = await again("x")
            try:
                await again("unfinished")
            except InvalidStepArgument as refused:
                return {"replayed": replayed, "refused": str(refused)[:80]}
            return {"replayed": replayed, "refused": None}

    _, instance = _run_with_go(app, clock, Bare, "bare")
    view = status(instance)
    assert view["status"] == "complete", view
    assert view["output"]["replayed"] == RECORDED[kind]
    assert view["output"]["refused"]


#: What a completed name resolves to, by its recorded kind: a do's result, a sleep's
#: None, a wait's consumed payload (the event "go" carries ``{"p": 1}``).
RECORDED = {"do": {"done": True}, "sleep": None, "wait": {"p": 1}}


@pytest.mark.parametrize(("first", "then"), KIND_CHANGES)
@pytest.mark.parametrize("where", ["same context", "later context"])
def test_dw_step_2_d7_a_completed_name_called_as_another_kind_is_a_mismatch(
    app: Application, clock: FakeClock, first: str, then: str, where: str
) -> None:
    """D7 (the spec's decisions): a completed name called again as another kind of step, in
    the same context or a later one, is step_definition_mismatch, like an unfinished one,
    and the app cannot catch it away; no new effect runs and nothing of it is journaled.
    (Stops 33-35 replayed the recorded outcome instead: a do's document for a sleep, whose
    promise is void, and a wait's timeout from a do; found by a spec review, stop 36.)"""
    ran: list[str] = []

    class Reused:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            await _complete_x(step, first, where)

            # Arguments that would start new, suspending work if they were used.
            def effect() -> dict[str, Any]:
                ran.append("x")
                return {"new": True}

            with contextlib.suppress(BaseException):
                if then == "do":
                    await step.do("x", effect)
                elif then == "sleep":
                    await step.sleep("x", 10)
                else:
                    await step.wait_for_event("x", type="never", timeout_seconds=10)
            return {"caught": True}

    binding, instance = _run_with_go(app, clock, Reused, "r")
    view = status(instance)
    assert view["status"] == "errored", view
    assert view["error"]["reason"] == "step_definition_mismatch"
    assert f"was a {first} step, now called as {then}" in view["error"]["message"]
    assert ran == []
    assert step_record(app, binding, "r", "x").data["kind"] == first
    completed = 2 if where == "later context" else 1  # x's as first recorded (and between's)
    assert topics(app, binding, "r").count("step_completed") == completed


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("then", ["return", "raise", "step", "return none"])
def test_dw_step_2_catching_the_stop_does_not_prevent_it(app: Application, then: str) -> None:
    """DW-STEP-2: an app catching the mismatch (BaseException) and returning, raising
    something else, or calling another step still ends step_definition_mismatch."""
    after: list[str] = []

    class Catcher:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            await step.do("x", lambda: None)
            step.sleep("unsettled", 10)  # never awaited: the next step overlaps it
            try:
                await step.sleep("z", 0)
            except BaseException:
                if then == "raise":
                    raise ValueError("something else") from None
                if then == "step":
                    await step.do("y", lambda: after.append("y ran"))
                if then == "return none":
                    return None
            return {"caught": True}

    binding = app.register_workflow(Catcher)
    assert errored(app, Catcher)["reason"] == "step_definition_mismatch"
    assert after == []
    assert [e.data["name"] for e in of_type(app, binding, "e", "step_completed")] == ["x"]


# -- DW-STEP-5: at most 1024 steps ---------------------------------------------------------------


def test_dw_step_5_dw_inst_5_the_1025th_step_exceeds_the_limit(app: Application) -> None:
    """DW-STEP-5 / DW-INST-5: 1024 steps are fine; the 1025th stops the run with an
    uncatchable step_limit_exceeded, whatever its kind."""
    reached: list[int] = []

    class Many:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            for n in range(MAX_STEPS):
                await step.sleep(f"s{n}", 0)
                await step.sleep(f"s{n}", 0)  # a completed name is no new step
            reached.append(MAX_STEPS)
            with contextlib.suppress(BaseException):
                await step.do("one too many", lambda: reached.append(-1))
            return {"lived": True}

    binding = app.register_workflow(Many)
    error = errored(app, Many)
    assert reached == [MAX_STEPS]
    assert error["reason"] == "step_limit_exceeded"
    assert len(of_type(app, binding, "e", "step_completed")) == MAX_STEPS


def test_dw_step_5_the_host_holds_the_limit_whatever_the_code_counts(app: Application) -> None:
    """DW-STEP-5: 「上限・期限はHost制御」: the count lived only in the code's own Step object,
    and a run that reset it committed 1,100 steps and completed (found by a spec review,
    stop 37). The host refuses the 1025th name and ends the run errored, whatever the code
    reports after it."""

    class Greedy:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            for n in range(MAX_STEPS):
                await step.do(f"s{n}", lambda: None)
            step._plan.steps.clear()  # the code's own count forgotten
            step._new_names.clear()
            with contextlib.suppress(BaseException):
                await step.do("one too many", lambda: None)
            step._stop = None  # and the stop the host answered
            return {"lived": True}

    binding = app.register_workflow(Greedy)
    error = errored(app, Greedy)
    assert error["reason"] == "step_limit_exceeded"
    assert len(of_type(app, binding, "e", "step_completed")) == MAX_STEPS


def test_dw_step_5_1024_steps_across_contexts_complete(app: Application, clock: FakeClock) -> None:
    """DW-STEP-5: the limit counts distinct steps across contexts: 1022 steps, a sleep
    that is pending when the next context replays it, and one more step make exactly
    1024 and complete; one more after that is refused."""

    def build(extra: int) -> type:
        class Exactly:
            def __init__(self, env: Any) -> None:
                pass

            async def run(self, event: Any, step: Any) -> Any:
                for n in range(MAX_STEPS - 2):
                    await step.do(f"d{n}", lambda: None)
                await step.sleep("pending", 10)
                await step.do("last", lambda: None)
                for n in range(extra):
                    await step.do(f"extra{n}", lambda: None)
                return {"steps": MAX_STEPS + extra}

        return Exactly

    exact = create(app.register_workflow(build(0), uid="exact"), "x")
    over = create(app.register_workflow(build(1), uid="over"), "x")
    work(app)
    clock.advance(10)
    work(app)
    assert status(exact) == {"status": "complete", "output": {"steps": MAX_STEPS}}
    assert status(over)["error"]["reason"] == "step_limit_exceeded"


# -- DW-STEP-5 / DW-SLEEP-2: the lifetime ----------------------------------------------------


def test_dw_step_5_d14_lifetime_ends_a_sleep_that_would_outlast_it(
    app: Application, clock: FakeClock
) -> None:
    """DW-STEP-5 / DW-SLEEP-2 (D14): a sleep ending after creation + 31,536,000 s is not
    shortened: at the lifetime's end the instance errors with lifetime_exceeded."""

    class Long:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            await step.sleep("long", LIFETIME)
            return {"woke": True}

    binding = app.register_workflow(Long)
    instance = create(binding, "l")
    clock.advance(10)
    work(app)  # the sleep starts 10 s after creation, so it would end after the lifetime
    clock.advance(LIFETIME - 11)
    work(app)
    assert status(instance) == {"status": "sleeping"}
    clock.advance(1)  # creation + 31,536,000 s
    work(app)
    view = status(instance)
    assert view["status"] == "errored"
    assert view["error"]["reason"] == "lifetime_exceeded"
    assert [e.data["name"] for e in of_type(app, binding, "l", "step_completed")] == []
    assert contexts_started(app, binding, "l") == 1


@pytest.mark.parametrize("what", ["wait", "retry"])
def test_dw_step_5_d14_lifetime_ends_waits_and_retries_too(
    app: Application, clock: FakeClock, what: str
) -> None:
    """DW-STEP-5 (D14): a wait or a retry delay due after the lifetime's end does not
    keep the instance alive: lifetime_exceeded at creation + 31,536,000 s."""

    class Late:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            await step.sleep("until near the end", LIFETIME - 100)
            if what == "wait":
                await step.wait_for_event("w", type="go", timeout_seconds=1000)
            else:
                await step.do(
                    "d", fail, retry_policy={"maxAttempts": 3, "initialDelaySeconds": 1000}
                )
            return None

    binding = app.register_workflow(Late)
    instance = create(binding, "l")
    work(app)
    clock.advance(LIFETIME - 100)
    work(app)
    assert status(instance) == {"status": "waiting" if what == "wait" else "running"}
    clock.advance(99)
    work(app)
    assert status(instance)["status"] in ("waiting", "running")
    clock.advance(1)
    work(app)
    view = status(instance)
    assert view["status"] == "errored"
    assert view["error"]["reason"] == "lifetime_exceeded"


def test_dw_step_5_the_lifetime_cannot_be_caught_away(app: Application, clock: FakeClock) -> None:
    """DW-STEP-5: a context still running at the lifetime's end gets no further step;
    catching the stop and returning does not complete the run."""
    after: list[str] = []

    class Outlive:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            await step.do("age", lambda: None)
            clock.advance(LIFETIME)  # the context is still running at the lifetime's end
            try:
                await step.do("next", lambda: None)
            except BaseException as stop:
                after.append(f"caught, Exception={isinstance(stop, Exception)}")
            return {"lived": True}

    binding = app.register_workflow(Outlive)
    error = errored(app, Outlive)
    assert error["reason"] == "lifetime_exceeded"
    assert after == ["caught, Exception=False"]
    assert [e.data["name"] for e in of_type(app, binding, "e", "step_completed")] == ["age"]


def test_dw_step_5_a_run_returning_after_the_lifetime_does_not_complete(
    app: Application, clock: FakeClock
) -> None:
    """DW-STEP-5: the lifetime is host-controlled even without another step."""

    class Returns:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            await step.do("age", lambda: None)
            clock.advance(LIFETIME)
            return {"lived": True}

    assert errored(app, Returns)["reason"] == "lifetime_exceeded"


def test_dw_step_5_a_queued_instance_past_its_lifetime_never_runs(
    app: Application, clock: FakeClock
) -> None:
    """DW-STEP-5: no context starts for an instance past its lifetime."""
    runs: list[str] = []

    class Never:
        def __init__(self, env: Any) -> None:
            runs.append("init")

        def run(self, event: Any, step: Any) -> Any:
            return None

    instance = create(app.register_workflow(Never), "n")
    clock.advance(LIFETIME)
    work(app)
    assert runs == []
    assert status(instance)["error"]["reason"] == "lifetime_exceeded"


# -- DW-HERR-1: host errors ------------------------------------------------------------------


def test_dw_herr_1_names_are_exact_and_read_only() -> None:
    """DW-HERR-1: ``.name`` is the exact snake_case name, cannot be set or deleted, and
    is no instance attribute (Python's "own, non-enumerable"); both are Exceptions."""
    for cls, name in ((StepFailed, "step_failed"), (WaitTimeout, "wait_timeout")):
        error = cls("message")
        assert error.name == name
        assert issubclass(cls, WorkflowStepError) and issubclass(cls, Exception)
        with pytest.raises(AttributeError):
            error.name = "other"  # type: ignore[misc]
        with pytest.raises(AttributeError):
            del error.name
        with pytest.raises(AttributeError):
            object.__setattr__(error, "name", "other")
        assert error.name == name
        assert "name" not in vars(error)
        assert str(error) == "message"
        error._NAME = "relabelled"  # what it reads is the class's
        assert error.name == name


def test_dw_herr_1_host_errors_raised_into_run(app: Application, clock: FakeClock) -> None:
    """DW-HERR-1 / DW-STEP-6: failures reject with StepFailed / WaitTimeout carrying
    their exact, read-only name and the recorded message."""
    seen: list[tuple[str, str, str, bool]] = []

    class Catches:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            for name in ("do", "wait"):
                try:
                    if name == "do":
                        await step.do("do", fail)
                    else:
                        await step.wait_for_event("wait", type="t", timeout_seconds=1)
                except WorkflowStepError as error:
                    try:
                        error.name = "renamed"  # type: ignore[misc]
                        settable = True
                    except AttributeError:
                        settable = False
                    seen.append((name, type(error).__name__, error.name, settable))
            return None

    instance = create(app.register_workflow(Catches), "c")
    work(app)
    clock.advance(1 + MICRO)
    work(app)
    assert status(instance) == {"status": "complete"}
    assert seen[-2:] == [
        ("do", "StepFailed", "step_failed", False),
        ("wait", "WaitTimeout", "wait_timeout", False),
    ]


# -- DW-HERR-2: which uncaught errors end how ----------------------------------------------------


class SelfMade:
    """Raises a StepFailed it constructed itself."""

    def __init__(self, env: Any) -> None:
        pass

    async def run(self, event: Any, step: Any) -> Any:
        await step.do("ok", lambda: None)
        raise StepFailed("not from the host")


class Uncaught:
    def __init__(self, env: Any) -> None:
        pass

    async def run(self, event: Any, step: Any) -> Any:
        await step.do("fails", fail)


class ReRaised:
    def __init__(self, env: Any) -> None:
        pass

    async def run(self, event: Any, step: Any) -> Any:
        try:
            await step.do("fails", fail)
        except StepFailed as failure:
            saved = failure
        await step.do("other", lambda: {"fine": True})
        raise saved


class Copied:
    def __init__(self, env: Any) -> None:
        pass

    async def run(self, event: Any, step: Any) -> Any:
        try:
            await step.do("fails", fail)
        except StepFailed as failure:
            raise StepFailed(str(failure)) from None


class Chained:
    def __init__(self, env: Any) -> None:
        pass

    async def run(self, event: Any, step: Any) -> Any:
        try:
            await step.do("fails", fail)
        except StepFailed as failure:
            raise RuntimeError("wrapped") from failure


class SubclassCopy:
    def __init__(self, env: Any) -> None:
        pass

    async def run(self, event: Any, step: Any) -> Any:
        class Mine(StepFailed):
            pass

        try:
            await step.do("fails", fail)
        except StepFailed as failure:
            raise Mine(str(failure)) from None


class TimeoutUncaught:
    def __init__(self, env: Any) -> None:
        pass

    async def run(self, event: Any, step: Any) -> Any:
        await step.wait_for_event("w", type="never", timeout_seconds=1)


class InvalidUncaught:
    def __init__(self, env: Any) -> None:
        pass

    async def run(self, event: Any, step: Any) -> Any:
        await step.sleep("bad", -1)


class Handled:
    def __init__(self, env: Any) -> None:
        pass

    async def run(self, event: Any, step: Any) -> Any:
        with contextlib.suppress(StepFailed):
            await step.do("fails", fail)
        with contextlib.suppress(WaitTimeout):
            await step.wait_for_event("w", type="never", timeout_seconds=1)
        return {"recovered": True}


@pytest.mark.parametrize(
    ("cls", "reason"),
    [
        (SelfMade, "run_threw"),
        (Uncaught, "step_failed"),
        (ReRaised, "step_failed"),
        (Copied, "run_threw"),
        (Chained, "run_threw"),
        (SubclassCopy, "run_threw"),
        (TimeoutUncaught, "run_threw"),
        (InvalidUncaught, "run_threw"),
        (Handled, None),
    ],
)
def test_dw_herr_2_only_a_genuine_uncaught_step_failed_is_step_failed(
    app: Application, clock: FakeClock, cls: type, reason: str | None
) -> None:
    """DW-HERR-1 / DW-HERR-2 / DW-INST-5: genuineness is the object's identity: the
    host's own StepFailed (also re-raised later) ends step_failed; a self-made or
    copied one, a chained one, an uncaught WaitTimeout or TypeError end run_threw; a
    handled failure may complete."""
    instance = create(app.register_workflow(cls), "h")
    work(app)
    clock.advance(1 + MICRO)
    work(app)
    view = status(instance)
    if reason is None:
        assert view == {"status": "complete", "output": {"recovered": True}}
    else:
        assert view["status"] == "errored"
        assert view["error"]["reason"] == reason


def test_dw_herr_2_d8_a_replayed_failure_is_genuine(app: Application, clock: FakeClock) -> None:
    """DW-HERR-2 (D8): a failure recorded in an earlier context replays as a new,
    genuine StepFailed: uncaught later, it ends step_failed; the effect does not rerun."""
    attempts: list[int] = []

    class Replayed:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            def effect() -> None:
                attempts.append(1)
                raise RuntimeError("recorded failure")

            try:
                await step.do("fails", effect)
            except StepFailed as failure:
                saved = failure
            await step.sleep("between", 10)
            raise saved

    binding = app.register_workflow(Replayed)
    error = errored(app, Replayed, clock, later=10)
    assert error["reason"] == "step_failed"
    assert "recorded failure" in error["message"]
    assert attempts == [1]
    assert contexts_started(app, binding, "e") == 2
    assert step_record(app, binding, "e", "fails").context["context"] == 1


def test_dw_herr_1_genuineness_is_bound_to_its_context(app: Application, clock: FakeClock) -> None:
    """DW-HERR-1: a genuine StepFailed kept from an earlier context (in a closure) is
    not genuine in a later one: raised there it ends run_threw."""
    kept: list[BaseException] = []

    class Smuggler:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            try:
                await step.do("fails", fail)
            except StepFailed as failure:
                if not kept:
                    kept.append(failure)
            await step.sleep("between", 10)
            raise kept[0]

    error = errored(app, Smuggler, clock, later=10)
    assert error["reason"] == "run_threw"


def test_dw_herr_2_a_wait_timeout_replayed_uncaught_is_run_threw(
    app: Application, clock: FakeClock
) -> None:
    """DW-HERR-2 (D8): a recorded wait_timeout replays as WaitTimeout; uncaught it is
    run_threw, like any error other than a genuine step_failed."""

    class Later:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            try:
                await step.wait_for_event("w", type="never", timeout_seconds=1)
            except WaitTimeout as timeout:
                saved = timeout
            await step.sleep("between", 10)
            raise saved

    instance = create(app.register_workflow(Later), "l")
    work(app)
    clock.advance(1 + MICRO)
    work(app)
    clock.advance(10)
    work(app)
    view = status(instance)
    assert view["status"] == "errored" and view["error"]["reason"] == "run_threw"


class Oops(BaseException):
    """An app's own BaseException subclass (not KeyboardInterrupt or SystemExit)."""


def _work_catching(app: Application) -> BaseException | None:
    try:
        work(app)
    except Oops as escaped:
        return escaped
    return None


def test_dw_herr_2_any_other_base_exception_from_run_is_run_threw(app: Application) -> None:
    """DW-HERR-2: "anything else is run_threw": an app's own BaseException subclass
    escaping run ends the run like any other error."""

    class Raises:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            await step.do("ok", lambda: None)
            raise Oops("from run")

    instance = create(app.register_workflow(Raises), "o")
    escaped = _work_catching(app)
    assert escaped is None, f"work_until_idle raised {escaped!r} instead of recording run_threw"
    view = status(instance)
    assert view["status"] == "errored" and view["error"]["reason"] == "run_threw"


def test_dw_do_1_d9_an_effect_raising_a_base_exception_fails_the_attempt(
    app: Application,
) -> None:
    """DW-DO-1 / DW-HERR-2 (D9): an effect that "raises anything", an app's own
    BaseException subclass included, fails its attempt; the last one is step_failed."""
    attempts: list[int] = []

    class Effect:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            def effect() -> None:
                attempts.append(1)
                raise Oops("from the effect")

            await step.do("x", effect, retry_policy={"maxAttempts": 2})

    instance = create(app.register_workflow(Effect), "o")
    escaped = _work_catching(app)
    assert escaped is None, f"work_until_idle raised {escaped!r} instead of failing the attempt"
    assert attempts == [1, 1]
    view = status(instance)
    assert view["status"] == "errored" and view["error"]["reason"] == "step_failed"


# -- D10 / DW-ABI-3: run returning a non-document ---------------------------------------------


class _DictChild(dict):  # type: ignore[type-arg]
    pass


NON_DOCUMENTS: list[Any] = [
    [1],
    "text",
    7,
    True,
    (1, 2),
    _DictChild(a=1),
    {"nan": float("nan")},
    {"tuple": (1,)},
    {"big": 2**53},
    {"wide": {f"k{n}": n for n in range(1025)}},
    {"large": "x" * 1_048_576},
]


@pytest.mark.parametrize("value", NON_DOCUMENTS, ids=range(len(NON_DOCUMENTS)))
def test_dw_abi_3_d10_run_returning_a_non_document_is_run_threw(
    app: Application, value: Any
) -> None:
    """DW-ABI-3 / DW-INST-5 (D10): run must return a document or None; anything else
    ends errored / run_threw with a message saying so."""

    class Returns:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            return value

    error = errored(app, Returns)
    assert error["reason"] == "run_threw"
    assert "document" in error["message"]


def test_dw_herr_2_invalid_step_argument_is_a_type_error(app: Application) -> None:
    """DW-HERR-2 / DW-STEP-4: the app sees InvalidStepArgument as a TypeError; left
    uncaught it is run_threw with the argument named in the message."""

    seen: list[str] = []

    class Bad:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            try:
                await step.wait_for_event("w", type="t", timeout_seconds=0)
            except TypeError as error:
                seen.append(type(error).__name__)
                raise

    error = errored(app, Bad)
    assert seen == ["InvalidStepArgument"]
    assert error["reason"] == "run_threw"
    assert "timeout" in error["message"]


def test_dw_do_1_an_effect_that_needs_an_argument_is_refused_before_it_runs(
    app: Application,
) -> None:
    """DW-DO-1: the effect is a zero-argument callable; one that needs an argument ran
    every attempt of its retry policy, each failing with Python's TypeError, and ended
    step_failed (found by a spec review, stop 37). It is refused as any invalid step
    argument is; effects with defaults or only ``*args`` are fine."""
    calls: list[str] = []

    class Arity:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            await step.do("defaults", lambda x=1: calls.append("defaults"))
            await step.do("star", lambda *args: calls.append("star"))
            await step.do("injected", injected)  # functools.wraps copied charge's signature
            await step.do("needs", lambda x: calls.append("needs"), {"maxAttempts": 3})

    def with_db(effect: Any) -> Any:
        @functools.wraps(effect)
        def wrapper(*args: Any) -> Any:
            return effect("db", *args)

        return wrapper

    @with_db
    def injected(db: str) -> None:
        calls.append(f"injected {db}")

    binding = app.register_workflow(Arity)
    error = errored(app, Arity)
    assert error["reason"] == "run_threw" and "zero-argument" in error["message"]
    assert calls == ["defaults", "star", "injected db"]
    assert not of_type(app, binding, "e", "step_failed")
