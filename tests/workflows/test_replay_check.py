"""The replay checker (issue 16, decisions C1-C5) on SQLite and PostgreSQL: recorded
histories of a real workflow run through changed code, checking what DW-REPLAY-2 asks
of authors (a newer Version must replay the history) and DW-REPLAY-1 (no time or
randomness outside steps). Every finding kind comes from a
real code change; nothing is appended (the journal's head is unchanged) and no effect of
the candidate runs (the effects record calls and write a file)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, ClassVar

import pytest
from workflow_cases import create, work

from blackops import Application
from blackops.testing import FakeClock, recorded_histories, replay_histories
from blackops.workflows.replay_check import ReplayReport

V1_CALLS: list[str] = []


class Order:
    """The recorded code: three effects and a sleep."""

    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> Any:
        a = await step.do("reserve", lambda: _v1("reserve"))
        b = await step.do("charge", lambda: _v1("charge"))
        await step.sleep("cool", 60)
        c = await step.do("ship", lambda: _v1("ship"))
        return {"a": a, "b": b, "c": c}


def _v1(name: str) -> dict[str, Any]:
    V1_CALLS.append(name)
    return {"did": name}


class Touching:
    """An effect with a side effect the test can see: it writes a file."""

    calls: ClassVar[list[str]] = []
    path: ClassVar[Path | None] = None

    @classmethod
    def effect(cls, name: str) -> Any:
        def run() -> dict[str, Any]:
            cls.calls.append(name)
            assert cls.path is not None
            cls.path.write_text(name)
            return {"did": name}

        return run


NAMES = [f"key-{n}" for n in range(24)]


class SetOrdered:
    """Names a step by the iteration order of a set of strings: the hash seed's order."""

    def __init__(self, env: Any) -> None:
        pass

    async def run(self, event: Any, step: Any) -> Any:
        await step.do("reserve", Touching.effect("reserve"))
        order = ",".join(list(set(NAMES))[:6])
        await step.do(f"charge {order}", Touching.effect("charge"))
        return None


def _head(app: Application) -> tuple[int, int]:
    events = list(app.store.iter_after(0))
    return len(events), events[-1].position


@pytest.fixture
def recorded(app: Application, clock: FakeClock, tmp_path: Path) -> Application:
    """Two histories of Order: ``done`` (complete) and ``nap`` (sleeping at ``cool``)."""
    binding = app.register_workflow(Order, uid="orders")
    create(binding, "done")
    work(app)
    clock.advance(60)
    work(app)
    create(binding, "nap")
    work(app)
    Touching.calls = []
    Touching.path = tmp_path / "touched"
    return app


def _check(app: Application, candidate: type) -> ReplayReport:
    before = _head(app)
    report = replay_histories(candidate, recorded_histories(app, "orders"))
    assert _head(app) == before  # nothing appended
    assert Touching.calls == []  # no effect of the candidate ran
    assert Touching.path is not None and not Touching.path.exists()
    return report


def _by_id(report: ReplayReport) -> dict[str, Any]:
    return {i.instance_id: i for i in report.instances}


def _kinds(report: ReplayReport, instance: str) -> list[str]:
    return [f.kind for f in _by_id(report)[instance].findings]


def _position(app: Application, instance: str, topic: str, name: str | None = None) -> int:
    for history in recorded_histories(app, "orders", instances=[instance]):
        for event in history.events:
            if event.type == topic and (name is None or event.data.get("name") == name):
                return event.position
    raise AssertionError(f"no {topic} {name} in {instance}")


def test_the_same_steps_with_other_effects_are_compatible(recorded: Application) -> None:
    class Same:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            a = await step.do("reserve", Touching.effect("reserve"))
            b = await step.do("charge", Touching.effect("charge"))
            await step.sleep("cool", 60)
            c = await step.do("ship", Touching.effect("ship"))
            return {"a": a, "b": b, "c": c}

    report = _check(recorded, Same)
    assert report.compatible, report.human()
    assert {i.instance_id: i.status for i in report.instances} == {
        "done": "complete",
        "nap": "sleeping",
    }
    nap = _by_id(report)["nap"]
    assert [(n.kind, n.step, n.step_kind) for n in nap.notes] == [
        ("reaches_frontier", "cool", "sleep")
    ]
    assert _by_id(report)["done"].end == {
        "kind": "complete",
        "output": {"a": {"did": "reserve"}, "b": {"did": "charge"}, "c": {"did": "ship"}},
    }


def test_a_step_after_the_last_recorded_one_extends_the_history(recorded: Application) -> None:
    class Appended:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            a = await step.do("reserve", Touching.effect("reserve"))
            b = await step.do("charge", Touching.effect("charge"))
            await step.sleep("cool", 60)
            c = await step.do("ship", Touching.effect("ship"))
            await step.do("notify", Touching.effect("notify"))
            return {"a": a, "b": b, "c": c}

    report = _check(recorded, Appended)
    assert report.compatible, report.human()
    done = _by_id(report)["done"]
    assert [(n.kind, n.step, n.step_kind) for n in done.notes] == [
        ("extends_history", "notify", "do")
    ]
    assert done.notes[0].position == _position(recorded, "done", "workflow.completed")


def test_a_renamed_step_is_a_new_step_inside_the_history(recorded: Application) -> None:
    class Renamed:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            a = await step.do("reserve", Touching.effect("reserve"))
            b = await step.do("bill", Touching.effect("bill"))
            await step.sleep("cool", 60)
            c = await step.do("ship", Touching.effect("ship"))
            return {"a": a, "b": b, "c": c}

    report = _check(recorded, Renamed)
    assert not report.compatible
    for instance in ("done", "nap"):
        (finding,) = _by_id(report)[instance].findings
        assert (finding.kind, finding.step, finding.step_kind) == (
            "new_step_inside_history",
            "bill",
            "do",
        )
        charge = _position(recorded, instance, "workflow.step_completed", "charge")
        assert finding.position == charge
    assert report.counts()["new_step_inside_history"] == 2


def test_a_step_inserted_before_recorded_ones(recorded: Application) -> None:
    class Inserted:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            a = await step.do("reserve", Touching.effect("reserve"))
            await step.do("audit", Touching.effect("audit"))
            b = await step.do("charge", Touching.effect("charge"))
            await step.sleep("cool", 60)
            c = await step.do("ship", Touching.effect("ship"))
            return {"a": a, "b": b, "c": c}

    report = _check(recorded, Inserted)
    assert _kinds(report, "done") == ["new_step_inside_history"]
    assert _kinds(report, "nap") == ["new_step_inside_history"]
    finding = _by_id(report)["done"].findings[0]
    assert finding.step == "audit"
    assert "'charge'" in finding.reason and "'ship'" in finding.reason


def test_a_step_called_as_another_kind(recorded: Application) -> None:
    class Rekinded:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            a = await step.do("reserve", Touching.effect("reserve"))
            b = await step.do("charge", Touching.effect("charge"))
            await step.do("cool", Touching.effect("cool"))  # was a sleep
            c = await step.do("ship", Touching.effect("ship"))
            return {"a": a, "b": b, "c": c}

    report = _check(recorded, Rekinded)
    # An unfinished name (nap is sleeping at "cool") must keep its kind: a worker
    # would stop the instance with step_definition_mismatch.
    (finding,) = _by_id(report)["nap"].findings
    assert (finding.kind, finding.step, finding.step_kind) == ("kind_changed", "cool", "do")
    assert finding.position == _position(recorded, "nap", "workflow.step_suspended", "cool")
    assert "sleep" in finding.reason
    # A completed one must keep its kind too (D7: replaying a result across kinds has no
    # meaning): the changed kind breaks its history the same way.
    (finding,) = _by_id(report)["done"].findings
    assert (finding.kind, finding.step, finding.step_kind) == ("kind_changed", "cool", "do")
    assert not report.compatible


def test_a_changed_output_and_a_removed_step(recorded: Application) -> None:
    class Changed:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            a = await step.do("reserve", Touching.effect("reserve"))
            await step.sleep("cool", 60)
            c = await step.do("ship", Touching.effect("ship"))
            return {"a": a, "c": c, "version": 2}

    report = _check(recorded, Changed)
    done = _by_id(report)["done"]
    assert [(f.kind, f.step) for f in done.findings] == [
        ("history_step_unused", "charge"),
        ("output_changed", None),
    ]
    assert done.findings[0].position == _position(
        recorded, "done", "workflow.step_completed", "charge"
    )
    assert done.findings[1].position == _position(recorded, "done", "workflow.completed")
    # In flight, the removed step is unreached until the code stops at the sleep.
    assert _kinds(report, "nap") == []


def test_run_raising_where_it_returned_is_an_outcome_change(recorded: Application) -> None:
    class Raising:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            a = await step.do("reserve", Touching.effect("reserve"))
            b = await step.do("charge", Touching.effect("charge"))
            if b == {"did": "charge"}:
                raise ValueError("charge results are read differently now")
            return {"a": a}

    report = _check(recorded, Raising)
    done = _by_id(report)["done"]
    assert [(f.kind, f.step) for f in done.findings] == [
        ("history_step_unused", "cool"),
        ("history_step_unused", "ship"),
        ("outcome_changed", None),
    ]
    finding = done.findings[-1]
    assert "run_threw" in finding.reason
    # In flight too: the live instance would fail at its next context (decisions C3).
    assert _kinds(report, "nap") == ["outcome_changed"]


def test_reading_the_wall_clock_outside_a_step_is_nondeterministic(
    recorded: Application,
) -> None:
    cutoff = time.time() + 3600  # an hour from now: the second replay is a day later

    class ClockReading:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            a = await step.do("reserve", Touching.effect("reserve"))
            if time.time() > cutoff:
                await step.do("late", Touching.effect("late"))
            b = await step.do("charge", Touching.effect("charge"))
            await step.sleep("cool", 60)
            c = await step.do("ship", Touching.effect("ship"))
            return {"a": a, "b": b, "c": c}

    report = _check(recorded, ClockReading)
    for instance in ("done", "nap"):
        (finding,) = _by_id(report)[instance].findings
        assert finding.kind == "nondeterministic"
        assert (finding.step, finding.step_kind) == ("charge", "do")
        assert finding.position == _position(
            recorded, instance, "workflow.step_completed", "charge"
        )
        assert "'late'" in finding.reason


def test_reading_randomness_outside_a_step_is_nondeterministic(recorded: Application) -> None:
    import random

    class Dice:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            name = "reserve" if random.random() < 2 else "never"
            await step.do(name, Touching.effect("reserve"))
            await step.do(f"charge-{random.randrange(10**9)}", Touching.effect("charge"))
            return None

    report = _check(recorded, Dice)
    assert "nondeterministic" in _kinds(report, "done")


def test_the_recorded_code_itself_is_compatible_and_effects_stay_recorded(
    recorded: Application,
) -> None:
    V1_CALLS.clear()
    report = _check(recorded, Order)
    assert report.compatible, report.human()
    assert V1_CALLS == []  # served from the history, not run again


def test_iterating_a_set_outside_a_step_differs_under_another_hash_seed(
    recorded: Application,
) -> None:
    """The second replay of an importable class runs in a child process under another
    hash seed (decisions C5), so a set's iteration order outside a step shows up."""
    report = _check(recorded, SetOrdered)
    assert report.hash_seed_varied is True
    for instance in ("done", "nap"):
        kinds = _kinds(report, instance)
        assert "nondeterministic" in kinds, report.human()
        finding = next(f for f in _by_id(report)[instance].findings if f.kind == "nondeterministic")
        assert finding.step is not None and finding.step.startswith("charge key-")


def test_a_class_defined_in_a_function_is_replayed_twice_in_this_process(
    recorded: Application,
) -> None:
    class Local(Order):
        pass

    report = _check(recorded, Local)
    assert report.compatible and report.hash_seed_varied is False
    assert _check(recorded, Order).hash_seed_varied is True
