"""Caller binding and instances (durable-workflow.md §2) on SQLite and PostgreSQL:
DW-INST-1..5, DW-DOC-1..5, DW-EVT-1..4, DW-TERM-1..2, DW-RET-1 (decisions D1-D5,
D11-D13, D16-D18, D20).

Contexts run in this process through ``work_until_idle`` on a fake clock; the
journal is read back to check what was recorded and when.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import uuid
from decimal import Decimal
from typing import Any

import pytest
from workflow_cases import (
    LIFETIME,
    MAX_BYTES,
    MAX_EVENTS,
    RETENTION,
    contexts_started,
    create,
    error_code,
    event_size,
    history,
    of_type,
    payload_of_size,
    send,
    status,
    sync,
    topics,
    work,
)

from blackops import (
    Application,
    BlackOpsError,
    DocumentError,
    WorkflowInstance,
    canonical_document,
)
from blackops.testing import FakeClock
from blackops.workflows.context import run_context
from journal.instances import instance_stream

# -- workflows used by several tests ------------------------------------------------------------


class Echo:
    """Completes at once with its params."""

    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> Any:
        return {"params": event.params, "id": event.instance_id}


class Sleeper:
    """Sleeps 100 s, then completes."""

    def __init__(self, env: Any) -> None:
        pass

    async def run(self, event: Any, step: Any) -> Any:
        await step.sleep("nap", 100)
        return {"slept": True}


class Waiter:
    """Waits for one ``go`` event (1000 s) and returns its payload."""

    def __init__(self, env: Any) -> None:
        pass

    async def run(self, event: Any, step: Any) -> Any:
        payload = await step.wait_for_event("go", type="go", timeout_seconds=1000)
        return {"got": payload}


class Thrower:
    def __init__(self, env: Any) -> None:
        pass

    def run(self, event: Any, step: Any) -> Any:
        raise ValueError("boom")


def ended(app: Application, cls: type, how: str) -> WorkflowInstance:
    """An instance of ``cls`` brought to ``complete``, ``errored`` or ``terminated``."""
    binding = app.register_workflow(cls)
    instance = create(binding, f"ended-{how}")
    if how == "terminated":
        sync(instance.terminate())
    else:
        work(app)
    assert status(instance)["status"] == how
    return instance


# -- DW-INST-1: ids --------------------------------------------------------------------------


def test_dw_inst_1_generated_ids_are_unique_canonical_uuids(app: Application) -> None:
    """DW-INST-1 (D5): an omitted id is issued by the host, a canonical random UUID."""
    binding = app.register_workflow(Echo)
    ids = [create(binding).id for _ in range(5)]
    assert len(set(ids)) == 5
    for issued in ids:
        parsed = uuid.UUID(issued)
        assert str(parsed) == issued
        assert parsed.version in (4, 7)
        got = sync(binding.get(issued))
        assert got.id == issued
        with pytest.raises(AttributeError):
            got.id = "other"  # type: ignore[misc]  # readonly id
    work(app)
    assert status(sync(binding.get(ids[0])))["output"]["id"] == ids[0]


VALID_IDS = [
    "a",
    " ",
    "x" * 256,
    "😀" * 256,  # 256 scalar values, 512 UTF-16 units, 1024 UTF-8 bytes
    "ä/?#%20 \t\n\u2028",
    "\x00",
    "\U0010ffff" * 3,
]


@pytest.mark.parametrize("instance_id", VALID_IDS, ids=range(len(VALID_IDS)))
def test_dw_inst_1_ids_of_1_to_256_scalar_values_are_accepted(
    app: Application, instance_id: str
) -> None:
    """DW-INST-1 (D4): any 1-256 Unicode scalar values name an instance."""
    binding = app.register_workflow(Echo)
    assert create(binding, instance_id).id == instance_id
    work(app)
    got = sync(binding.get(instance_id))
    assert got.id == instance_id
    assert status(got)["output"]["id"] == instance_id


INVALID_IDS: list[Any] = ["", "x" * 257, "😀" * 257, "a\ud800", "\udfff", 5, b"abc"]


@pytest.mark.parametrize("instance_id", INVALID_IDS, ids=range(len(INVALID_IDS)))
def test_dw_inst_1_other_ids_are_refused_before_anything_is_recorded(
    app: Application, instance_id: Any
) -> None:
    """DW-INST-1 (D4): empty, over 256 scalar values, lone surrogates, non-strings."""
    binding = app.register_workflow(Echo)
    assert error_code(binding.create(id=instance_id)) in ("invalid_request", "invalid_params")
    work(app)
    assert [e for e in app.store.iter_after(0) if e.type.startswith("workflow.")] == []


# -- DW-INST-2: instance_exists -------------------------------------------------------------


@pytest.mark.parametrize("how", ["queued", "complete", "errored", "terminated"])
def test_dw_inst_2_a_retained_id_cannot_be_created_again(app: Application, how: str) -> None:
    """DW-INST-2: create with a retained id fails with instance_exists, whatever the
    instance's state, and the first run is untouched (no second run under that name)."""
    runs: list[Any] = []

    class Once:
        def __init__(self, env: Any) -> None:
            pass

        def run(self, event: Any, step: Any) -> Any:
            runs.append(event.params)
            if how == "errored":
                raise ValueError("boom")
            return {"params": event.params}

    binding = app.register_workflow(Once)
    instance = create(binding, "only", {"n": 1})
    if how == "terminated":
        sync(instance.terminate())
    elif how != "queued":
        work(app)
    before = status(instance)
    assert before["status"] == how
    assert error_code(binding.create(id="only", params={"n": 2})) == "instance_exists"
    assert error_code(binding.create(id="only")) == "instance_exists"
    work(app)
    if how == "queued":
        before = {"status": "complete", "output": {"params": {"n": 1}}}
    assert status(instance) == before
    assert runs == ([] if how == "terminated" else [{"n": 1}])
    assert topics(app, binding, "only").count("created") == 1


def test_dw_inst_2_racing_creates_have_one_winner(app: Application) -> None:
    """DW-INST-2: creates racing on one id: exactly one succeeds, the rest are
    instance_exists, and one run happens."""
    runs: list[str] = []

    class Raced:
        def __init__(self, env: Any) -> None:
            pass

        def run(self, event: Any, step: Any) -> Any:
            runs.append(event.params["n"])
            return None

    binding = app.register_workflow(Raced)

    async def race() -> list[Any]:
        calls = [binding.create(id="r", params={"n": n}) for n in range(8)]
        return await asyncio.gather(*calls, return_exceptions=True)

    results = sync(race())
    winners = [r for r in results if isinstance(r, WorkflowInstance)]
    losers = [r for r in results if not isinstance(r, WorkflowInstance)]
    assert len(winners) == 1
    assert all(isinstance(r, BlackOpsError) and r.code == "instance_exists" for r in losers)
    work(app)
    assert len(runs) == 1
    assert status(winners[0])["status"] == "complete"


def test_dw_inst_2_ids_are_scoped_to_one_workflow(app: Application) -> None:
    """DW-INST-2 (D17): the same id under two Workflow resources is two instances."""
    first = app.register_workflow(Echo, uid="first")
    second = app.register_workflow(Echo, uid="second")
    create(first, "same", {"w": 1})
    create(second, "same", {"w": 2})
    work(app)
    assert status(sync(first.get("same")))["output"]["params"] == {"w": 1}
    assert status(sync(second.get("same")))["output"]["params"] == {"w": 2}


# -- DW-INST-3 / DW-EVT-2: unknown instances ------------------------------------------------


def test_dw_inst_3_dw_evt_2_unknown_ids_answer_unknown_instance(app: Application) -> None:
    """DW-INST-3 / DW-EVT-2: get, status, send_event and terminate of an id that was
    never created fail with unknown_instance."""
    binding = app.register_workflow(Echo)
    create(binding, "known")
    assert error_code(binding.get("unknown")) == "unknown_instance"
    assert error_code(binding.get("Known")) == "unknown_instance"
    ghost = WorkflowInstance(binding, "ghost")
    assert error_code(ghost.status()) == "unknown_instance"
    assert error_code(ghost.send_event(type="t")) == "unknown_instance"
    assert error_code(ghost.terminate()) == "unknown_instance"
    assert error_code(binding.get("ghost")) == "unknown_instance"  # nothing was created


# -- DW-INST-4: statuses and their exact shapes --------------------------------------------


def test_dw_inst_4_d2_queued_then_running_then_complete(app: Application) -> None:
    """DW-INST-4 (D2): queued from create until a context starts, running while it
    runs, then exactly ``{"status": "complete", "output": ...}``."""
    seen: list[dict[str, Any]] = []

    class Observed:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            def look() -> dict[str, Any]:
                seen.append(app.instances.status(binding.resource, event.instance_id))
                return {"looked": True}

            await step.do("look", look)
            return {"done": 1}

    binding = app.register_workflow(Observed)
    instance = create(binding, "obs")
    assert status(instance) == {"status": "queued"}
    assert status(sync(binding.get("obs"))) == {"status": "queued"}
    work(app)
    assert seen == [{"status": "running"}]
    assert status(instance) == {"status": "complete", "output": {"done": 1}}


def test_dw_inst_4_d20_complete_without_output_has_no_output_key(app: Application) -> None:
    """DW-INST-4 / DW-DOC-4 (D20): run returning None completes with no ``output`` key."""

    class Nothing:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> None:
            await step.do("x", lambda: None)

    binding = app.register_workflow(Nothing)
    instance = create(binding)
    work(app)
    assert status(instance) == {"status": "complete"}


def test_dw_inst_4_empty_output_is_kept(app: Application) -> None:
    """DW-INST-4 / DW-DOC-4: an empty document is an output, unlike None."""

    class Empty:
        def __init__(self, env: Any) -> None:
            pass

        def run(self, event: Any, step: Any) -> Any:
            return {}

    binding = app.register_workflow(Empty)
    instance = create(binding)
    work(app)
    assert status(instance) == {"status": "complete", "output": {}}


def test_dw_inst_4_errored_shape_and_message(app: Application) -> None:
    """DW-INST-4 / DW-INST-5 (D18): errored is ``{"status", "error": {"reason",
    "message"}}`` and nothing else; the message is short, names the exception and
    carries no traceback or params; status() itself succeeds."""
    binding = app.register_workflow(Thrower)
    instance = create(binding, "t", {"secret": "hunter2"})
    work(app)
    view = status(instance)
    assert set(view) == {"status", "error"}
    assert view["status"] == "errored"
    assert set(view["error"]) <= {"reason", "message"}
    assert view["error"]["reason"] == "run_threw"
    message = view["error"].get("message", "")
    assert "ValueError" in message and "boom" in message
    assert "Traceback" not in message and "hunter2" not in message


def test_dw_inst_4_d3_sleeping_waiting_and_terminated_shapes(
    app: Application, clock: FakeClock
) -> None:
    """DW-INST-4 (D3): sleeping / waiting / terminated carry nothing but the status,
    and sleeping stays sleeping after the deadline until a new context starts."""
    sleeper = create(app.register_workflow(Sleeper), "s")
    waiter = create(app.register_workflow(Waiter), "w")
    work(app)
    assert status(sleeper) == {"status": "sleeping"}
    assert status(waiter) == {"status": "waiting"}
    clock.advance(100)
    send(waiter, "go", {"x": 1})
    assert status(sleeper) == {"status": "sleeping"}  # D3: until the context starts
    assert status(waiter) == {"status": "waiting"}
    work(app)
    assert status(sleeper) == {"status": "complete", "output": {"slept": True}}
    assert status(waiter) == {"status": "complete", "output": {"got": {"x": 1}}}
    victim = create(app.register_workflow(Sleeper, uid="victim"), "v")
    sync(victim.terminate())
    assert status(victim) == {"status": "terminated"}


def test_dw_inst_4_d1_running_while_a_retry_delay_runs_out(
    app: Application, clock: FakeClock
) -> None:
    """DW-INST-4 (D1): a do waiting out its retry delay is ``running``."""
    attempts: list[int] = []

    class Flaky:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            def effect() -> dict[str, Any]:
                attempts.append(1)
                if len(attempts) < 2:
                    raise RuntimeError("not yet")
                return {"ok": True}

            policy = {"maxAttempts": 2, "initialDelaySeconds": 60}
            return await step.do("flaky", effect, retry_policy=policy)

    instance = create(app.register_workflow(Flaky), "f")
    work(app)
    assert status(instance) == {"status": "running"}
    clock.advance(59)
    work(app)
    assert status(instance) == {"status": "running"}
    assert len(attempts) == 1
    clock.advance(1)
    work(app)
    assert status(instance) == {"status": "complete", "output": {"ok": True}}


# -- DW-INST-5: failure reasons -------------------------------------------------------------


class StepFails:
    def __init__(self, env: Any) -> None:
        pass

    async def run(self, event: Any, step: Any) -> Any:
        def effect() -> None:
            raise RuntimeError("down")

        await step.do("fails", effect)


class Unsettled:
    def __init__(self, env: Any) -> None:
        pass

    async def run(self, event: Any, step: Any) -> Any:
        pending = step.sleep("never awaited", 5)
        pending.close()
        return {}


class Outlived:
    def __init__(self, env: Any) -> None:
        pass

    async def run(self, event: Any, step: Any) -> Any:
        await step.sleep("long", 31_536_000)


@pytest.mark.parametrize(
    ("cls", "reason", "later"),
    [
        (Thrower, "run_threw", 0),
        (StepFails, "step_failed", 0),
        (Unsettled, "step_definition_mismatch", 0),
        (Outlived, "lifetime_exceeded", LIFETIME),
    ],
)
def test_dw_inst_5_failure_reasons(
    app: Application, clock: FakeClock, cls: type, reason: str, later: int
) -> None:
    """DW-INST-5: an errored run names one of the five reasons (step_limit_exceeded
    is in test_workflow_errors.py)."""
    instance = create(app.register_workflow(cls), "r")
    work(app)
    clock.advance(later)
    work(app)
    view = status(instance)
    assert view["status"] == "errored"
    assert view["error"]["reason"] == reason


# -- DW-DOC-1..5: params ----------------------------------------------------------------------


def test_dw_doc_1_dw_doc_5_params_at_the_size_limits(app: Application) -> None:
    """DW-DOC-1 / DW-DOC-5: 1024 keys in any object and 1,048,576 canonical bytes are
    accepted; one more key or byte is document_too_large and creates nothing."""
    binding = app.register_workflow(Echo)
    wide = {f"k{n:04}": n for n in range(1024)}
    nested = {"inner": {f"k{n:04}": n for n in range(1024)}}
    exact = {"a": "x" * (MAX_BYTES - len(b'{"a":""}'))}
    assert len(canonical_document(exact)) == MAX_BYTES
    for n, params in enumerate([wide, nested, exact]):
        create(binding, f"ok-{n}", params)
    too_large = [
        {f"k{n:04}": n for n in range(1025)},
        {"inner": {f"k{n:04}": n for n in range(1025)}},
        {"a": "x" * (MAX_BYTES - len(b'{"a":""}') + 1)},
        {"a": "é" * ((MAX_BYTES - len(b'{"a":""}')) // 2 + 1)},  # characters fit, bytes do not
    ]
    for n, params in enumerate(too_large):
        assert error_code(binding.create(id=f"big-{n}", params=params)) == "document_too_large"
        assert error_code(binding.get(f"big-{n}")) == "unknown_instance"
    assert history(app, binding, "ok-2")[0].data["params"] == exact
    work(app)
    assert status(sync(binding.get("ok-0")))["output"]["params"] == wide
    assert status(sync(binding.get("ok-1")))["output"]["params"] == nested


class _DictChild(dict):  # type: ignore[type-arg]
    pass


class _ListChild(list):  # type: ignore[type-arg]
    pass


class _StrChild(str):
    pass


class _IntChild(int):
    pass


@dataclasses.dataclass
class _Point:
    x: int


_cycle: dict[str, Any] = {}
_cycle["self"] = _cycle

INVALID_PARAMS: list[Any] = [
    [],
    [1],
    "text",
    5,
    (("a", 1),),
    _DictChild(a=1),
    {"t": (1, 2)},
    {"nan": float("nan")},
    {"inf": float("inf")},
    {"big": 2**53},
    {"small": -(2**53)},
    {1: "non-string key"},
    {"bytes": b"x"},
    {"set": {1}},
    {"decimal": Decimal("1.5")},
    {"child": _DictChild()},
    {"list": _ListChild()},
    {"str": _StrChild("s")},
    {"int": _IntChild(1)},
    {"surrogate": "a\ud800"},
    {"point": _Point(1)},
    {"fn": len},
    _cycle,
]


@pytest.mark.parametrize("params", INVALID_PARAMS, ids=range(len(INVALID_PARAMS)))
def test_dw_doc_2_dw_doc_5_invalid_params(app: Application, params: Any) -> None:
    """DW-DOC-2 / DW-DOC-5: a non-dict root, tuples, NaN/Infinity, unsafe integers,
    subclasses, non-JSON values and cycles are invalid_params; the id stays free."""
    binding = app.register_workflow(Echo)
    assert error_code(binding.create(id="p", params=params)) == "invalid_params"
    assert error_code(binding.get("p")) == "unknown_instance"
    assert create(binding, "p", {"fine": True}).id == "p"


def test_dw_doc_2_every_json_value_round_trips(app: Application) -> None:
    """DW-DOC-2: null, booleans, finite numbers, strings, nested objects and arrays, and
    a shared non-cyclic object are accepted and reach ``run`` unchanged."""
    shared = {"k": [1, 2]}
    params: dict[str, Any] = {
        "null": None,
        "bools": [True, False],
        "safe": [2**53 - 1, -(2**53 - 1), 0],
        "floats": [1.5, -2.25, 1e-300, 1e300],
        "text": "é😀\u2028\x00",
        "nested": {"a": {"b": [[], {}]}},
        "shared1": shared,
        "shared2": shared,
    }
    binding = app.register_workflow(Echo)
    create(binding, "rt", params)
    work(app)
    assert status(sync(binding.get("rt")))["output"]["params"] == params


def test_dw_doc_2_large_integral_floats_stay_valid_after_the_journal(app: Application) -> None:
    """DW-DOC-2 / DW-DOC-1: a finite float of magnitude >= 2**53 is a valid document
    value (python-contract §1: larger magnitudes must be floats). Read back from the
    journal it must still be one, so ``run`` can return the params it was given."""
    kinds: list[str] = []

    class Floats:
        def __init__(self, env: Any) -> None:
            pass

        def run(self, event: Any, step: Any) -> Any:
            kinds.extend(type(v).__name__ for v in event.params["f"])
            return event.params

    params = {"f": [2.0**53, 2.0**60, -1e20]}
    canonical_document(params)  # a valid document
    binding = app.register_workflow(Floats)
    instance = create(binding, "big-floats", params)
    work(app)
    assert kinds == ["float", "float", "float"]
    assert status(instance) == {"status": "complete", "output": params}


def test_dw_doc_3_no_hook_of_the_value_runs(app: Application) -> None:
    """DW-DOC-3: validation inspects the data without running the value's own code
    (``items``/``keys``/``__iter__`` of a dict subclass, ``__json__``, ``to_dict``)."""
    ran: list[str] = []

    class Hooked(dict):  # type: ignore[type-arg]
        def items(self) -> Any:
            ran.append("items")
            return super().items()

        def keys(self) -> Any:
            ran.append("keys")
            return super().keys()

        def __iter__(self) -> Any:
            ran.append("iter")
            return super().__iter__()

        def __json__(self) -> Any:
            ran.append("json")
            return {}

        def to_dict(self) -> Any:
            ran.append("to_dict")
            return {}

    binding = app.register_workflow(Echo)
    assert error_code(binding.create(id="h", params=Hooked(a=1))) == "invalid_params"
    assert error_code(binding.create(id="h", params={"n": Hooked(a=1)})) == "invalid_params"
    assert ran == []
    with pytest.raises(DocumentError) as caught:
        canonical_document({"n": Hooked()})
    assert caught.value.code == "invalid_params"
    assert ran == []


def test_dw_doc_4_only_none_means_no_params(app: Application) -> None:
    """DW-DOC-4: params omitted or None reach run as None; ``{}`` stays ``{}``."""
    binding = app.register_workflow(Echo)
    create(binding, "omitted")
    create(binding, "none", None)
    create(binding, "empty", {})
    work(app)
    assert status(sync(binding.get("omitted")))["output"]["params"] is None
    assert status(sync(binding.get("none")))["output"]["params"] is None
    assert status(sync(binding.get("empty")))["output"]["params"] == {}
    created = history(app, binding, "empty")[0]
    assert created.data["params"] == {}
    assert "params" not in history(app, binding, "none")[0].data


def test_dw_doc_5_unknown_input_keys_are_rejected(app: Application) -> None:
    """DW-DOC-5: create and send_event take only the spec's inputs."""
    binding = app.register_workflow(Waiter)
    create_: Any = binding.create
    with pytest.raises(TypeError):
        sync(create_(id="x", parms={}))
    instance = create(binding, "x")
    send_: Any = instance.send_event
    with pytest.raises(TypeError):
        sync(send_(type="go", data={}))
    with pytest.raises(TypeError):
        sync(send_("go"))  # type is keyword-only, like the spec's input object
    assert of_type(app, binding, "x", "event_accepted") == []


# -- DW-EVT-1: accepted durably, in order --------------------------------------------------------


def test_dw_evt_1_events_are_accepted_durably_in_order(
    app: Application, store_url: str, clock: FakeClock
) -> None:
    """DW-EVT-1: each accepted event is in the journal when send_event returns, with
    the instance's next sequence number; waits consume them in that order."""
    seen: list[Any] = []

    class Three:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            for n in range(3):
                seen.append(await step.wait_for_event(f"w{n}", type="go", timeout_seconds=60))
            return None

    binding = app.register_workflow(Three)
    instance = create(binding, "seq")
    other = Application(store_url, clock=clock)  # as another process would read it
    try:
        for n in range(3):
            send(instance, "go", {"n": n})
            accepted = other.store.read_stream(app.instances.load(binding.resource, "seq").stream)
            assert [e.data["seq"] for e in accepted if e.type == "workflow.event_accepted"] == list(
                range(1, n + 2)
            )
    finally:
        other.close()
    assert status(instance) == {"status": "queued"}  # accepted, not consumed
    work(app)
    assert seen == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert status(instance) == {"status": "complete"}


def test_dw_evt_1_concurrent_events_get_distinct_sequence_numbers(app: Application) -> None:
    """DW-EVT-1: events sent concurrently each get their own acceptance number."""
    binding = app.register_workflow(Sleeper)
    instance = create(binding, "c")
    work(app)

    async def burst() -> None:
        await asyncio.gather(*(instance.send_event(type=f"t{n}") for n in range(20)))

    sync(burst())
    accepted = of_type(app, binding, "c", "event_accepted")
    assert sorted(e.data["seq"] for e in accepted) == list(range(1, 21))
    assert [e.data["seq"] for e in accepted] == list(range(1, 21))  # in journal order
    assert {e.data["type"] for e in accepted} == {f"t{n}" for n in range(20)}


def test_dw_evt_1_many_threads_sending_to_one_instance_are_all_accepted(
    app: Application,
) -> None:
    """DW-EVT-1 under contention: 16 threads sending 20 events each to one instance. A lost
    append race was retried 50 times without a pause, then refused backend_unavailable:
    29-36 of 320 events on a healthy store (found by a defect hunt, stop 35)."""
    binding = app.register_workflow(Sleeper)
    create(binding, "busy")
    work(app)
    refused: list[str] = []
    start, actor = threading.Barrier(16), binding._actor

    def sender(k: int) -> None:
        start.wait()
        for j in range(20):
            try:
                app.instances.send_event(binding.resource, "busy", f"t{k}", {"j": j}, actor)
            except BlackOpsError as error:
                refused.append(error.code)

    threads = [threading.Thread(target=sender, args=(k,)) for k in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert refused == []
    accepted = of_type(app, binding, "busy", "event_accepted")
    assert [e.data["seq"] for e in accepted] == list(range(1, 321))


def test_dw_evt_1_a_sender_that_always_loses_is_told_backend_unavailable(
    app: Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past a thousand lost races (pauses skipped here) the backoff's 2**lost overflowed a
    float: a traceback where `backend_unavailable` is due at the deadline (found by review,
    stop 35)."""
    import time

    from domain.errors import FencingError

    binding = app.register_workflow(Sleeper)
    create(binding, "busy")
    work(app)
    clock = iter(range(10**9))
    monkeypatch.setattr(time, "sleep", lambda seconds: None)
    monkeypatch.setattr(time, "monotonic", lambda: next(clock) / 50)  # 60 s: 3,000 tries

    def lose(*appends: Any) -> Any:
        raise FencingError("raced", 1)

    monkeypatch.setattr(app.instances.store, "append", lose)
    with pytest.raises(BlackOpsError) as refused:
        app.instances.send_event(binding.resource, "busy", "t", None, binding._actor)
    assert refused.value.code == "backend_unavailable"


@pytest.mark.parametrize(
    "event_type", ["", "x" * 257, "😀" * 257, "a\ud800", 7, None], ids=range(6)
)
def test_dw_evt_1_event_type_is_1_to_256_scalar_values(app: Application, event_type: Any) -> None:
    """DW-EVT-1 (D4): other types are refused and nothing is accepted."""
    binding = app.register_workflow(Sleeper)
    instance = create(binding, "e")
    code = error_code(instance.send_event(type=event_type))
    assert code in ("invalid_request", "invalid_params")
    assert of_type(app, binding, "e", "event_accepted") == []


def test_dw_evt_1_long_types_and_payload_validation(app: Application) -> None:
    """DW-EVT-1 / DW-DOC-5: a 256-scalar-value type is accepted; payloads follow the
    document rules (invalid_params, document_too_large) and refused ones leave no trace."""
    binding = app.register_workflow(Sleeper)
    instance = create(binding, "e")
    send(instance, "😀" * 256, {"ok": 1})
    assert error_code(instance.send_event(type="t", payload=[1])) == "invalid_params"
    assert error_code(instance.send_event(type="t", payload={"n": float("nan")})) == (
        "invalid_params"
    )
    big = {"a": "x" * MAX_BYTES}
    assert error_code(instance.send_event(type="t", payload=big)) == "document_too_large"
    wide = {f"k{n}": n for n in range(1025)}
    assert error_code(instance.send_event(type="t", payload=wide)) == "document_too_large"
    accepted = of_type(app, binding, "e", "event_accepted")
    assert [(e.data["type"], e.data.get("payload")) for e in accepted] == [("😀" * 256, {"ok": 1})]


# -- DW-EVT-2: terminal instances -------------------------------------------------------------


@pytest.mark.parametrize("how", ["complete", "errored", "terminated"])
def test_dw_evt_2_terminal_instances_refuse_events(app: Application, how: str) -> None:
    """DW-EVT-2: send_event to a terminal instance fails with instance_terminal."""
    cls = Thrower if how == "errored" else Echo
    instance = ended(app, cls, how)
    assert error_code(instance.send_event(type="late", payload={"a": 1})) == "instance_terminal"
    binding = app.workflow(cls.__name__)
    assert of_type(app, binding, instance.id, "event_accepted") == []


# -- DW-EVT-3: queue limits ---------------------------------------------------------------------


def test_dw_evt_3_d12_at_most_1024_unconsumed_events(app: Application) -> None:
    """DW-EVT-3 (D12): 1024 unconsumed events are held, the 1025th is event_queue_full
    and not accepted; an event handed directly to a waiting matching wait is not
    counted (only one such); a consumed event frees its place."""
    got: list[Any] = []

    class Queue:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            got.append(await step.wait_for_event("first", type="go", timeout_seconds=1000))
            got.append(await step.wait_for_event("second", type="other", timeout_seconds=1000))
            await step.sleep("hold", 100)

    binding = app.register_workflow(Queue)
    instance = create(binding, "q")
    work(app)
    assert status(instance) == {"status": "waiting"}
    service, actor = app.instances, binding._actor
    for n in range(MAX_EVENTS):
        service.send_event(binding.resource, "q", "other", {"n": n}, actor)
    assert error_code(instance.send_event(type="other", payload={"n": "x"})) == "event_queue_full"
    send(instance, "go", {"direct": True})  # D12: handed to the waiting wait at once
    assert error_code(instance.send_event(type="go")) == "event_queue_full"
    assert len(of_type(app, binding, "q", "event_accepted")) == MAX_EVENTS + 1
    work(app)
    assert got == [{"direct": True}, {"n": 0}]
    assert status(instance) == {"status": "sleeping"}
    send(instance, "other", {"n": "freed"})  # one place was freed by "second"
    assert error_code(instance.send_event(type="other")) == "event_queue_full"


def test_dw_evt_3_at_most_1_048_576_bytes_of_type_and_payload(app: Application) -> None:
    """DW-EVT-3: the stored ``{type, payload?}`` canonical UTF-8 bytes add up to at
    most 1,048,576; the event that would pass it is event_queue_full."""
    binding = app.register_workflow(Sleeper)
    instance = create(binding, "b")
    work(app)
    small = event_size("z")
    assert small == len(b'{"type":"z"}')
    big = payload_of_size("bulk", MAX_BYTES - small)
    send(instance, "bulk", big)
    send(instance, "z")  # exactly 1,048,576 bytes now
    assert error_code(instance.send_event(type="z")) == "event_queue_full"
    assert error_code(instance.send_event(type="y", payload={})) == "event_queue_full"
    assert len(of_type(app, binding, "b", "event_accepted")) == 2


def test_dw_evt_3_one_event_over_the_byte_limit_is_queue_full(app: Application) -> None:
    """DW-EVT-3: a single event whose ``{type, payload}`` exceeds 1,048,576 bytes is
    event_queue_full even on an empty queue, though its payload is a valid document;
    exactly 1,048,576 bytes is accepted."""
    binding = app.register_workflow(Sleeper)
    first, second = create(binding, "one"), create(binding, "two")
    work(app)
    over = payload_of_size("t", MAX_BYTES + 1)
    assert len(canonical_document(over)) <= MAX_BYTES
    assert error_code(first.send_event(type="t", payload=over)) == "event_queue_full"
    send(second, "t", payload_of_size("t", MAX_BYTES))
    assert of_type(app, binding, "one", "event_accepted") == []
    assert len(of_type(app, binding, "two", "event_accepted")) == 1


def test_dw_evt_3_d12_direct_handoff_passes_a_full_queue(app: Application) -> None:
    """DW-EVT-3 (D12): with the byte limit reached, an event a waiting matching wait
    takes at once is still accepted and consumed; others are not."""
    binding = app.register_workflow(Waiter)
    instance = create(binding, "d")
    work(app)
    send(instance, "filler", payload_of_size("filler", MAX_BYTES))
    assert error_code(instance.send_event(type="other")) == "event_queue_full"
    send(instance, "go", {"through": True})
    work(app)
    assert status(instance) == {"status": "complete", "output": {"got": {"through": True}}}
    completed = of_type(app, binding, "d", "completed")[0]
    assert completed.data["discarded_events"] == 1


# -- DW-EVT-4: unmatched events are purged on a terminal transition ----------------------------


@pytest.mark.parametrize("how", ["complete", "errored", "terminated"])
def test_dw_evt_4_unmatched_events_are_purged_on_terminal(
    app: Application, clock: FakeClock, how: str
) -> None:
    """DW-EVT-4: events nobody consumed are discarded with the terminal transition;
    the terminal event says how many, and nothing stays pending afterwards."""

    class Picky:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            await step.wait_for_event("w", type="wanted", timeout_seconds=100)
            if how == "errored":
                raise ValueError("after the wait")
            return {"done": True}

    binding = app.register_workflow(Picky)
    instance = create(binding, "p")
    work(app)
    for n in range(3):
        send(instance, "unwanted", {"n": n})
    send(instance, "wanted")
    if how == "terminated":
        sync(instance.terminate())
    else:
        work(app)
    assert status(instance)["status"] == how
    end = of_type(app, binding, "p", "completed" if how == "complete" else how)
    assert len(end) == 1
    expected = 4 if how == "terminated" else 3
    assert end[0].data["discarded_events"] == expected
    state = app.instances.load(binding.resource, "p")
    assert state.queue == []
    assert state.queued_count == 0 and state.queued_bytes == 0


# -- DW-TERM-1: terminate -----------------------------------------------------------------------


def test_dw_term_1_d13_terminate_a_queued_instance(app: Application) -> None:
    """DW-TERM-1 (D13): a queued instance is terminated at once; no context runs."""
    runs: list[str] = []

    class Never:
        def __init__(self, env: Any) -> None:
            runs.append("init")

        def run(self, event: Any, step: Any) -> Any:
            runs.append("run")

    binding = app.register_workflow(Never)
    instance = create(binding, "q")
    sync(instance.terminate())
    assert status(instance) == {"status": "terminated"}
    work(app)
    assert runs == []
    assert topics(app, binding, "q") == ["created", "terminated"]


def test_dw_term_1_terminate_a_sleeping_instance(app: Application, clock: FakeClock) -> None:
    """DW-TERM-1: the future continuation of a sleep is cancelled."""
    after: list[str] = []

    class Nap:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            await step.sleep("nap", 10)
            after.append("woke")

    binding = app.register_workflow(Nap)
    instance = create(binding, "s")
    work(app)
    sync(instance.terminate())
    assert status(instance) == {"status": "terminated"}
    clock.advance(3600)
    work(app)
    assert after == []
    assert contexts_started(app, binding, "s") == 1
    assert topics(app, binding, "s")[-1] == "terminated"


def test_dw_term_1_terminate_a_waiting_instance(app: Application, clock: FakeClock) -> None:
    """DW-TERM-1 / DW-EVT-2: a waiting instance ends; its wait is never served."""
    binding = app.register_workflow(Waiter)
    instance = create(binding, "w")
    work(app)
    sync(instance.terminate())
    assert error_code(instance.send_event(type="go")) == "instance_terminal"
    clock.advance(5000)
    work(app)
    assert status(instance) == {"status": "terminated"}
    assert contexts_started(app, binding, "w") == 1


def test_dw_term_1_terminate_during_a_retry_delay(app: Application, clock: FakeClock) -> None:
    """DW-TERM-1 (D1): a do waiting out its retry delay gets no further attempt."""
    attempts: list[int] = []

    class Retrying:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            def effect() -> None:
                attempts.append(1)
                raise RuntimeError("again")

            policy = {"maxAttempts": 5, "initialDelaySeconds": 30}
            await step.do("retry", effect, retry_policy=policy)

    binding = app.register_workflow(Retrying)
    instance = create(binding, "r")
    work(app)
    assert status(instance) == {"status": "running"}
    sync(instance.terminate())
    assert status(instance) == {"status": "terminated"}
    clock.advance(600)
    work(app)
    assert attempts == [1]


@pytest.mark.parametrize("how", ["complete", "errored", "terminated"])
def test_dw_term_1_terminate_a_terminal_instance_succeeds(app: Application, how: str) -> None:
    """DW-TERM-1: terminate() of a terminal instance succeeds and changes nothing."""
    cls = Thrower if how == "errored" else Echo
    instance = ended(app, cls, how)
    before = status(instance)
    binding = app.workflow(cls.__name__)
    recorded = len(history(app, binding, instance.id))
    sync(instance.terminate())
    sync(instance.terminate())
    assert status(instance) == before
    assert len(history(app, binding, instance.id)) == recorded


# -- DW-TERM-2: backend_unavailable -------------------------------------------------------------


def test_dw_term_2_an_unreachable_backend_is_backend_unavailable(clock: FakeClock) -> None:
    """DW-TERM-2: caller operations that cannot reach the store fail with
    backend_unavailable."""
    app = Application("postgresql://postgres@127.0.0.1:1/nowhere?connect_timeout=2", clock=clock)
    try:
        binding = app.register_workflow(Echo)
        assert error_code(binding.create(id="x")) == "backend_unavailable"
        assert error_code(binding.get("x")) == "backend_unavailable"
        instance = WorkflowInstance(binding, "x")
        assert error_code(instance.status()) == "backend_unavailable"
        assert error_code(instance.send_event(type="t")) == "backend_unavailable"
        assert error_code(instance.terminate()) == "backend_unavailable"
    finally:
        app.close()


# -- DW-RET-1: retention ------------------------------------------------------------------------


def test_dw_ret_1_d16_terminal_instances_are_kept_2_592_000_s(
    app: Application, clock: FakeClock
) -> None:
    """DW-RET-1 (D16): complete, errored and terminated instances keep their history and
    id for 2,592,000 s after the terminal transition; then the host purges them and
    ``get`` answers unknown_instance."""
    done = ended(app, Echo, "complete")
    failed = ended(app, Thrower, "errored")
    stopped = ended(app, Sleeper, "terminated")
    clock.advance(RETENTION - 1)
    work(app)
    for instance, cls in ((done, Echo), (failed, Thrower), (stopped, Sleeper)):
        binding = app.workflow(cls.__name__)
        assert sync(binding.get(instance.id)).id == instance.id
        assert status(instance)["status"] in ("complete", "errored", "terminated")
        assert error_code(binding.create(id=instance.id)) == "instance_exists"
    clock.advance(1)
    work(app)
    for instance, cls in ((done, Echo), (failed, Thrower), (stopped, Sleeper)):
        binding = app.workflow(cls.__name__)
        assert error_code(binding.get(instance.id)) == "unknown_instance"
        assert error_code(instance.status()) == "unknown_instance"
        assert error_code(instance.send_event(type="t")) == "unknown_instance"
        left = app.store.read_stream(instance_stream(binding.uid, instance.id))
        assert [e.type for e in left] == ["workflow.purged"]


def test_dw_ret_1_retention_counts_from_the_terminal_transition(
    app: Application, clock: FakeClock
) -> None:
    """DW-RET-1: an instance that ended late is kept 2,592,000 s from its end, not from
    its creation; a live instance is never purged."""
    binding = app.register_workflow(Sleeper)
    late = create(binding, "late")
    work(app)
    forever = create(app.register_workflow(Waiter), "forever")
    work(app)
    clock.advance(100)
    work(app)  # "late" completes 100 s after its creation
    assert status(late)["status"] == "complete"
    clock.advance(RETENTION - 1)
    work(app)
    assert status(late)["status"] == "complete"
    clock.advance(1)
    work(app)
    assert error_code(binding.get("late")) == "unknown_instance"
    # The waiter timed out after 1000 s (run_threw, uncaught WaitTimeout), long ago.
    assert status(forever)["status"] == "errored"


def test_dw_ret_1_live_instances_are_not_purged(app: Application, clock: FakeClock) -> None:
    """DW-RET-1: retention applies to terminal instances only."""

    class Long:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            await step.sleep("long", RETENTION * 2)
            return {"woke": True}

    binding = app.register_workflow(Long)
    instance = create(binding, "long")
    work(app)
    clock.advance(RETENTION + 10)
    work(app)
    assert status(instance) == {"status": "sleeping"}
    clock.advance(RETENTION)
    work(app)
    assert status(instance) == {"status": "complete", "output": {"woke": True}}


def test_dw_inst_3_dw_ret_1_a_purged_failure_is_unknown(app: Application, clock: FakeClock) -> None:
    """DW-INST-3 / DW-RET-1: after retention, a step_failed instance is unknown too."""
    binding = app.register_workflow(StepFails)
    instance = create(binding, "sf")
    work(app)
    assert status(instance)["error"]["reason"] == "step_failed"
    clock.advance(RETENTION)
    work(app)
    assert error_code(binding.get("sf")) == "unknown_instance"


def test_dw_term_1_terminate_a_running_context(app: Application) -> None:
    """DW-TERM-1 / DW-FENCE-1 (W3, W4): a running context is fenced; ``terminated`` is
    published, and terminate() succeeds, only after its code stopped; while the stop
    is not proven terminate() does not succeed (backend_unavailable) and the request
    stays in force. The stopped context's step result is never committed."""
    entered, release, requested = threading.Event(), threading.Event(), threading.Event()
    after: list[str] = []

    class Busy:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            def effect() -> dict[str, Any]:
                entered.set()
                release.wait(30)
                return {"done": True}

            await step.do("busy", effect)
            after.append("went on")
            return {"finished": True}

    binding = app.register_workflow(Busy)
    instance = create(binding, "b")
    app.instances.on_terminate.append(requested.set)
    worker = threading.Thread(target=work, args=(app,))
    worker.start()
    try:
        assert entered.wait(30)
        with pytest.raises(BlackOpsError) as unproven:
            app.instances.terminate(binding.resource, "b", binding._actor, timeout=0.2)
        assert unproven.value.code == "backend_unavailable"
        assert requested.is_set()
        assert status(instance) == {"status": "running"}  # not before the code stopped
        outcome: list[Any] = []

        def terminate() -> None:
            try:
                sync(instance.terminate())
                outcome.append("ok")
            except BaseException as error:  # report it to the test thread
                outcome.append(error)

        caller = threading.Thread(target=terminate)
        caller.start()
    finally:
        release.set()
        worker.join(30)
    caller.join(30)
    assert outcome == ["ok"]
    assert status(instance) == {"status": "terminated"}
    assert after == []
    assert of_type(app, binding, "b", "step_completed") == []
    assert topics(app, binding, "b")[-2:] == ["termination_requested", "terminated"]


def test_dw_evt_3_d12_only_the_event_a_wait_takes_is_uncounted(app: Application) -> None:
    """DW-EVT-3 (D12, W7): an event is exempt from the queue limits only if the waiting
    wait takes it. When a matching event arrived while the context was stopping, that
    one is already on its way to the wait; the next matching event stays queued and
    counts, and later waits still get the direct hand-off."""

    class Race:
        def __init__(self, env: Any) -> None:
            pass

        async def run(self, event: Any, step: Any) -> Any:
            first = await step.wait_for_event("first", type="go", timeout_seconds=100)
            second = await step.wait_for_event("second", type="go2", timeout_seconds=100)
            return {"first": first, "second": second}

    binding = app.register_workflow(Race)
    instance = create(binding, "r")
    engine = app.workflow_engine("stopping-owner")
    (held,), _ = engine.claim(10)

    class Host:
        def request(self, message: tuple[Any, ...]) -> tuple[Any, ...]:
            return engine.request([(held, message)])[0]

    end = run_context(held.plan, held.code.cls, held.code.env, Host())
    send(instance, "go", {"n": 1})  # arrives after the code stopped, before "waiting"
    engine.finish([(held, end)])
    assert status(instance) == {"status": "waiting"}
    first_size = event_size("go", {"n": 1})
    send(instance, "go", payload_of_size("go", MAX_BYTES - first_size))  # queue now full
    work(app)  # "first" takes {"n": 1}; the big event stays queued
    assert status(instance) == {"status": "waiting"}
    assert event_size("go", {"n": 2}) == first_size
    send(instance, "go", {"n": 2})  # the queue holds exactly 1,048,576 bytes again
    assert error_code(instance.send_event(type="z")) == "event_queue_full"
    send(instance, "go2", {"ok": True})  # handed to "second" directly (D12)
    work(app)
    assert status(instance) == {
        "status": "complete",
        "output": {"first": {"n": 1}, "second": {"ok": True}},
    }
