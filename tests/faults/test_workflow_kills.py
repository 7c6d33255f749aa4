"""Workflow fault tests with real processes, on SQLite and PostgreSQL.

- SIGKILL a worker while a step effect runs: its executor dies with it, the step runs
  again in another worker (DW-DO-4 allows that), the history holds exactly one
  committed result for it, and the instance completes.
- Creates racing on many processes: exactly one wins (DW-INST-2).
- terminate() of a context whose effect never returns: when it returns, the status is
  terminated and the effect's process is gone (DW-TERM-1, DW-FENCE-1).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from private_postgres import PrivateServer, private_postgres  # noqa: F401 (fixture)
from worker_fleet import ROOT, TESTS, Fleet, wait_for
from workflow_fault_apps import build_app

from blackops import Application, BlackOpsError
from domain.events import RecordedEvent

#: Real processes and servers against real leases: run on their own, after the rest.
pytestmark = pytest.mark.faults

APP = "workflow_fault_apps:app"


@pytest.fixture
def wf_app(store_url: str) -> Iterator[Application]:
    application = build_app(store_url)
    try:
        yield application
    finally:
        application.close()


@pytest.fixture
def marker_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "wf-markers"
    folder.mkdir()
    return folder


def history(app: Application, instance_id: str) -> list[RecordedEvent]:
    binding = app.workflow("Blocking")
    return app.store.read_stream(app.instances.load(binding.resource, instance_id).stream)


def status(app: Application, instance_id: str) -> str:
    return str(app.instances.status(app.workflow("Blocking").resource, instance_id)["status"])


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead too: it runs no code.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def starts(folder: Path, instance_id: str) -> list[int]:
    # The pid from the name: the file exists a moment before its text is written.
    return sorted(int(p.name.split(".")[-2]) for p in folder.glob(f"{instance_id}.*.start"))


def test_sigkill_mid_effect_reruns_the_step_once_and_completes(
    wf_app: Application, fleet: Fleet, store_url: str, marker_dir: Path
) -> None:
    """DW-DO-4, DW-DO-3, DW-FENCE-1: a SIGKILLed worker's executor dies with it; the
    effect runs again elsewhere and exactly one result is committed for the step."""
    (marker_dir / "hold").write_text("")
    env = {"WF_MARKER_DIR": str(marker_dir)}
    instance = asyncio.run(wf_app.workflow("Blocking").create(id="killed"))
    first = fleet.start(store_url, "A", app=APP, lease=2.0, env=env)
    wait_for(lambda: len(starts(marker_dir, "killed")) == 1, 60, "the effect to start in A")
    [executor_pid] = starts(marker_dir, "killed")
    assert executor_pid != first.pid  # the effect runs in an executor process
    first.signal(9)
    first.wait_exit(10)
    wait_for(lambda: not alive(executor_pid), 10, "A's executor to die with A")
    (marker_dir / "hold").unlink()
    fleet.start(store_url, "B", app=APP, lease=2.0, env=env)
    wait_for(lambda: status(wf_app, instance.id) == "complete", 60, "completion in B")

    events = history(wf_app, instance.id)
    slow = [e for e in events if e.type == "workflow.step_completed" and e.data["name"] == "slow"]
    assert len(slow) == 1  # one committed result, though the effect ran twice
    assert len(starts(marker_dir, "killed")) == 2
    contexts = [e for e in events if e.type == "workflow.context_started"]
    assert [c.data["worker"] for c in contexts] == [first.id, fleet.workers[1].id]
    assert contexts[1].data["previous_lost"] is True
    assert contexts[1].data["fencing_token"] > contexts[0].data["fencing_token"]
    # The committed result is B's: A never committed after it was killed.
    assert slow[0].context["worker"] == fleet.workers[1].id
    output = wf_app.instances.status(wf_app.workflow("Blocking").resource, instance.id)
    assert output["output"]["slow_pid"] != executor_pid


def test_terminate_stops_a_never_returning_effect_in_another_process(
    wf_app: Application, fleet: Fleet, store_url: str, marker_dir: Path
) -> None:
    """DW-TERM-1, DW-FENCE-1: terminate() from this process returns once the worker in
    another process killed the executor; the effect's process is gone by then."""
    (marker_dir / "hold").write_text("")
    env = {"WF_MARKER_DIR": str(marker_dir)}
    binding = wf_app.workflow("Blocking")
    instance = asyncio.run(binding.create(id="stuck"))
    fleet.start(store_url, "A", app=APP, lease=30.0, env=env)
    wait_for(lambda: len(starts(marker_dir, "stuck")) == 1, 60, "the effect to start")
    [executor_pid] = starts(marker_dir, "stuck")
    began = time.monotonic()
    asyncio.run(instance.terminate())
    took = time.monotonic() - began
    assert not alive(executor_pid)
    assert asyncio.run(instance.status()) == {"status": "terminated"}
    assert took < 25  # the owner stopped it; nobody waited out the 30 s lease
    types = [e.type for e in history(wf_app, "stuck")]
    assert types[-2:] == ["workflow.termination_requested", "workflow.terminated"]
    assert history(wf_app, "stuck")[-1].data["stopped"] == "owner_stopped"


_RACER = textwrap.dedent(
    """
    import asyncio, sys, time
    from pathlib import Path
    from workflow_fault_apps import build_app
    app = build_app(sys.argv[1])
    go = Path(sys.argv[2])
    app.store  # open before the start signal
    Path(f"{go}.ready.{sys.argv[3]}").touch()
    while not go.exists():
        time.sleep(0.001)
    try:
        asyncio.run(app.workflow("Blocking").create(id="contested", params={"who": sys.argv[3]}))
        print("won")
    except Exception as error:
        print(getattr(error, "code", repr(error)))
    """
)


def test_creates_racing_on_many_processes_exactly_one_wins(
    wf_app: Application, store_url: str, tmp_path: Path
) -> None:
    """DW-INST-2: the journal's unique (stream, version) decides; the rest get
    instance_exists."""
    go = tmp_path / "go"
    path = os.pathsep.join([str(TESTS), str(ROOT), os.environ.get("PYTHONPATH", "")])
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", _RACER, store_url, str(go), str(n)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": path},
        )
        for n in range(6)
    ]
    try:

        def all_ready() -> bool:
            ended = [r for r in racers if r.poll() is not None]
            if ended:  # a racer that died before the start can never be ready: say why
                _, error = ended[0].communicate()
                raise AssertionError(f"a racer ended before the start: {error}")
            return len(list(tmp_path.glob("go.ready.*"))) == len(racers)

        wait_for(all_ready, 60, "every racer to open the store")
        go.write_text("")
        answers = [racer.communicate(timeout=60) for racer in racers]
    finally:  # never leave a racer waiting for a start that will not come
        for racer in racers:
            if racer.poll() is None:
                racer.kill()
                racer.communicate()
    results = [out.strip() for out, _ in answers]
    assert sorted(results) == ["instance_exists"] * 5 + ["won"], answers
    events = history(wf_app, "contested")
    assert [e.type for e in events] == ["workflow.created"]


@pytest.mark.faults
@pytest.mark.postgres
def test_workflows_ride_out_a_postgres_crash_and_commit_each_step_once(
    private_postgres: PrivateServer,  # noqa: F811
    fleet: Fleet,
) -> None:
    """DW-DO-3, DW-DO-4, DW-TERM-2: two workers ride out an immediate PostgreSQL shutdown.

    While it is down, create answers backend_unavailable; afterwards every instance
    created before or after completes, and each step has exactly one committed result.
    """
    server = private_postgres
    if not server.running:
        server.start()
    url = server.url(f"wfcrash_{os.getpid()}_{int(time.time())}")
    app = build_app(url)
    binding = app.workflow("Steady")
    try:
        before = [asyncio.run(binding.create()).id for _ in range(40)]
        for label in "AB":
            fleet.start(url, label, app=APP, lease=3.0, poll=0.2)

        def finished(ids: list[str]) -> int:
            return sum(
                app.instances.status(binding.resource, i)["status"] == "complete" for i in ids
            )

        wait_for(lambda: finished(before) >= 4, 60, "some instances to complete")
        done_at_crash = finished(before)
        server.stop("immediate")
        try:
            with pytest.raises(BlackOpsError) as refused:
                asyncio.run(binding.create())
            assert refused.value.code == "backend_unavailable"
            assert all(w.process.poll() is None for w in fleet.workers), "a worker died"
        finally:
            server.start()

        def reads_again() -> bool:
            try:
                app.instances.status(binding.resource, before[0])
            except BlackOpsError as error:
                if error.code != "backend_unavailable":
                    raise
                return False
            return True

        wait_for(reads_again, 60, "the store to answer again")
        assert done_at_crash < len(before), "the crash came too late: nothing was left to do"
        after = [asyncio.run(binding.create()).id for _ in range(10)]
        everything = before + after
        wait_for(
            lambda: finished(everything) == len(everything),
            120,
            "every instance to complete after the restart",
            fleet.report,
            interval=0.25,
        )
        for instance_id in everything:
            stream = app.instances.load(binding.resource, instance_id).stream
            names = [
                e.data["name"]
                for e in app.store.read_stream(stream)
                if e.type == "workflow.step_completed"
            ]
            assert names == ["one", "two", "three"], (instance_id, names)
            assert app.instances.status(binding.resource, instance_id)["output"] == {"total": 3}
        assert all(w.process.poll() is None for w in fleet.workers), "a worker died"
        fleet.stop_gracefully()
    finally:
        app.close()
