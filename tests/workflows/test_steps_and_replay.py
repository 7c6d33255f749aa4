"""Class ABI, replay and steps (durable-workflow.md §3) on SQLite and PostgreSQL:
DW-ABI-2, DW-ABI-3, DW-REPLAY-1, DW-REPLAY-2, DW-STEP-1, DW-STEP-3, DW-STEP-4,
DW-STEP-6, DW-DO-1..4, DW-SLEEP-1..2, DW-WAIT-1..4, DW-FENCE-1 (decisions D3, D6,
D8, D9, D11, D19).

Effects run in this process (``work_until_idle``), so lists in closures observe how
often and in which context they ran; the journal shows what was recorded and when.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from datetime import timedelta
from typing import Any

import pytest
from workflow_cases import (
    MAX_DELAY,
    MICRO,
    contexts_started,
    create,
    error_code,
    history,
    instant,
    of_type,
    seconds_between,
    send,
    status,
    step_record,
    topics,
    work,
)

from blackops import (
    Application,
    InvalidStepArgument,
    RetryPolicy,
    StepFailed,
    WaitTimeout,
)
from blackops.testing import FakeClock
from blackops.workflows.code import WorkflowCode
from blackops.workflows.context import ContextEnd, run_context

# -- DW-ABI-2 / DW-ABI-3: construction, run, return values ---------------------------------------


def test_dw_abi_2_a_fresh_object_and_one_run_per_context(
    app: Application, clock: FakeClock
) -> None:
    """DW-ABI-2: every context constructs the class afresh with the declared env and
    calls run once with ``event.instance_id`` and ``event.params``."""
    made: list[Any] = []
    runs: list[tuple[Any, str, Any]] = []

    class Counted:
        def __init__(self, env: Any) -> None:
            self.env = env
            made.append(self)

        async def run(self, event: Any, step: Any) -> Any:
            runs.append((self, event.instance_id, event.params))
            await step.sleep("nap", 10)
            got = await step.wait_for_event("go", type="go", timeout_seconds=60)
            return {"token": self.env.TOKEN, "got": got}

    binding = app.register_workflow(Counted, env={"TOKEN": "t-1"})
    instance = create(binding, "abi", {"p": 1})
    work(app)
    clock.advance(10)
    work(app)
    send(instance, "go", {"n": 1})
    work(app)
    assert status(instance) == {"status": "complete", "output": {"token": "t-1", "got": {"n": 1}}}
    assert contexts_started(app, binding, "abi") == 3
    assert len(made) == 3 and len({id(obj) for obj in made}) == 3
    assert [obj for obj, _, _ in runs] == made  # run called once on each new object
    assert [(iid, params) for _, iid, params in runs] == [("abi", {"p": 1})] * 3
    env = made[0].env
    assert [name for name in dir(env) if not name.startswith("_")] == ["TOKEN"]


def test_dw_abi_2_state_set_on_the_object_does_not_survive(
    app: Application, clock: FakeClock
) -> None:
    """DW-ABI-2 / DW-REPLAY-1: attributes set in one context are gone in the next."""
    seen: list[Any] = []

    class Forgetful:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            seen.append(getattr(self, "mark", None))
            self.mark = "set in an earlier context"
            await step.sleep("nap", 5)
            return None

    create(app.register_workflow(Forgetful), "f")
    work(app)
    clock.advance(5)
    work(app)
    assert seen == [None, None]


class SyncRun:
    def __init__(self, env: Any) -> None:
        pass

    def run(self, event: Any, step: Any) -> Any:
        return {"sync": True}


class SyncRunReturningCoroutine:
    def __init__(self, env: Any) -> None:
        pass

    def run(self, event: Any, step: Any) -> Any:
        return self.later(step)

    async def later(self, step: Any) -> Any:
        return {"awaited": await step.do("x", lambda: {"v": 1})}


class OutputKey:
    def __init__(self, env: Any) -> None:
        pass

    async def run(self, event: Any, step: Any) -> Any:
        return {"output": {"not": "unwrapped"}}


@pytest.mark.parametrize(
    ("cls", "output"),
    [
        (SyncRun, {"sync": True}),
        (SyncRunReturningCoroutine, {"awaited": {"v": 1}}),
        (OutputKey, {"output": {"not": "unwrapped"}}),
    ],
)
def test_dw_abi_3_run_returns_a_document_directly_or_awaitably(
    app: Application, cls: type, output: dict[str, Any]
) -> None:
    """DW-ABI-3: sync or async run, or a sync run returning an awaitable; the return
    value is the output itself, never unwrapped from ``{"output": ...}``."""
    instance = create(app.register_workflow(cls), "r")
    work(app)
    assert status(instance) == {"status": "complete", "output": output}


# -- DW-REPLAY-1: replay ---------------------------------------------------------------------------


def test_dw_replay_1_replay_does_not_rerun_effects(app: Application, clock: FakeClock) -> None:
    """DW-REPLAY-1 / DW-STEP-3: later contexts replay completed steps from the history
    without running their effects again."""
    ran: list[str] = []
    results: list[Any] = []

    class Replayed:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            def effect(name: str) -> Any:
                def run_it() -> Any:
                    ran.append(name)
                    return {"from": name, "n": len(ran)}

                return run_it

            first = await step.do("first", effect("first"))
            await step.sleep("one", 10)
            second = await step.do("second", effect("second"))
            await step.sleep("two", 10)
            results.append((first, second))
            return {"first": first, "second": second}

    binding = app.register_workflow(Replayed)
    instance = create(binding, "r")
    work(app)
    clock.advance(10)
    work(app)
    clock.advance(10)
    work(app)
    assert ran == ["first", "second"]
    assert results == [({"from": "first", "n": 1}, {"from": "second", "n": 2})]
    assert status(instance)["output"] == {
        "first": {"from": "first", "n": 1},
        "second": {"from": "second", "n": 2},
    }
    assert contexts_started(app, binding, "r") == 3


def test_dw_replay_1_no_task_of_an_earlier_context_survives(
    app: Application, clock: FakeClock
) -> None:
    """DW-REPLAY-1: an unsettled task of a stopped context never runs later."""
    log: list[str] = []

    class Leaky:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            n = len([e for e in log if e.startswith("run")]) + 1
            log.append(f"run {n}")

            async def straggler() -> None:
                await asyncio.sleep(0)
                log.append(f"straggler of context {n}")

            if n == 1:
                task = asyncio.ensure_future(straggler())
                task.add_done_callback(lambda _t: None)
            await step.sleep("nap", 10)
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            return None

    create(app.register_workflow(Leaky), "l")
    work(app)
    clock.advance(10)
    work(app)
    assert log == ["run 1", "run 2"]


def test_dw_replay_1_mutations_of_replayed_values_do_not_leak(
    any_store_url: str, clock: FakeClock
) -> None:
    """DW-REPLAY-1: mutating params or a step result in one context changes nothing
    another context sees (every backend, the in-memory one included)."""
    seen: list[Any] = []

    class Mutator:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            result = await step.do("r", lambda: {"list": [1]})
            seen.append((dict(event.params), [*result["list"]]))
            event.params["n"] = "changed"
            result["list"].append("changed")
            await step.sleep("nap", 10)
            return None

    app = Application(any_store_url, clock=clock)
    try:
        binding = app.register_workflow(Mutator)
        create(binding, "m", {"n": 0})
        work(app)
        clock.advance(10)
        work(app)
        assert seen == [({"n": 0}, [1]), ({"n": 0}, [1])]
        assert history(app, binding, "m")[0].data["params"] == {"n": 0}
    finally:
        app.close()


# -- DW-REPLAY-2: one Version per context ----------------------------------------------------------


def test_dw_replay_2_each_context_pins_the_version_it_started_with(
    app: Application, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DW-REPLAY-2: a context records the Version it picked at its start; a wake may
    pick a newer one, which replays the same history unchanged."""

    class V1:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            value = await step.do("a", lambda: {"by": "v1"})
            await step.sleep("nap", 10)
            return {"a": value, "code": "v1"}

    class V2:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            value = await step.do("a", lambda: {"by": "v2"})
            await step.sleep("nap", 10)
            return {"a": value, "code": "v2"}

    binding = app.register_workflow(V1, uid="versioned")
    instance = create(binding, "v")
    work(app)
    before = [(e.type, e.data) for e in history(app, binding, "v")]
    first = app.code_provider.pick("versioned")
    newer = WorkflowCode("versioned", "local:test.V2@2", V2, first.env)
    monkeypatch.setattr(app.code_provider, "pick", lambda workflow: newer)
    clock.advance(10)
    work(app)
    assert status(instance) == {"status": "complete", "output": {"a": {"by": "v1"}, "code": "v2"}}
    started = of_type(app, binding, "v", "context_started")
    assert [e.data["version"] for e in started] == [first.version, "local:test.V2@2"]
    after = [(e.type, e.data) for e in history(app, binding, "v")]
    assert after[: len(before)] == before  # history is never rewritten


# -- DW-STEP-1: the step object, names ------------------------------------------------------------


def test_dw_step_1_step_has_exactly_three_operations(app: Application) -> None:
    """DW-STEP-1: ``do``, ``sleep`` and ``wait_for_event``, and nothing else public."""
    seen: list[list[str]] = []

    class Inspect:
        def __init__(self, env: Any) -> None:
            pass

        def run(self, event: Any, step: Any) -> Any:
            seen.append([n for n in dir(step) if not n.startswith("_")])
            return None

    create(app.register_workflow(Inspect), "i")
    work(app)
    assert seen == [["do", "sleep", "wait_for_event"]]


GOOD_NAMES = ["a", " ", "x" * 256, "😀" * 256, "\x00", "é\n\u2028"]
BAD_NAMES: list[Any] = ["", "x" * 257, "😀" * 257, "a\ud800", "\udc00", 5, None, b"n"]


def test_dw_step_1_names_and_types_are_1_to_256_scalar_values(
    app: Application, clock: FakeClock
) -> None:
    """DW-STEP-1 (D4): step names and event types of 1-256 scalar values work; others
    raise InvalidStepArgument for every kind of step, and nothing is recorded."""
    refused: list[tuple[str, int]] = []

    class Names:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            refused.clear()  # keep the last context's refusals
            for n, name in enumerate(GOOD_NAMES):
                await step.do(name, lambda: None)
                await step.sleep(f"s{n}" + name[:200], 0)

            def call(kind: str, bad: Any) -> Any:
                if kind == "do":
                    return step.do(bad, lambda: None)
                if kind == "sleep":
                    return step.sleep(bad, 0)
                if kind == "wait":
                    return step.wait_for_event(bad, type="t", timeout_seconds=1)
                return step.wait_for_event("w", type=bad, timeout_seconds=1)

            for n, bad in enumerate(BAD_NAMES):
                for kind in ("do", "sleep", "wait", "type"):
                    try:
                        await call(kind, bad)
                    except InvalidStepArgument:
                        refused.append((kind, n))
            return await step.wait_for_event("long", type="😀" * 256, timeout_seconds=5)

    binding = app.register_workflow(Names)
    instance = create(binding, "n")
    work(app)
    send(instance, "😀" * 256, {"ok": True})
    work(app)
    assert status(instance) == {"status": "complete", "output": {"ok": True}}
    kinds = ("do", "sleep", "wait", "type")
    assert refused == [(k, n) for n in range(len(BAD_NAMES)) for k in kinds]
    names = {e.data["name"] for e in of_type(app, binding, "n", "step_completed")}
    assert set(GOOD_NAMES) <= names
    assert len(names) == 2 * len(GOOD_NAMES) + 1


# -- DW-STEP-3: completed names replay; their other arguments are not used ----------------------


def test_dw_step_3_completed_names_replay_and_ignore_their_other_arguments(
    app: Application, clock: FakeClock
) -> None:
    """DW-STEP-3 (D6, D8): completed names, succeeded or failed, replay their recorded
    result in later contexts without a new effect; their other arguments are not used
    (not even validated); the name itself is still validated."""
    contexts: list[int] = []
    effects: list[str] = []
    replays: list[Any] = []

    class Replay:
        def __init__(self, env: Any) -> None:
            contexts.append(len(contexts) + 1)
            self.n = len(contexts)

        async def run(self, event: Any, step: Any) -> Any:
            junk = self.n == 4  # every name below but "z" is completed by then

            def fine() -> dict[str, Any]:
                effects.append("a")
                return {"a": 1}

            ok: Any = "not callable" if junk else fine

            def boom() -> None:
                effects.append("b")
                raise ValueError("b broke")

            bad: Any = 42 if junk else boom
            policy: Any = {"maxAttempts": 0} if junk else None
            a = await step.do("a", ok, retry_policy=policy)
            try:
                await step.do("b", bad, retry_policy=policy)
                b = "no failure"
            except StepFailed as failure:
                b = str(failure)
            await step.sleep("s", -1 if junk else 0)
            w = await step.wait_for_event(
                "w", type="" if junk else "go", timeout_seconds=0 if junk else 100
            )
            try:
                await step.wait_for_event(
                    "t", type="" if junk else "never", timeout_seconds=0 if junk else 1
                )
                t = "no timeout"
            except WaitTimeout as timeout:
                t = str(timeout)
            await step.sleep("z", 10)
            replays.append((self.n, a, b, w, t))
            with pytest.raises(InvalidStepArgument, match="name"):
                step.do("", "not callable")
            with pytest.raises(InvalidStepArgument, match="name"):
                step.sleep(7, -1)
            return {"a": a, "b": b, "w": w, "t": t}

    binding = app.register_workflow(Replay)
    instance = create(binding, "r")
    work(app)  # context 1: a, b, s, then waits for "go"
    send(instance, "go", {"g": 1})
    work(app)  # context 2: w consumed, waits on "t"
    clock.advance(1 + MICRO)
    work(app)  # context 3: t timed out, sleeps on "z"
    clock.advance(10)
    work(app)  # context 4: everything replays with junk arguments
    assert contexts == [1, 2, 3, 4]
    assert effects == ["a", "b"]
    assert len(replays) == 1
    n, a, b, w, t = replays[0]
    assert (n, a, w) == (4, {"a": 1}, {"g": 1})
    assert "b broke" in b
    assert "never" in t
    assert status(instance) == {"status": "complete", "output": {"a": a, "b": b, "w": w, "t": t}}


def test_dw_step_3_a_name_completed_in_this_context_runs_no_new_effect(
    app: Application,
) -> None:
    """DW-STEP-3 (D6): calling a name again in the context that completed it replays
    the recorded result; the effect does not run a second time."""
    ran: list[int] = []

    class Twice:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            def effect() -> dict[str, Any]:
                ran.append(1)
                return {"n": len(ran)}

            first = await step.do("once", effect)
            again = await step.do("once", effect)
            return {"first": first, "again": again}

    instance = create(app.register_workflow(Twice), "t")
    work(app)
    assert status(instance) == {
        "status": "complete",
        "output": {"first": {"n": 1}, "again": {"n": 1}},
    }
    assert ran == [1]


def test_dw_step_3_a_name_completed_in_this_context_ignores_other_arguments(
    app: Application,
) -> None:
    """DW-STEP-3: the other arguments of a completed name are not used, also when the
    name completed earlier in the same context."""

    class Again:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            await step.sleep("s", 0)
            await step.sleep("s", -1)
            await step.do("d", lambda: {"d": 1})
            replayed = await step.do("d", "not callable", retry_policy={"maxAttempts": 0})
            return {"d": replayed}

    instance = create(app.register_workflow(Again), "a")
    work(app)
    assert status(instance) == {"status": "complete", "output": {"d": {"d": 1}}}


# -- DW-STEP-4: invalid arguments; pending steps keep their first configuration ----------------


BAD_CALLS: list[tuple[str, Any]] = [
    ("do effect", lambda s: s.do("x", {"not": "callable"})),
    ("do effect None", lambda s: s.do("x", None)),
    ("policy type", lambda s: s.do("x", lambda: None, retry_policy="three")),
    ("policy 0", lambda s: s.do("x", lambda: None, retry_policy={"maxAttempts": 0})),
    ("policy 101", lambda s: s.do("x", lambda: None, retry_policy={"maxAttempts": 101})),
    ("policy bool", lambda s: s.do("x", lambda: None, retry_policy={"maxAttempts": True})),
    ("policy float", lambda s: s.do("x", lambda: None, retry_policy={"maxAttempts": 2.0})),
    ("policy snake", lambda s: s.do("x", lambda: None, retry_policy={"max_attempts": 2})),
    (
        "policy delay",
        lambda s: s.do(
            "x", lambda: None, retry_policy={"maxAttempts": 2, "initialDelaySeconds": -1}
        ),
    ),
    (
        "policy max delay",
        lambda s: s.do(
            "x", lambda: None, retry_policy={"maxAttempts": 2, "maxDelaySeconds": MAX_DELAY + 1}
        ),
    ),
    (
        "policy backoff",
        lambda s: s.do("x", lambda: None, retry_policy={"maxAttempts": 2, "backoff": "linear"}),
    ),
    ("sleep -1", lambda s: s.sleep("x", -1)),
    ("sleep float", lambda s: s.sleep("x", 1.5)),
    ("sleep bool", lambda s: s.sleep("x", True)),
    ("sleep str", lambda s: s.sleep("x", "5")),
    ("sleep max", lambda s: s.sleep("x", 31_536_001)),
    ("wait 0", lambda s: s.wait_for_event("x", type="t", timeout_seconds=0)),
    ("wait max", lambda s: s.wait_for_event("x", type="t", timeout_seconds=31_536_001)),
    ("wait float", lambda s: s.wait_for_event("x", type="t", timeout_seconds=1.0)),
    ("wait bool", lambda s: s.wait_for_event("x", type="t", timeout_seconds=True)),
    ("wait type", lambda s: s.wait_for_event("x", type="", timeout_seconds=5)),
    ("wait type int", lambda s: s.wait_for_event("x", type=3, timeout_seconds=5)),
]


def test_dw_step_4_dw_wait_1_dw_sleep_1_dw_do_2_invalid_arguments(app: Application) -> None:
    """DW-STEP-4 / DW-DO-2 / DW-SLEEP-1 / DW-WAIT-1: invalid arguments of an unfinished
    name raise InvalidStepArgument (a TypeError and a ValueError), which the app may
    catch; nothing is recorded for the name, which stays usable."""
    caught: list[str] = []

    class Invalid:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            for label, call in BAD_CALLS:
                try:
                    await call(step)
                except InvalidStepArgument as error:
                    kinds = (isinstance(error, TypeError), isinstance(error, ValueError))
                    caught.append(label if kinds == (True, True) else f"{label}: {kinds}")
            return await step.do("x", lambda: {"x": "fine"})

    binding = app.register_workflow(Invalid)
    instance = create(binding, "i")
    work(app)
    assert caught == [label for label, _ in BAD_CALLS]
    assert status(instance) == {"status": "complete", "output": {"x": "fine"}}
    assert [e.data["name"] for e in of_type(app, binding, "i", "step_completed")] == ["x"]
    assert issubclass(InvalidStepArgument, TypeError) and issubclass(
        InvalidStepArgument, ValueError
    )


def test_dw_wait_1_type_and_timeout_are_required(app: Application) -> None:
    """DW-WAIT-1: ``type`` and ``timeout_seconds`` must both be given; 1 and
    31,536,000 seconds are valid timeouts."""
    caught: list[str] = []

    class Missing:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            wait: Any = step.wait_for_event
            for kwargs in ({"type": "t"}, {"timeout_seconds": 5}, {}):
                try:
                    await wait("w", **kwargs)
                except TypeError:
                    caught.append(",".join(kwargs))
            return {  # the bounds themselves are valid (both events are already queued)
                "one": await step.wait_for_event("one", type="t", timeout_seconds=1),
                "max": await step.wait_for_event("max", type="t", timeout_seconds=31_536_000),
            }

    instance = create(app.register_workflow(Missing), "m")
    send(instance, "t", {"n": 1})
    send(instance, "t", {"n": 2})
    work(app)
    assert caught == ["type", "timeout_seconds", ""]
    assert status(instance) == {"status": "complete", "output": {"one": {"n": 1}, "max": {"n": 2}}}


def test_dw_step_4_a_pending_do_keeps_its_first_retry_policy(
    app: Application, clock: FakeClock
) -> None:
    """DW-STEP-4: a retried do keeps the policy first saved, whatever later contexts
    pass (here: 3 attempts, 10 s apart, though later contexts ask for 1 attempt)."""
    attempts: list[int] = []

    class Sticky:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            first = not attempts
            policy = (
                {"maxAttempts": 3, "initialDelaySeconds": 10}
                if first
                else RetryPolicy(max_attempts=1, initial_delay_seconds=0)
            )

            def effect() -> dict[str, Any]:
                attempts.append(len(attempts) + 1)
                if len(attempts) < 3:
                    raise RuntimeError(f"attempt {len(attempts)}")
                return {"attempt": len(attempts)}

            return await step.do("sticky", effect, retry_policy=policy)

    binding = app.register_workflow(Sticky)
    instance = create(binding, "s")
    for _ in range(2):
        work(app)
        assert status(instance) == {"status": "running"}
        clock.advance(9)
        work(app)
        clock.advance(1)
    work(app)
    assert attempts == [1, 2, 3]
    assert status(instance) == {"status": "complete", "output": {"attempt": 3}}
    retries = of_type(app, binding, "s", "step_retry_scheduled")
    assert [seconds_between(e.at, e.data["due_at"]) for e in retries] == [10, 10]


def test_dw_step_4_dw_sleep_1_a_pending_sleep_keeps_its_first_deadline(
    app: Application, clock: FakeClock
) -> None:
    """DW-STEP-4 / DW-SLEEP-1: the deadline is fixed at the first call; a later
    context passing other seconds wakes at the first deadline."""
    calls: list[int] = []

    class Fixed:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            seconds = 100 if not calls else 5000
            calls.append(seconds)
            await step.sleep("nap", seconds)
            return {"woke": True}

    binding = app.register_workflow(Fixed)
    instance = create(binding, "f")
    start = clock.now()
    work(app)
    suspended = of_type(app, binding, "f", "step_suspended")
    assert [e.data["due_at"] for e in suspended] == [instant(start + timedelta(seconds=100))]
    clock.advance(99)
    work(app)
    assert status(instance) == {"status": "sleeping"}
    clock.advance(1)
    work(app)
    assert calls == [100, 5000]
    assert status(instance) == {"status": "complete", "output": {"woke": True}}


def test_dw_step_4_a_pending_wait_keeps_its_first_type(app: Application) -> None:
    """DW-STEP-4: a waiting wait keeps the event type first saved."""
    calls: list[str] = []

    class FirstType:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            kind = "a" if not calls else "b"
            calls.append(kind)
            return await step.wait_for_event("w", type=kind, timeout_seconds=100)

    binding = app.register_workflow(FirstType)
    instance = create(binding, "t")
    work(app)
    send(instance, "b", {"type": "b"})
    work(app)
    assert status(instance) == {"status": "waiting"}  # "b" does not match "a"
    send(instance, "a", {"type": "a"})
    work(app)
    assert calls == ["a", "b"]
    assert status(instance) == {"status": "complete", "output": {"type": "a"}}


def test_dw_step_4_a_pending_wait_keeps_its_first_deadline(
    app: Application, clock: FakeClock
) -> None:
    """DW-STEP-4 / DW-WAIT-4: a later context passing a longer timeout still times out
    at the first deadline."""
    calls: list[int] = []

    class FirstDeadline:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            timeout = 100 if not calls else 10_000
            calls.append(timeout)
            try:
                await step.wait_for_event("w", type="go", timeout_seconds=timeout)
            except WaitTimeout:
                return {"timed_out": True}
            return {"timed_out": False}

    instance = create(app.register_workflow(FirstDeadline), "d")
    work(app)
    clock.advance(100 + MICRO)
    work(app)
    assert calls == [100, 10_000]
    assert status(instance) == {"status": "complete", "output": {"timed_out": True}}


# -- DW-STEP-6: what the steps return -----------------------------------------------------------


def test_dw_step_6_steps_return_the_values_themselves(app: Application, clock: FakeClock) -> None:
    """DW-STEP-6 / DW-DOC-4: do returns its document or None, sleep None, a wait the
    event's payload itself or None without one; no wrappers, the same on replay."""
    seen: list[tuple[Any, ...]] = []

    class Shapes:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            values = (
                await step.do("doc", lambda: {"k": [1, {"n": None}]}),
                await step.do("none", lambda: None),
                await step.do("empty", lambda: {}),
                await step.sleep("zero", 0),
                await step.sleep("ten", 10),
                await step.wait_for_event("with", type="with", timeout_seconds=60),
                await step.wait_for_event("without", type="without", timeout_seconds=60),
                await step.wait_for_event("empty event", type="empty", timeout_seconds=60),
            )
            seen.append(values)
            await step.sleep("end", 10)
            return None

    instance = create(app.register_workflow(Shapes), "s")
    work(app)
    clock.advance(10)
    send(instance, "with", {"p": 1})
    send(instance, "without")
    send(instance, "empty", {})
    work(app)
    clock.advance(10)
    work(app)
    expected: tuple[Any, ...] = ({"k": [1, {"n": None}]}, None, {}, None, None, {"p": 1}, None, {})
    assert seen == [expected, expected]
    assert status(instance) == {"status": "complete"}


# -- DW-DO-1..4 ---------------------------------------------------------------------------------


def test_dw_do_1_sync_and_async_effects(app: Application) -> None:
    """DW-DO-1: an effect is a zero-argument callable, sync or async."""

    class Effects:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            async def later() -> dict[str, Any]:
                await asyncio.sleep(0)
                return {"async": True}

            class Callable:
                def __call__(self) -> dict[str, Any]:
                    return {"object": True}

            return {
                "sync": await step.do("sync", lambda: {"sync": True}),
                "async": await step.do("async", later),
                "object": await step.do("object", Callable()),
            }

    instance = create(app.register_workflow(Effects), "e")
    work(app)
    assert status(instance)["output"] == {
        "sync": {"sync": True},
        "async": {"async": True},
        "object": {"object": True},
    }


class _DictChild(dict):  # type: ignore[type-arg]
    pass


NON_DOCUMENTS: list[Any] = [
    [1, 2],
    (1,),
    "text",
    5,
    True,
    _DictChild(a=1),
    {"nan": float("nan")},
    {"tuple": (1,)},
    {"big": 2**60},
    {"wide": {f"k{n}": n for n in range(1025)}},
    {"large": "x" * 1_048_576},
]


@pytest.mark.parametrize("value", NON_DOCUMENTS, ids=range(len(NON_DOCUMENTS)))
def test_dw_do_1_d9_an_effect_returning_a_non_document_fails_the_attempt(
    app: Application, value: Any
) -> None:
    """DW-DO-1 (D9): a non-document result fails that attempt with a message saying
    so; the policy retries it; the last failure is step_failed."""
    returned: list[int] = []

    class Bad:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            def effect() -> Any:
                returned.append(1)
                return value

            await step.do("bad", effect, retry_policy={"maxAttempts": 2})

    binding = app.register_workflow(Bad)
    instance = create(binding, "b")
    work(app)
    assert returned == [1, 1]
    (retry,) = of_type(app, binding, "b", "step_retry_scheduled")
    assert "document" in retry.data["message"]
    record = step_record(app, binding, "b", "bad")
    assert record.data["outcome"] == "failed"
    assert record.data["error"]["name"] == "step_failed"
    assert "document" in record.data["error"]["message"]
    view = status(instance)
    assert view["error"]["reason"] == "step_failed"
    assert "document" in view["error"]["message"]


def test_dw_do_2_without_a_policy_one_attempt(app: Application, clock: FakeClock) -> None:
    """DW-DO-2 / DW-DO-4: without retry_policy an effect gets exactly one attempt; the
    failure records step_failed with the effect's error."""
    attempts: list[int] = []

    class Once:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            def effect() -> None:
                attempts.append(1)
                raise ConnectionError("gateway down")

            await step.do("once", effect)

    binding = app.register_workflow(Once)
    instance = create(binding, "o")
    work(app)
    clock.advance(MAX_DELAY)
    work(app)
    assert attempts == [1]
    assert of_type(app, binding, "o", "step_retry_scheduled") == []
    record = step_record(app, binding, "o", "once")
    assert record.data["error"]["name"] == "step_failed"
    assert "ConnectionError" in record.data["error"]["message"]
    assert "gateway down" in record.data["error"]["message"]
    view = status(instance)
    assert view["error"]["reason"] == "step_failed" and "gateway down" in view["error"]["message"]


VALID_POLICIES: list[dict[str, Any]] = [
    {"maxAttempts": 1},
    {"maxAttempts": 100},
    {"maxAttempts": 2, "initialDelaySeconds": 0, "maxDelaySeconds": 0},
    {"maxAttempts": 2, "initialDelaySeconds": MAX_DELAY, "maxDelaySeconds": MAX_DELAY},
    {"maxAttempts": 2, "backoff": "constant"},
    {"maxAttempts": 2, "backoff": "exponential"},
]
INVALID_POLICIES: list[dict[str, Any]] = [
    {"max_attempts": 0},
    {"max_attempts": 101},
    {"max_attempts": -1},
    {"max_attempts": True},
    {"max_attempts": 1.0},
    {"initial_delay_seconds": -1},
    {"initial_delay_seconds": MAX_DELAY + 1},
    {"initial_delay_seconds": 0.5},
    {"max_delay_seconds": -1},
    {"max_delay_seconds": MAX_DELAY + 1},
    {"backoff": "linear"},
    {"backoff": "Exponential"},
    {"backoff": None},
]


def test_dw_do_2_retry_policy_defaults_and_bounds() -> None:
    """DW-DO-2: defaults are the spec's (initial delay 0, constant, max delay 43200);
    maxAttempts 1-100 and delays 0-43200 are integers; backoff is constant or
    exponential; anything else is refused."""
    policy = RetryPolicy(max_attempts=3)
    assert (policy.initial_delay_seconds, policy.backoff, policy.max_delay_seconds) == (
        0,
        "constant",
        MAX_DELAY,
    )
    for fields in INVALID_POLICIES:
        with pytest.raises(ValueError, match=r"maxAttempts|initialDelaySeconds|maxDelay|backoff"):
            RetryPolicy(**{"max_attempts": 2, **fields})


def test_dw_do_2_camel_case_mappings_are_policies(app: Application, clock: FakeClock) -> None:
    """DW-DO-2: a mapping with the spec's camelCase keys is a policy; every valid one
    is accepted and saved with the defaults filled in."""

    class Policies:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            for n, policy in enumerate(VALID_POLICIES):
                await step.do(f"p{n}", lambda: None, retry_policy=policy)
            mapping = {
                "maxAttempts": 5,
                "backoff": "exponential",
                "initialDelaySeconds": 2,
                "maxDelaySeconds": 60,
            }
            await step.do("mapping", lambda: None, retry_policy=mapping)
            same = RetryPolicy(
                max_attempts=5, backoff="exponential", initial_delay_seconds=2, max_delay_seconds=60
            )
            await step.do("object", lambda: None, retry_policy=same)
            return None

    binding = app.register_workflow(Policies)
    create(binding, "p")
    work(app)
    saved = {
        e.data["name"]: e.data["config"]["retryPolicy"]
        for e in of_type(app, binding, "p", "step_completed")
    }
    assert (
        saved["mapping"]
        == saved["object"]
        == {
            "maxAttempts": 5,
            "backoff": "exponential",
            "initialDelaySeconds": 2,
            "maxDelaySeconds": 60,
        }
    )
    assert saved["p0"] == {
        "maxAttempts": 1,
        "initialDelaySeconds": 0,
        "backoff": "constant",
        "maxDelaySeconds": MAX_DELAY,
    }


@pytest.mark.parametrize(
    ("policy", "delays"),
    [
        (
            {
                "maxAttempts": 6,
                "backoff": "exponential",
                "initialDelaySeconds": 3,
                "maxDelaySeconds": 20,
            },
            [3, 6, 12, 20, 20],
        ),
        ({"maxAttempts": 4, "initialDelaySeconds": 7}, [7, 7, 7]),
        ({"maxAttempts": 3, "initialDelaySeconds": 7, "maxDelaySeconds": 5}, [5, 5]),
        ({"maxAttempts": 3, "backoff": "exponential"}, [0, 0]),
        (
            {"maxAttempts": 20, "backoff": "exponential", "initialDelaySeconds": 1},
            [min(MAX_DELAY, 2 ** (k - 1)) for k in range(1, 20)],
        ),
    ],
    ids=["exponential-capped", "constant", "constant-capped", "zero", "exponential-43200"],
)
def test_dw_do_2_retry_delays_follow_the_formula(
    app: Application, clock: FakeClock, policy: dict[str, Any], delays: list[int]
) -> None:
    """DW-DO-2: after failed attempt k the delay is min(max, initial) (constant) or
    min(max, initial * 2^(k-1)) (exponential); no attempt runs before its due time."""
    attempts: list[str] = []

    class Delays:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            def effect() -> None:
                attempts.append(instant(clock.now()))
                raise RuntimeError(f"attempt {len(attempts)}")

            await step.do("d", effect, retry_policy=policy)

    binding = app.register_workflow(Delays)
    instance = create(binding, "d")
    work(app)
    for n, delay in enumerate(delays, start=1):
        if delay == 0:
            continue  # the next attempt ran in the same work_until_idle
        assert len(attempts) == n
        clock.advance(delay - 1)
        work(app)
        assert len(attempts) == n, f"attempt {n + 1} ran early"
        clock.advance(1)
        work(app)
    assert len(attempts) == len(delays) + 1
    retries = of_type(app, binding, "d", "step_retry_scheduled")
    assert [e.data["attempt"] for e in retries] == list(range(1, len(delays) + 1))
    assert [seconds_between(e.at, e.data["due_at"]) for e in retries] == delays
    assert [seconds_between(a, b) for a, b in itertools.pairwise(attempts)] == delays
    assert status(instance)["error"]["reason"] == "step_failed"
    assert step_record(app, binding, "d", "d").data["failed_attempts"] == len(delays) + 1


def test_dw_do_3_every_retry_runs_in_a_fresh_context(app: Application) -> None:
    """DW-DO-3: each failed attempt is committed before going on, and the retry runs
    in a new context (new object, new run) even with a delay of 0."""
    made: list[int] = []
    attempts: list[tuple[int, int]] = []

    class Fresh:
        def __init__(self, env: Any) -> None:
            made.append(len(made) + 1)
            self.context = len(made)

        async def run(self, event: Any, step: Any) -> Any:
            def effect() -> dict[str, Any]:
                recorded = len(of_type(app, binding, "f", "step_retry_scheduled"))
                attempts.append((self.context, recorded))
                if len(attempts) < 3:
                    raise RuntimeError("again")
                return {"attempts": len(attempts)}

            return await step.do("fresh", effect, retry_policy={"maxAttempts": 3})

    binding = app.register_workflow(Fresh)
    instance = create(binding, "f")
    work(app)
    assert attempts == [(1, 0), (2, 1), (3, 2)]
    assert contexts_started(app, binding, "f") == 3
    assert status(instance) == {"status": "complete", "output": {"attempts": 3}}
    assert topics(app, binding, "f") == [
        "created",
        "context_started",
        "step_retry_scheduled",
        "context_started",
        "step_retry_scheduled",
        "context_started",
        "step_completed",
        "completed",
    ]


def test_dw_do_4_final_failure_records_step_failed_and_can_be_handled(
    app: Application, clock: FakeClock
) -> None:
    """DW-DO-4 / DW-HERR-2: the last failed attempt records ``step_failed``; an app
    that handles the StepFailed goes on and may complete."""

    class Handled:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            def effect() -> None:
                raise KeyError("missing")

            try:
                await step.do("fails", effect, retry_policy={"maxAttempts": 2})
            except StepFailed as failure:
                return {"handled": failure.name, "message": str(failure)}
            return {"handled": None}

    binding = app.register_workflow(Handled)
    instance = create(binding, "h")
    work(app)
    record = step_record(app, binding, "h", "fails")
    assert record.data["outcome"] == "failed"
    assert record.data["error"]["name"] == "step_failed"
    assert record.data["failed_attempts"] == 2
    view = status(instance)
    assert view["status"] == "complete"
    assert view["output"]["handled"] == "step_failed"
    assert "missing" in view["output"]["message"]


# -- DW-SLEEP-1..2 ------------------------------------------------------------------------------


def test_dw_sleep_2_d3_a_future_sleep_stops_the_context(app: Application, clock: FakeClock) -> None:
    """DW-SLEEP-2 (D3): the context stops at a future sleep (code after it does not
    run, even if the app catches the stop), then ``sleeping`` is published; it stays
    sleeping until a new context starts after the deadline, which records success."""
    log: list[str] = []

    class Nap:
        def __init__(self, env: Any) -> None:
            log.append("init")

        async def run(self, event: Any, step: Any) -> Any:
            try:
                await step.sleep("nap", 60)
            except BaseException:
                log.append("stop caught")
                try:
                    await step.do("escape", lambda: log.append("escaped"))
                except BaseException:
                    log.append("still stopped")
                return {"escaped": True}
            log.append("after")
            return {"woke": True}

    binding = app.register_workflow(Nap)
    instance = create(binding, "n")
    start = clock.now()
    work(app)
    assert log == ["init", "stop caught", "still stopped"]
    assert status(instance) == {"status": "sleeping"}
    (suspended,) = of_type(app, binding, "n", "step_suspended")
    assert suspended.data["due_at"] == instant(start + timedelta(seconds=60))
    clock.advance(60 - MICRO)
    work(app)
    assert status(instance) == {"status": "sleeping"}
    assert contexts_started(app, binding, "n") == 1
    clock.advance(MICRO)
    assert status(instance) == {"status": "sleeping"}  # D3: due, but no context yet
    work(app)
    assert log[3:] == ["init", "after"]
    assert status(instance) == {"status": "complete", "output": {"woke": True}}
    record = step_record(app, binding, "n", "nap")
    assert record.context["context"] == 2
    assert record.data["outcome"] == "succeeded"


def test_dw_sleep_2_zero_completes_in_the_same_context(app: Application) -> None:
    """DW-SLEEP-2 / DW-SLEEP-1: ``sleep(name, 0)`` completes at once, in the context."""

    class Zero:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            await step.sleep("zero", 0)
            await step.sleep("max ok", 31_536_000)
            return None

    binding = app.register_workflow(Zero)
    instance = create(binding, "z")
    work(app)
    assert contexts_started(app, binding, "z") == 1
    assert step_record(app, binding, "z", "zero").context["context"] == 1
    assert status(instance) == {"status": "sleeping"}  # 31,536,000 is a valid sleep


# -- DW-WAIT-2..4 -------------------------------------------------------------------------------


def test_dw_wait_2_oldest_match_consumed_others_stay(app: Application, clock: FakeClock) -> None:
    """DW-WAIT-2: a wait takes the oldest queued event of its type, consumed in the
    same commit as the step result; other types stay queued for later waits."""
    got: list[Any] = []

    class Oldest:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            await step.sleep("first", 10)
            for name, kind in (("a1", "a"), ("a2", "a"), ("b1", "b")):
                got.append(await step.wait_for_event(name, type=kind, timeout_seconds=60))
            return None

    binding = app.register_workflow(Oldest)
    instance = create(binding, "o")
    work(app)
    send(instance, "a", {"n": 1})
    send(instance, "b", {"n": 2})
    send(instance, "a", {"n": 3})
    clock.advance(10)
    work(app)
    assert got == [{"n": 1}, {"n": 3}, {"n": 2}]
    consumed = {
        e.data["name"]: e.data["event"]
        for e in of_type(app, binding, "o", "step_completed")
        if e.data["kind"] == "wait"
    }
    assert consumed == {"a1": 1, "a2": 3, "b1": 2}
    assert set(topics(app, binding, "o")) == {
        "created",
        "context_started",
        "step_suspended",
        "event_accepted",
        "step_completed",
        "completed",
    }
    assert status(instance) == {"status": "complete"}


def test_dw_wait_2_one_event_never_serves_two_waits(app: Application, clock: FakeClock) -> None:
    """DW-WAIT-2: a consumed event is gone: a second wait of the same type waits for
    the next one, also when the first wait replays in a later context."""
    got: list[tuple[str, Any]] = []

    class Two:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            for name in ("one", "two"):
                got.append((name, await step.wait_for_event(name, type="e", timeout_seconds=60)))
            return None

    binding = app.register_workflow(Two)
    instance = create(binding, "t")
    send(instance, "e", {"n": 1})
    work(app)
    assert status(instance) == {"status": "waiting"}
    assert got == [("one", {"n": 1})]
    send(instance, "e", {"n": 2})
    work(app)
    assert got == [("one", {"n": 1}), ("one", {"n": 1}), ("two", {"n": 2})]
    assert status(instance) == {"status": "complete"}


def test_dw_wait_3_no_match_stops_the_context_then_waiting(
    app: Application, clock: FakeClock
) -> None:
    """DW-WAIT-3: without a match the context stops (code after the wait does not run)
    and ``waiting`` is published; an event of another type does not wake it."""
    after: list[str] = []

    class Wait:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            got = await step.wait_for_event("w", type="go", timeout_seconds=60)
            after.append("after")
            return got

    binding = app.register_workflow(Wait)
    instance = create(binding, "w")
    work(app)
    assert after == []
    assert status(instance) == {"status": "waiting"}
    send(instance, "other")
    work(app)
    assert contexts_started(app, binding, "w") == 1
    send(instance, "go", {"ok": 1})
    assert status(instance) == {"status": "waiting"}  # D3: until a context starts
    work(app)
    assert after == ["after"]
    assert status(instance) == {"status": "complete", "output": {"ok": 1}}


class TimedWait:
    def __init__(self, env: Any) -> None:
        pass

    async def run(self, event: Any, step: Any) -> Any:
        try:
            got = await step.wait_for_event("w", type="go", timeout_seconds=100)
        except WaitTimeout as timeout:
            later = await step.wait_for_event("later", type="go", timeout_seconds=100)
            return {"timeout": timeout.name, "later": later}
        return {"got": got}


def test_dw_wait_4_d19_an_event_accepted_at_the_timeout_instant_wins(
    app: Application, clock: FakeClock
) -> None:
    """DW-WAIT-4 (D11, D19): at exactly the deadline no timeout is recorded, and an
    event accepted at that instant is the wait's result."""
    binding = app.register_workflow(TimedWait)
    instance = create(binding, "w")
    work(app)
    clock.advance(100)
    work(app)
    assert status(instance) == {"status": "waiting"}
    assert contexts_started(app, binding, "w") == 1
    send(instance, "go", {"at": "deadline"})
    clock.advance(MICRO)  # the context runs after the deadline: the event still wins
    work(app)
    assert status(instance) == {"status": "complete", "output": {"got": {"at": "deadline"}}}


def test_dw_wait_4_d11_after_the_deadline_the_timeout_wins(
    app: Application, clock: FakeClock
) -> None:
    """DW-WAIT-4 (D11): after the deadline ``wait_timeout`` is recorded and raised in
    a new context; an event accepted after the deadline stays queued for a later wait."""
    binding = app.register_workflow(TimedWait)
    instance = create(binding, "w")
    work(app)
    clock.advance(100 + MICRO)
    send(instance, "go", {"late": True})
    work(app)
    assert status(instance) == {
        "status": "complete",
        "output": {"timeout": "wait_timeout", "later": {"late": True}},
    }
    record = step_record(app, binding, "w", "w")
    assert record.data["outcome"] == "failed"
    assert record.data["error"]["name"] == "wait_timeout"
    assert record.context["context"] == 2  # recorded by the new context
    assert step_record(app, binding, "w", "later").data["event"] == 1


def test_dw_wait_4_timeout_without_any_event(app: Application, clock: FakeClock) -> None:
    """DW-WAIT-4: the timeout wakes the instance by itself once the deadline passed."""
    binding = app.register_workflow(TimedWait)
    instance = create(binding, "w")
    work(app)
    clock.advance(100 + MICRO)
    work(app)
    assert status(instance) == {"status": "waiting"}  # now on "later"
    assert step_record(app, binding, "w", "w").data["error"]["name"] == "wait_timeout"
    assert contexts_started(app, binding, "w") == 2


# -- DW-FENCE-1 ---------------------------------------------------------------------------------


def test_dw_fence_1_no_later_status_before_the_code_stopped(
    app: Application, clock: FakeClock
) -> None:
    """DW-FENCE-1: while the stopping code still runs (it caught the stop), the status
    is not yet sleeping, waiting or a retry; it is published after the code stopped."""
    seen: list[tuple[str, dict[str, Any]]] = []

    class Observer:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            def look(label: str) -> None:
                seen.append((label, app.instances.status(binding.resource, event.instance_id)))

            try:
                await step.sleep("nap", 10)
            except BaseException:
                look("sleep")
                raise
            try:
                await step.wait_for_event("w", type="go", timeout_seconds=10)
            except BaseException:
                look("wait")
                raise

            def fail() -> None:
                raise RuntimeError("once")

            try:
                await step.do("d", fail, retry_policy={"maxAttempts": 2, "initialDelaySeconds": 5})
            except BaseException:
                look("retry")
                raise
            return None

    binding = app.register_workflow(Observer)
    instance = create(binding, "o")
    work(app)
    assert status(instance) == {"status": "sleeping"}
    clock.advance(10)
    work(app)
    assert status(instance) == {"status": "waiting"}
    send(instance, "go")
    work(app)
    assert [label for label, _ in seen] == ["sleep", "wait", "retry"]
    assert all(view == {"status": "running"} for _, view in seen)


def test_dw_fence_1_an_old_owner_can_never_commit(app: Application, clock: FakeClock) -> None:
    """DW-FENCE-1: once a newer context took over (the old owner's lease ran out), the
    old owner's step results and end are refused and never reach the history."""
    values: list[str] = []

    class Owned:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            def effect() -> dict[str, Any]:
                values.append(f"attempt {len(values) + 1}")
                return {"by": values[-1]}

            return await step.do("d", effect)

    binding = app.register_workflow(Owned)
    instance = create(binding, "o")
    old_engine = app.workflow_engine("old-owner", lease_seconds=30)
    (old,), _ = old_engine.claim(10)
    clock.advance(31)
    work(app)  # a newer context runs and completes
    assert status(instance) == {"status": "complete", "output": {"by": "attempt 1"}}
    recorded = [(e.type, e.data) for e in history(app, binding, "o")]

    class OldHost:
        def request(self, message: tuple[Any, ...]) -> tuple[Any, ...]:
            return old_engine.request([(old, message)])[0]

    end = run_context(old.plan, old.code.cls, old.code.env, OldHost())
    assert end.kind == "stopped"
    old_engine.finish([(old, end)])
    old_engine.finish([(old, ContextEnd("complete", output={"stale": True}))])
    assert [(e.type, e.data) for e in history(app, binding, "o")] == recorded
    assert status(instance) == {"status": "complete", "output": {"by": "attempt 1"}}
    assert error_code(instance.send_event(type="t")) == "instance_terminal"


class _HostDied(BaseException):
    """Stands for the host process dying between an effect and its commit."""


def test_dw_do_4_an_effect_whose_result_was_not_committed_may_run_again(
    app: Application, clock: FakeClock
) -> None:
    """DW-DO-4: the host dies after the effect ran, before its result committed; once
    the dead owner's lease ran out, a new context runs the effect again and its result
    is committed exactly once."""
    ran: list[str] = []

    class Idempotent:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            def effect() -> dict[str, Any]:
                ran.append("effect")
                return {"run": len(ran)}

            return await step.do("charge", effect)

    binding = app.register_workflow(Idempotent)
    instance = create(binding, "i")
    dying = app.workflow_engine("dying-host", lease_seconds=30)
    (held,), _ = dying.claim(10)

    class DiesBeforeCommit:
        def request(self, message: tuple[Any, ...]) -> tuple[Any, ...]:
            raise _HostDied

    # The host "dies" in its first commit: the failure may propagate or not; nothing of
    # this context is ever committed (finish is never called for it).
    with contextlib.suppress(_HostDied):
        run_context(held.plan, held.code.cls, held.code.env, DiesBeforeCommit())
    assert ran == ["effect"]
    assert of_type(app, binding, "i", "step_completed") == []
    clock.advance(29)
    work(app)
    assert status(instance) == {"status": "running"}  # the lease still holds
    clock.advance(1)
    work(app)
    assert ran == ["effect", "effect"]
    assert [e.data["result"] for e in of_type(app, binding, "i", "step_completed")] == [{"run": 2}]
    assert status(instance) == {"status": "complete", "output": {"run": 2}}


def test_dw_step_1_a_step_object_is_bound_to_its_own_context(
    app: Application, clock: FakeClock
) -> None:
    """DW-STEP-1 / DW-REPLAY-1: ``step`` is bound to its instance and context. An app
    that smuggles the step of a stopped context into a later one (a module global)
    gets nothing done through it, and the run still ends: errored, with nothing
    recorded through the stale step, and no new context started lease after lease."""
    kept: list[Any] = []

    class Smuggles:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            if not kept:
                kept.append(step)
            await kept[0].sleep("nap", 10)
            await kept[0].do("through the stale step", lambda: {"x": 1})
            return {"done": True}

    binding = app.register_workflow(Smuggles)
    instance = create(binding, "s")
    work(app)
    assert status(instance) == {"status": "sleeping"}
    for _ in range(3):  # the wake, then two more lease lengths
        clock.advance(31)
        work(app)
    view = status(instance)
    assert view["status"] == "errored", view
    assert view["error"]["reason"] in ("run_threw", "step_definition_mismatch")
    assert contexts_started(app, binding, "s") == 2
    assert of_type(app, binding, "s", "step_completed") == []
