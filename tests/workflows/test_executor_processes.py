"""Workflow contexts in a worker's executor processes (real processes, both stores).

- effects run in executor processes, never in the worker's own process;
- an executor killed from outside: its context is proven stopped and runs again;
- ``contexts_per_process=1`` starts every context in a fresh process (no module state
  of an earlier context survives, DW-REPLAY-1), the default reuses executors;
- a worker stopped with contexts still running releases them at once to another worker.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from functools import partial
from pathlib import Path
from typing import Any

from in_time import wait_until

from blackops import Application

LEAK = {"n": 0}  # module state that workflow code must not rely on


class Leaky:
    """Non-conforming on purpose: it counts its contexts in module state."""

    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> dict[str, Any]:
        LEAK["n"] += 1
        seen = LEAK["n"]
        first = await step.do("first", lambda: {"seen": seen, "pid": os.getpid()})
        await step.sleep("pause", 1)
        second = await step.do("second", lambda: {"seen": seen, "pid": os.getpid()})
        return {"first": first, "second": second}


class Holding:
    """Its effect waits while ``params["hold"]`` exists and writes its pid first."""

    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> dict[str, Any]:
        hold = Path(event.params["hold"])
        pids = Path(event.params["pids"])

        def effect() -> dict[str, Any]:
            with pids.open("a") as out:
                out.write(f"{os.getpid()}\n")
            while hold.exists():
                time.sleep(0.02)
            return {"pid": os.getpid()}

        return await step.do("held", effect)  # type: ignore[no-any-return]


def run_leaky(store_url: str, contexts_per_process: int | None) -> dict[str, Any]:
    app = Application(store_url)
    binding = app.register_workflow(Leaky)
    worker = app.worker(
        workflow_processes=1, contexts_per_process=contexts_per_process, lease_seconds=5
    ).start()
    try:
        inst = asyncio.run(binding.create())
        wait_until(lambda: asyncio.run(inst.status())["status"] == "complete", 30, "completion")
        output: dict[str, Any] = asyncio.run(inst.status())["output"]
        return output
    finally:
        worker.stop(1)
        app.close()


def test_fresh_process_per_context_leaves_no_module_state(store_url: str) -> None:
    """DW-REPLAY-1 (strict mode), DW-ABI-2: every context starts from fresh module state."""
    output = run_leaky(store_url, contexts_per_process=1)
    assert output["first"]["seen"] == output["second"]["seen"] == 1
    assert output["first"]["pid"] != output["second"]["pid"] != os.getpid()
    assert LEAK["n"] == 0  # workflow code never ran in the worker's own process


def test_reused_executors_keep_module_state_which_is_why_code_must_not_use_it(
    store_url: str,
) -> None:
    """DW-REPLAY-1 (default mode): an executor runs one context after another, so module
    state written outside steps would survive; conforming code has none."""
    output = run_leaky(store_url, contexts_per_process=None)
    assert output["first"]["pid"] == output["second"]["pid"]
    assert output["second"]["seen"] == output["first"]["seen"] + 1


def test_an_executor_killed_from_outside_is_replaced_and_its_context_runs_again(
    store_url: str, tmp_path: Path
) -> None:
    """DW-DO-4, DW-FENCE-1: the killed context's effect runs again in a new executor;
    one result is committed."""
    hold, pids = tmp_path / "hold", tmp_path / "pids"
    hold.write_text("")
    app = Application(store_url)
    binding = app.register_workflow(Holding)
    worker = app.worker(workflow_processes=2, lease_seconds=3).start()
    try:
        inst = asyncio.run(binding.create(params={"hold": str(hold), "pids": str(pids)}))
        wait_until(lambda: pids.exists() and pids.read_text().strip() != "", 30, "the effect")
        first = int(pids.read_text().split()[0])
        os.kill(first, signal.SIGKILL)
        wait_until(lambda: len(pids.read_text().split()) >= 2, 30, "the effect to run again")
        hold.unlink()
        wait_until(lambda: asyncio.run(inst.status())["status"] == "complete", 30, "completion")
        output = asyncio.run(inst.status())["output"]
        assert output["pid"] != first
        stream = app.instances.load(binding.resource, inst.id).stream
        events = app.store.read_stream(stream)
        held = [e for e in events if e.type == "workflow.step_completed"]
        assert [e.data["name"] for e in held] == ["held"]
        contexts = [e for e in events if e.type == "workflow.context_started"]
        # A loaded machine may also let a 3 s lease lapse once (one more context start);
        # what must hold is that the kill was seen as a lost context, and one result.
        assert len(contexts) >= 2 and contexts[1].data["previous_lost"] is True
    finally:
        worker.stop(1)
        app.close()


def test_stopping_a_worker_hands_running_contexts_to_another_at_once(
    store_url: str, tmp_path: Path
) -> None:
    """A stopped worker kills what is still running after its grace period and releases
    the leases: another worker takes over well before the 30 s lease would end."""
    hold, pids = tmp_path / "hold", tmp_path / "pids"
    hold.write_text("")
    app = Application(store_url)
    binding = app.register_workflow(Holding)
    first = app.worker(workflow_processes=1, lease_seconds=30, worker_id="first").start()
    second = None
    try:
        inst = asyncio.run(binding.create(params={"hold": str(hold), "pids": str(pids)}))
        wait_until(lambda: pids.exists() and pids.read_text().strip() != "", 30, "the effect")
        began = time.monotonic()
        first.stop(0.2)
        hold.unlink()
        second = app.worker(workflow_processes=1, lease_seconds=30, worker_id="second").start()
        wait_until(lambda: asyncio.run(inst.status())["status"] == "complete", 20, "completion")
        assert time.monotonic() - began < 15
        stream = app.instances.load(binding.resource, inst.id).stream
        workers = [
            e.data["worker"]
            for e in app.store.read_stream(stream)
            if e.type == "workflow.context_started"
        ]
        assert workers == ["first", "second"]
    finally:
        if second is not None:
            second.stop(1)
        app.close()


def test_worker_options_for_workflows_are_checked_before_the_store_opens(tmp_path: Path) -> None:
    """Bad executor options are invalid_request and create no journal file."""
    import pytest

    from blackops import BlackOpsError

    path = tmp_path / "never.db"
    app = Application(f"sqlite:///{path}")
    app.register_workflow(Leaky)
    for options in ({"workflow_processes": 0}, {"contexts_per_process": 0}):
        with pytest.raises(BlackOpsError) as refused:
            app.worker(**options)
        assert refused.value.code == "invalid_request"
    assert not path.exists()


class Quick:
    """One step, done at once."""

    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> dict[str, Any]:
        return await step.do("only", lambda: {"n": event.params["n"]})  # type: ignore[no-any-return]


def is_complete(inst: Any) -> bool:
    return bool(asyncio.run(inst.status())["status"] == "complete")


def test_an_idle_runner_does_not_keep_looking_after_a_full_claim(store_url: str) -> None:
    """A claim that fills every executor may have left more due work, so the runner looks
    again when one frees up; that look, finding nothing due, settles it. (It used to stay
    pending: an idle runner then read the due-work index on every turn, ~10 queries per
    instance run one at a time.) The runner still claims work created afterwards."""
    app = Application(store_url)
    binding = app.register_workflow(Quick)
    worker = app.worker(workflow_processes=1, poll_seconds=60).start()
    runner = worker.workflows
    assert runner is not None
    try:
        for n in range(2):
            inst = asyncio.run(binding.create(params={"n": n}))
            wait_until(partial(is_complete, inst), 30, "the end")
            assert asyncio.run(inst.status())["output"] == {"n": n}
            # The end was committed in the turn that took the look after the full claim.
            assert runner._backlog is False
    finally:
        worker.stop(1)
        app.close()


def test_a_stopping_worker_claims_no_context_while_its_attempts_drain(
    store_url: str, tmp_path: Path
) -> None:
    """A stop begins both drains at once: an instance created while a Deferred attempt
    finishes within the grace is not started by this worker. The runner went on claiming
    until the attempts had drained, and then drained for a grace of its own."""
    import threading

    release = threading.Event()
    app = Application(store_url)

    @app.operation("t.held")
    def held(ctx: Any, params: dict[str, Any]) -> dict[str, Any]:
        release.wait(30)
        return {}

    binding = app.register_workflow(Quick)
    worker = app.worker(workflow_processes=1, grace_seconds=30, poll_seconds=0.05).start()
    try:
        operation = app.submit("t.held", {}, actor="ana", tenant="acme")
        wait_until(lambda: app.status(operation)["status"] == "running", 30, "the attempt")
        worker.request_stop()
        inst = asyncio.run(binding.create(params={"n": 1}))
        time.sleep(1.5)  # many of the runner's turns (poll 0.05 s)
        assert asyncio.run(inst.status())["status"] == "queued"
        release.set()
        assert worker.join(30)
        assert app.status(operation)["status"] == "completed"
        assert asyncio.run(inst.status())["status"] == "queued"
    finally:
        release.set()
        worker.stop(1)
        app.close()


def test_a_context_is_never_handed_over_later_than_its_claim_allows(store_url: str) -> None:
    """DW-TERM-1, DW-FENCE-1. A worker stalled between a claim's commit and the hand-off
    (SIGSTOP, a slow commit) gave the executor 0.8 x lease counted from the hand-off, so its
    code ran past the lease beside another worker's context, or after ``terminate()`` had
    returned (found by a defect hunt). The executor's deadline counts from the claim now,
    and a claim too old to run is released instead: here the first claim's cycle is stalled
    past 0.8 x lease, its plan is never sent, and the instance completes in a later context."""
    lease = 2.0
    app = Application(store_url)
    binding = app.register_workflow(Quick)
    worker = app.worker(workflow_processes=1, lease_seconds=lease, poll_seconds=0.05)
    runner = worker.workflows
    assert runner is not None
    real_cycle = runner.engine.cycle
    stalled: list[float] = []
    sent: list[tuple[int, float]] = []  # (context number, monotonic) of each plan sent

    def stalling_cycle(*args: Any, **kwargs: Any) -> Any:
        began = time.monotonic()
        answer = real_cycle(*args, **kwargs)
        if answer[1] and not stalled:  # the first claim: stall past 0.8 x lease
            stalled.append(began)
            time.sleep(0.85 * lease)
        return answer

    runner.engine.cycle = stalling_cycle  # type: ignore[method-assign]
    real_assign = runner._assign

    def recording_assign(executor: Any, held: Any, *claimed_at: float) -> None:
        send = executor.conn.send

        def recorded(message: Any) -> None:
            if message[0] == "run":
                sent.append((message[1].context, time.monotonic()))
            send(message)

        executor.conn.send = recorded
        try:
            real_assign(executor, held, *claimed_at)
        finally:
            executor.conn.send = send

    runner._assign = recording_assign  # type: ignore[method-assign,assignment]
    worker.start()
    try:
        inst = asyncio.run(binding.create(params={"n": 7}))
        wait_until(partial(is_complete, inst), 30, "the end")
        assert stalled, "the claim was never stalled"
        late = [(n, at - stalled[0]) for n, at in sent if at - stalled[0] >= 0.8 * lease]
        first = [n for n, _ in sent if n == 1]
        assert not first, f"the stalled claim's plan was sent: {sent}, late {late}"
        assert asyncio.run(inst.status())["output"] == {"n": 7}
    finally:
        worker.stop(1)
        app.close()


def test_a_stopped_runner_writes_nothing_when_asked_to_stop_again(tmp_path: Path) -> None:
    """A worker's stop asks its runner to stop again once it has (serve's second signal,
    ``worker.stop()`` after ``join()``): the runner's wake-up pipe was closed by then, and the
    wake-up byte went to whatever file had taken the descriptor since (found by review)."""
    from blackops.workflows.executor import WorkflowRunner

    runner = WorkflowRunner(engine=None)  # type: ignore[arg-type]  # never started
    runner.stop(0)
    opened = [os.open(tmp_path / f"f{n}", os.O_RDWR | os.O_CREAT) for n in range(2)]
    try:
        runner.request_stop(1)
        runner.wake()
    finally:
        for fd in opened:
            os.close(fd)
    assert [(tmp_path / f"f{n}").read_bytes() for n in range(2)] == [b"", b""]


class Finishing:
    """Effects that start processes which end before the effect does (one waited for, one
    left a zombie, one orphaned and ended): nothing of them runs at the context's end."""

    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> dict[str, Any]:
        def effect() -> dict[str, Any]:
            import subprocess

            subprocess.run(["true"], check=True)
            left = subprocess.Popen(["true"])  # never waited for: a zombie once it ends
            subprocess.run(["sh", "-c", "true & wait"], check=True)
            while Path(f"/proc/{left.pid}/stat").read_text().split(") ")[1][0] != "Z":
                time.sleep(0.01)
            return {"pid": os.getpid()}

        first = await step.do("first", effect)
        await step.sleep("pause", 1)
        second = await step.do("second", lambda: {"pid": os.getpid()})
        return {"first": first["pid"], "second": second["pid"]}


def test_processes_an_effect_started_and_saw_end_keep_its_executor(store_url: str) -> None:
    """W16: an executor is replaced at a context's end only when a process its effects
    started still runs; ended ones (waited for, zombies, orphans the executor adopted) do
    not count, so the next context runs in the same process."""
    app = Application(store_url)
    binding = app.register_workflow(Finishing)
    worker = app.worker(workflow_processes=1, lease_seconds=5).start()
    try:
        inst = asyncio.run(binding.create())
        wait_until(lambda: asyncio.run(inst.status())["status"] == "complete", 30, "completion")
        output = asyncio.run(inst.status())["output"]
        assert output["first"] == output["second"] != os.getpid()
    finally:
        worker.stop(1)
        app.close()
