"""Regression tests for an independent review of the workflow engine (both stores where
a store matters): each proves one way accepted work or the stop-then-publish rule could
have been broken, and now is not."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from worker_fleet import Fleet, freeze, wait_for

from blackops import Application
from blackops.testing import FakeClock
from blackops.workflows.executor import WorkflowRunner
from blackops.workflows.in_process import run_due_contexts
from blackops.workflows.instances import InstanceService
from journal.instances import instance_stream

#: Real processes and servers against real leases: run on their own, after the rest.
pytestmark = pytest.mark.faults


class TwoWaits:
    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> dict[str, Any]:
        first = await step.wait_for_event("a", type="go", timeout_seconds=1000)
        second = await step.wait_for_event("b", type="go", timeout_seconds=1000)
        return {"a": first, "b": second}


def racing(app: Application, calls: int, call: Any) -> list[Any]:
    """``calls`` threads that all read the instance before any of them appends."""
    barrier = threading.Barrier(calls)
    original = InstanceService.load

    def load(self: InstanceService, resource: Any, instance_id: Any) -> Any:
        state = original(self, resource, instance_id)
        barrier.wait(timeout=10)
        return state

    results: list[Any] = []
    InstanceService.load = load  # type: ignore[method-assign]
    try:

        def run() -> None:
            try:
                results.append(call())
            except Exception as error:
                results.append(getattr(error, "code", repr(error)))

        threads = [threading.Thread(target=run) for _ in range(calls)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        InstanceService.load = original  # type: ignore[method-assign]
    return results


def test_two_identical_events_at_one_instant_are_two_events(store_url: str) -> None:
    """DW-EVT-1: each accepted event is durable with its own order, even when two callers
    send byte-identical events at the same clock instant (no P14 'our own commit' mix-up)."""
    clock = FakeClock()
    app = Application(store_url, clock=clock)
    binding = app.register_workflow(TwoWaits)
    inst = asyncio.run(binding.create(id="i"))
    asyncio.run(app.work_until_idle())
    sequences = racing(
        app,
        2,
        lambda: app.instances.send_event(binding.resource, "i", "go", {"n": 1}, binding._actor),
    )
    assert sorted(sequences) == [1, 2]
    asyncio.run(app.work_until_idle())
    assert asyncio.run(inst.status()) == {
        "status": "complete",
        "output": {"a": {"n": 1}, "b": {"n": 1}},
    }
    app.close()


def test_two_identical_creates_at_one_instant_one_wins(store_url: str) -> None:
    """DW-INST-2: identical creates (same id, params, actor, instant): exactly one wins."""
    app = Application(store_url, clock=FakeClock())
    binding = app.register_workflow(TwoWaits)
    results = racing(
        app,
        2,
        lambda: app.instances.create(binding.resource, "same", {"p": 1}, binding._actor),
    )
    assert sorted(results) == ["instance_exists", "same"]
    events = app.store.read_stream(instance_stream(binding.uid, "same"))
    assert [e.type for e in events] == ["workflow.created"]
    app.close()


class LeavesAThread:
    """Its effect starts a thread that outlives it (and the context)."""

    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> dict[str, Any]:
        out = Path(event.params["out"])

        def effect() -> dict[str, Any]:
            def tick() -> None:
                for _ in range(3000):  # ~60 s: still ticking however late the end is seen
                    with out.open("a") as handle:
                        handle.write("t\n")
                    time.sleep(0.02)

            threading.Thread(target=tick, daemon=True).start()
            return {"started": True}

        await step.do("start", effect)
        return {"done": True}


def test_an_end_is_published_only_after_threads_of_its_effects_stopped(
    store_url: str, tmp_path: Path
) -> None:
    """DW-FENCE-1: a context whose effect left a thread running is published complete only
    after its executor was killed: the thread's file never grows after that."""
    out = tmp_path / "ticks"
    app = Application(store_url)
    binding = app.register_workflow(LeavesAThread)
    inst = asyncio.run(binding.create(params={"out": str(out)}))
    runner = WorkflowRunner(app.workflow_engine("w1", lease_seconds=10), processes=1).start()
    try:
        wait_for(lambda: asyncio.run(inst.status())["status"] == "complete", 30, "completion")
        size = out.stat().st_size if out.exists() else 0
        time.sleep(1.0)  # a live thread writes every 20 ms: ~50 chances to show itself
        assert (out.stat().st_size if out.exists() else 0) == size
    finally:
        runner.stop(1)
        app.close()


class Holding:
    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> dict[str, Any]:
        hold, pids = Path(event.params["hold"]), Path(event.params["pids"])

        def effect() -> dict[str, Any]:
            with pids.open("a") as handle:
                handle.write(f"{os.getpid()}\n")
            while hold.exists():
                time.sleep(0.02)
            return {"pid": os.getpid()}

        result: dict[str, Any] = await step.do("held", effect)
        return result


def alive(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return False


def test_a_draining_worker_keeps_its_leases(store_url: str, tmp_path: Path) -> None:
    """DW-FENCE-1, DW-TERM-1: during a grace period longer than the lease, heartbeats go
    on, so no other worker claims a context whose code is still running."""
    hold, pids = tmp_path / "hold", tmp_path / "pids"
    hold.write_text("")
    app = Application(store_url)
    binding = app.register_workflow(Holding)
    asyncio.run(binding.create(params={"hold": str(hold), "pids": str(pids)}))
    # A 5 s lease: renewals every 0.5 s keep the executor's own deadline (0.8 of the
    # lease after the last renewal) 3.5 s ahead, so a loaded machine stalling a renewal
    # for 2 s does not stop the effect. The grace is far longer than the lease: the drain
    # ends early when the effect returns (``hold`` is removed in ``finally``).
    runner = WorkflowRunner(
        app.workflow_engine("w1", lease_seconds=5), processes=1, heartbeat_seconds=0.5
    ).start()
    stopping = threading.Thread(target=runner.stop, kwargs={"grace_seconds": 60})
    try:
        wait_for(lambda: pids.exists() and pids.read_text().strip() != "", 30, "the effect")
        first = int(pids.read_text().split()[0])
        # The lease as renewed before the drain: without heartbeats during the drain it
        # would end by then (plus at most one more renewal, 0.5 s later, before the
        # coordinator sees the stop).
        owned = [r for r in app.store.work_rows() if r.worker == "w1"]
        assert owned, "the worker holds no lease"
        lease_ends = max(r.due_at for r in owned) / 1_000_000
        stopping.start()
        wait_for(lambda: time.time() > lease_ends + 1.0, 60, "the first lease to end")
        helds, _ = app.workflow_engine("w2", lease_seconds=2).claim(10)
        assert alive(first)
        assert helds == []  # still leased by the draining worker
    finally:
        hold.unlink(missing_ok=True)
        if stopping.ident is None:  # failed before the drain began
            stopping.start()
        stopping.join(30)
        app.close()


def test_an_executor_stops_by_itself_when_its_coordinator_freezes(
    store_url: str, fleet: Fleet, tmp_path: Path
) -> None:
    """DW-FENCE-1: a worker frozen with SIGSTOP renews nothing; its executor exits at 0.8
    of the lease on its own, before another worker could claim the context."""
    hold, pids = tmp_path / "hold", tmp_path / "pids"
    hold.write_text("")
    app = Application(store_url)
    binding = app.register_workflow(Holding)
    asyncio.run(binding.create(params={"hold": str(hold), "pids": str(pids)}))
    worker = fleet.start(
        store_url, "A", app="test_accepted_work_survives_races:worker_app", lease=8.0, poll=0.1
    )
    try:
        wait_for(lambda: pids.exists() and pids.read_text().strip() != "", 60, "the effect")
        executor = int(pids.read_text().split()[0])
        freeze(worker, store_url)
        try:
            # The lease as the frozen worker last renewed it: until it ends, no other
            # worker may claim the context, so the executor must be gone before then.
            owned = [r for r in app.store.work_rows() if r.worker == worker.id]
            assert owned, "the frozen worker holds no lease"
            lease_ends = max(r.due_at for r in owned) / 1_000_000
            wait_for(lambda: not alive(executor), 20, "the executor to exit by itself")
            gone_at = time.time()
            # It exits at 0.8 of the lease after its last renewal, plus its watchdog's
            # 0.1 s tick: an 8 s lease leaves a loaded machine 1.5 s (4 s left 0.7 s).
            assert gone_at < lease_ends, f"gone {gone_at - lease_ends:.2f}s after the lease"
        finally:
            worker.signal(signal.SIGCONT)
    finally:
        app.close()


def test_terminate_in_this_process_waits_for_an_inline_context(tmp_path: Path) -> None:
    """DW-TERM-1 under work_until_idle: the effect cannot be killed, so terminate() waits
    for it to stop instead of trusting a lease (which is renewed while it runs)."""
    hold, pids = tmp_path / "hold", tmp_path / "pids"
    hold.write_text("")
    app = Application(f"sqlite:///{tmp_path}/j.db")
    binding = app.register_workflow(Holding)
    inst = asyncio.run(binding.create(params={"hold": str(hold), "pids": str(pids)}))
    engine = app.workflow_engine("inline", lease_seconds=1)
    running = threading.Thread(target=run_due_contexts, args=(engine,))
    running.start()
    wait_for(lambda: pids.exists() and pids.read_text().strip() != "", 30, "the effect")
    release = threading.Timer(2.5, hold.unlink)  # the effect ends after 2.5 leases
    began = time.monotonic()  # before the timer starts: a late main thread cannot shorten it
    release.start()
    asyncio.run(inst.terminate())
    assert not hold.exists()  # terminate returned only after the effect ended
    assert time.monotonic() - began >= 2.0
    assert asyncio.run(inst.status()) == {"status": "terminated"}
    running.join(30)
    app.close()


def test_a_purge_cut_short_is_finished_by_the_next_purge(any_store_url: str) -> None:
    """DW-RET-1: a crash between the tombstone and the deletion leaves history that the
    next batch purge deletes."""
    clock = FakeClock()
    app = Application(any_store_url, clock=clock)
    binding = app.register_workflow(TwoWaits)
    asyncio.run(binding.create(id="gone"))
    asyncio.run(app.work_until_idle())
    asyncio.run(asyncio.run(binding.get("gone")).terminate())
    clock.advance(2_592_000)
    original = app.store.delete_stream_events

    def crash(stream: str, upto_version: int) -> int:
        raise RuntimeError("crashed before deleting")

    app.store.delete_stream_events = crash  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        app.purge(actor={"id": "ops", "kind": "admin"})
    app.store.delete_stream_events = original  # type: ignore[method-assign]
    stream = instance_stream(binding.uid, "gone")
    assert [e.type for e in app.store.read_stream(stream)][-1] == "workflow.purged"
    assert len(app.store.read_stream(stream)) > 1  # the history is still there
    app.purge(actor={"id": "ops", "kind": "admin"})
    assert [e.type for e in app.store.read_stream(stream)] == ["workflow.purged"]
    app.close()


def _worker_app() -> Application:
    application = Application()
    application.register_workflow(Holding)
    return application


worker_app = _worker_app()  # ``blackops worker --app test_workflow_review_fixes:worker_app``
