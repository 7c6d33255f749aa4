"""What workflow code receives is the journal's value, and its own copy (both stores).

``event.params``, a ``do``'s result and a wait's payload reach the code as the journal
holds them (decoded from canonical bytes) on the first run as on every replay, in process
and in executor processes alike, and each as a fresh object:

- code that changes a document it received changes nothing the engine folded, so no
  snapshot written from that fold, and no later replay, sees the change (in process the
  code and the engine share a thread, and once shared the objects);
- an integral float comes back as the int RFC 8785 records, so the first run computes what
  the replays compute and the replay checker accepts the unchanged class.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from in_time import wait_until
from workflow_cases import create, history, send, status, work

from blackops import Application, canonical_document
from blackops.testing import FakeClock, replay_histories
from domain.workflow import InstanceState, fold
from journal import instance_snapshots
from journal.store import EventStore

#: Steps between suspensions: enough that each suspension writes a snapshot.
FILLER = instance_snapshots.SNAPSHOT_EVERY + 6


class ChangesWhatItGets:
    """Changes every document it receives, then reads each again after a snapshot."""

    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> dict[str, Any]:
        params = dict(event.params)
        event.params["k"] = "changed"
        got = await step.do("a", lambda: {"n": 1})
        got["n"] = 999
        for i in range(FILLER):
            await step.do(f"before {i}", lambda: None)
        payload = await step.wait_for_event("go", type="go", timeout_seconds=3600)
        payload["by"] = "changed"
        for i in range(FILLER):
            await step.do(f"after {i}", lambda: None)
        await step.sleep("nap", 10)
        return {
            "params": params,
            "a": await step.do("a", lambda: {"n": -1}),
            "go": await step.wait_for_event("go"),  # replayed: its arguments are not used
        }


def snapshots_checked(monkeypatch: pytest.MonkeyPatch, written: list[tuple[bytes, bytes]]) -> None:
    """Record, for each snapshot written, its body and the body of the journal's own fold."""
    write = instance_snapshots.write

    def checked(store: EventStore, state: InstanceState) -> None:
        full = fold(state.stream, store.read_stream(state.stream))
        written.append((instance_snapshots.encode(state)[1], instance_snapshots.encode(full)[1]))
        write(store, state)

    monkeypatch.setattr(instance_snapshots, "write", checked)


def test_documents_changed_by_the_code_reach_no_snapshot_and_no_replay(
    app: Application, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DW-STEP-3 and the snapshot's promise (it never changes what a claim decides): the
    params, a result and a payload the code changed are replayed as recorded."""
    written: list[tuple[bytes, bytes]] = []
    snapshots_checked(monkeypatch, written)
    binding = app.register_workflow(ChangesWhatItGets)
    instance = create(binding, "c-1", {"k": "v"})
    work(app)
    assert status(instance) == {"status": "waiting"}
    send(instance, "go", {"by": "ana"})
    work(app)
    assert status(instance) == {"status": "sleeping"}
    clock.advance(11)
    work(app)
    assert status(instance) == {
        "status": "complete",
        "output": {"params": {"k": "v"}, "a": {"n": 1}, "go": {"by": "ana"}},
    }
    assert len(written) == 2  # at the wait and at the sleep: the next contexts folded them
    for snapshot, journal in written:
        assert snapshot == journal


class CallsOneNameTwice:
    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> dict[str, Any]:
        first = await step.do("a", lambda: {"n": 1, "list": [1]})
        first["n"] = 2
        first["list"].append(2)
        again = await step.do("a", lambda: {"n": -1})
        third = await step.do("a")  # a completed name needs no effect (DW-STEP-3)
        return {"first": first, "again": again, "fresh": again is not third}


def test_every_call_of_a_completed_name_returns_a_fresh_copy(app: Application) -> None:
    binding = app.register_workflow(CallsOneNameTwice)
    instance = create(binding, "t-1")
    work(app)
    assert status(instance) == {
        "status": "complete",
        "output": {
            "first": {"n": 2, "list": [1, 2]},
            "again": {"n": 1, "list": [1]},
            "fresh": True,
        },
    }


def spelled_by_python() -> dict[str, Any]:
    """Floats whose journal reading is not their Python value's type or spelling."""
    return {"x": 1.0, "zero": -0.0, "big": 2.0**60, "half": 0.5}


class Labels:
    """Labels its values on the first run, keeps those labels in a step, and labels the
    replayed values again after a sleep: the two must be equal."""

    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> dict[str, Any]:
        values = await step.do("price", spelled_by_python)
        labels = {key: repr(value) for key, value in values.items()}
        kept = await step.do("first run's labels", lambda: labels)
        await step.sleep("nap", 1)
        return {"first": kept, "replayed": labels}


#: What the journal records (RFC 8785): integral floats within the safe range are ints.
LABELS = {"x": "1", "zero": "0", "big": repr(2.0**60), "half": "0.5"}


def test_an_integral_float_is_the_recorded_int_on_the_first_run_in_process(
    app: Application, clock: FakeClock
) -> None:
    binding = app.register_workflow(Labels)
    instance = create(binding, "f-1")
    work(app)
    clock.advance(2)
    work(app)
    assert status(instance) == {
        "status": "complete",
        "output": {"first": LABELS, "replayed": LABELS},
    }


def test_an_integral_float_is_the_recorded_int_on_the_first_run_in_executors(
    store_url: str,
) -> None:
    app = Application(store_url)
    binding = app.register_workflow(Labels)
    worker = app.worker(workflow_processes=1, lease_seconds=5).start()
    try:
        instance = create(binding, "f-2")
        wait_until(lambda: status(instance)["status"] == "complete", 30, "completion")
        assert status(instance)["output"] == {"first": LABELS, "replayed": LABELS}
    finally:
        worker.stop(1)
        app.close()


class Price:
    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> dict[str, Any]:
        price = await step.do("price", lambda: {"x": 1.0})
        return {"label": f"{price['x']}"}


def test_the_replay_checker_accepts_the_unchanged_class(app: Application, tmp_path: Path) -> None:
    """The history's own code replays to the output it recorded: no output_changed, so
    ``blackops deploy --promote`` is not blocked by a float the effect returned."""
    binding = app.register_workflow(Price)
    instance = create(binding, "r-1")
    work(app)
    path = tmp_path / "r-1.jsonl"
    lines = [canonical_document(e.to_observed()) + b"\n" for e in history(app, binding, "r-1")]
    path.write_bytes(b"".join(lines))
    report = replay_histories(Price, path)
    assert report.compatible, report.human()
    assert status(instance) == {"status": "complete", "output": {"label": "1"}}
