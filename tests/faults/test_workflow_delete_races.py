"""DELETE of a Workflow resource with real worker processes (DW-DEL-2, DW-DEL-3).

Two ``blackops worker`` subprocesses run the instances of one Workflow resource; the
test process sets it up and deletes it while creates and events race the DELETE:

- every instance (queued, running an effect that never returns, sleeping, waiting)
  is fenced, physically stopped and purged; the Operation completes only then;
- a worker SIGKILLed while it owns running contexts: the DELETE still completes,
  proven by its lease running out, and never before that lease ends;
- no worker alive to prove anything: the DELETE is not a success; it completes once
  a worker runs again.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from resource_fault_apps import build_app
from worker_fleet import Fleet, WorkerProcess, freeze, wait_for

from blackops import Application, BlackOpsError
from domain.context import Actor
from domain.workflow import Topic
from journal.instances import instance_stream

#: Real processes and servers against real leases: run on their own, after the rest.
pytestmark = pytest.mark.faults

APP = "resource_fault_apps:app"
SPACE = "default"
ACTOR = Actor("ana", "principal")
LEASE = 3.0
#: The lease of workers a test freezes (SIGSTOP) while they own running contexts. The
#: DELETE proves their stop by this lease once it has passed since its first attempt
#: fenced them; their executors' watchdog ends the effects 0.8 of it after the last
#: renewal, so they stop 2.4 s or more before the DELETE can complete (2.9 s: the retries
#: come 0.2, 0.4, ... 6.4 s apart, the 7th 12.6 s after the 1st). Renewed every 4 s, the
#: leases end 8 s or more after the freeze: running the DELETE for 4 s while frozen keeps
#: seconds of slack. A paused process or a slow fsync breaks neither margin.
FROZEN_LEASE = 12.0
#: Executor processes per worker (``blackops worker``'s default).
EXECUTORS = 4

#: The Version's one module. ``run`` spins for 10 minutes in its effect, appending a
#: line to its file every 50 ms; ``sleep`` sleeps an hour; ``wait`` waits for "go";
#: ``quick`` completes at once.
SOURCE = """
import os
import time


def spin(path):
    end = time.monotonic() + 600
    while time.monotonic() < end:
        with open(path, "a") as out:
            out.write(f"{os.getpid()} {time.time()}\\n")
        time.sleep(0.05)
    return {"spun": True}


class Doomed:
    def __init__(self, env):
        self.env = env

    async def run(self, event, step):
        kind = event.params["kind"]
        if kind == "run":
            await step.do("spin", lambda: spin(event.params["file"]))
        elif kind == "sleep":
            await step.sleep("nap", 3600)
        elif kind == "wait":
            await step.wait_for_event("wait", type="go", timeout_seconds=3600)
        return {"kind": kind}
"""


@pytest.fixture
def rf_app(store_url: str) -> Iterator[Application]:
    application = build_app(store_url)  # the system clock: real workers run
    try:
        yield application
    finally:
        application.close()


def deploy(app: Application, others: tuple[str, ...] = ()) -> str:
    """Worker, Version (verified), Deployment at 100 %, Workflow "doomed" (Ready); its
    UID. ``others``: more Workflow resources of the same code, for bystanders."""
    plane = app.control
    worker = plane.create_worker(SPACE, "doomed-code", ACTOR)
    bundle = {"modules": {"doomed": SOURCE}, "main": "doomed"}
    version = plane.upload_version(SPACE, worker["uid"], bundle, ACTOR)
    app.control.work([version["operationId"]])
    allocation = [{"version": version["version"], "weight": 100}]
    deployed = plane.update_deployment(SPACE, worker["uid"], allocation, ACTOR, "deploy")
    app.control.work([deployed["operationId"]])
    spec = {"worker": {"resourceUid": worker["uid"]}, "className": "Doomed"}
    created = plane.create_workflow(SPACE, {"name": "doomed", "spec": spec}, ACTOR, "create")
    app.control.work([created["operationId"]])
    uid = str(created["resource"]["uid"])
    assert plane.get_workflow(SPACE, uid)["observed"]["ready"] is True
    for name in others:
        other = plane.create_workflow(SPACE, {"name": name, "spec": spec}, ACTOR, name)
        app.control.work([other["operationId"]])
    return uid


def workflow_named(app: Application, name: str) -> str:
    [found] = [w["uid"] for w in app.control.list_workflows(SPACE) if w["name"] == name]
    return str(found)


def status(app: Application, uid: str, instance_id: str) -> str:
    return str(app.instances.status(app.workflow(uid).resource, instance_id)["status"])


def sizes(files: list[Path]) -> list[int]:
    return [f.stat().st_size if f.exists() else 0 for f in files]


def at_seconds(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@dataclass
class Population:
    """The instances of the Workflow before its DELETE, by kind."""

    running: list[str] = field(default_factory=list)
    sleeping: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    queued: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)

    @property
    def everyone(self) -> list[str]:
        return self.running + self.sleeping + self.waiting + self.queued


def populate(app: Application, uid: str, folder: Path, fleet: Fleet) -> Population:
    """3 sleeping, 3 waiting, one running effect per executor of the fleet (so every
    executor is busy), then 3 more that stay queued."""
    resource = app.workflow(uid).resource
    found = Population()

    def create(instance_id: str, params: dict[str, Any]) -> str:
        return app.instances.create(resource, instance_id, params, ACTOR)

    found.sleeping = [create(f"sleep-{n}", {"kind": "sleep"}) for n in range(3)]
    found.waiting = [create(f"wait-{n}", {"kind": "wait"}) for n in range(3)]
    explain = fleet.report
    wait_for(
        lambda: (
            all(status(app, uid, i) == "sleeping" for i in found.sleeping)
            and all(status(app, uid, i) == "waiting" for i in found.waiting)
        ),
        60,
        "the sleepers and waiters to reach their state",
        explain,
    )
    runners = EXECUTORS * len(fleet.workers)
    found.files = [folder / f"run-{n}.txt" for n in range(runners)]
    found.running = [
        create(f"run-{n}", {"kind": "run", "file": str(path)}) for n, path in enumerate(found.files)
    ]
    wait_for(
        lambda: all(s > 0 for s in sizes(found.files)),
        60,
        "every effect to run (its file is written)",
        explain,
    )
    grown = sizes(found.files)
    wait_for(
        lambda: all(b > a for a, b in zip(grown, sizes(found.files), strict=True)),
        10,
        "every effect to keep running",
        explain,
    )
    assert all(status(app, uid, i) == "running" for i in found.running)
    found.queued = [create(f"queued-{n}", {"kind": "sleep"}) for n in range(3)]
    time.sleep(0.5)  # every executor is busy: nobody can take them
    assert all(status(app, uid, i) == "queued" for i in found.queued)
    return found


@dataclass
class Call:
    kind: str  # "create" | "event"
    target: str
    began: float
    ended: float = 0.0
    result: str = ""  # "ok", an error code, or "raised <type>: <message>"


class Racers:
    """Creates and events sent from threads while the DELETE goes on."""

    def __init__(self, app: Application, uid: str, targets: list[str]) -> None:
        self.app = app
        self.resource = app.workflow(uid).resource
        self.targets = targets
        self.calls: list[Call] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._creates, daemon=True),
            threading.Thread(target=self._events, daemon=True),
        ]

    def __enter__(self) -> Racers:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def _call(self, kind: str, target: str, fn: Any) -> None:
        call = Call(kind, target, time.monotonic())
        try:
            fn()
            call.result = "ok"
        except BlackOpsError as error:
            call.result = error.code
        except Exception as error:
            call.result = f"raised {type(error).__name__}: {error}"
        call.ended = time.monotonic()
        with self._lock:
            self.calls.append(call)

    def _creates(self) -> None:
        n = 0
        while not self._stop.is_set():
            instance_id = f"late-{n}"
            n += 1
            self._call(
                "create",
                instance_id,
                lambda i=instance_id: self.app.instances.create(
                    self.resource, i, {"kind": "sleep"}, ACTOR
                ),
            )
            time.sleep(0.01)

    def _events(self) -> None:
        n = 0
        while not self._stop.is_set():
            target = self.targets[n % len(self.targets)]
            n += 1
            self._call(
                "event",
                target,
                lambda t=target: self.app.instances.send_event(
                    self.resource, t, "noise", {"n": 1}, ACTOR
                ),
            )
            time.sleep(0.01)

    def accepted(self) -> list[Call]:
        with self._lock:
            return [c for c in self.calls if c.result == "ok"]

    def began_after(self, moment: float, kind: str) -> int:
        """How many calls of ``kind`` began after ``moment`` (monotonic) and ended."""
        with self._lock:
            return sum(1 for c in self.calls if c.kind == kind and c.began > moment)


def completed(app: Application, operation_id: str) -> bool:
    """The DELETE Operation completed; it must never end any other way."""
    view = app.status(operation_id)
    assert view["status"] not in ("failed", "dead_letter", "rejected"), view
    return bool(view["status"] == "completed")


def completed_at(app: Application, operation_id: str) -> float:
    """When the Operation completed (the journal's wall-clock time, epoch seconds)."""
    view = app.status(operation_id)
    assert view["status"] == "completed", view
    return at_seconds(str(view["updatedAt"]))


def check_gone(
    app: Application,
    resource: Any,
    ids: list[str],
    since: int,
    files: list[Path],
    done_at: float,
) -> None:
    """DW-DEL-2/3 once the DELETE completed: every effect stopped before it did, every
    instance is purged (its tombstone at most), no index row of the UID is left, the
    resource is gone, and nothing of those instances was committed after its tombstone
    (no late commit from a fenced owner)."""
    uid = resource.uid
    before = sizes(files)
    time.sleep(1.5)
    assert sizes(files) == before, "an effect still runs after the DELETE completed"
    for path in files:
        assert path.stat().st_mtime <= done_at + 0.01, f"{path.name} grew after completion"
    tombstones: dict[str, int] = {}
    for instance_id in ids:
        stream = instance_stream(uid, instance_id)
        events = app.store.read_stream(stream)
        assert [e.type for e in events] in ([], [Topic.PURGED]), (instance_id, events)
        if events:
            tombstones[stream] = events[0].position
        with pytest.raises(BlackOpsError) as gone:
            app.instances.load(resource, instance_id)
        assert gone.value.code in ("unknown_instance", "not_found")
    assert [r for r in app.store.work_rows() if uid in r.operation_type] == []
    with pytest.raises(BlackOpsError) as missing:
        app.control.get_workflow(SPACE, uid)
    assert missing.value.code == "not_found"
    streams = {instance_stream(uid, i) for i in ids}
    late = [
        (e.stream, e.type, e.position)
        for e in app.store.iter_after(since)
        if e.stream in streams and e.position > tombstones.get(e.stream, 0)
    ]
    assert late == [], "an event of a deleted instance was committed after its tombstone"


def running_rows(app: Application, uid: str, worker: WorkerProcess) -> list[Any]:
    return [
        r
        for r in app.store.work_rows()
        if r.operation_type == f"workflow:{uid}" and r.worker == worker.id
    ]


# -- the tests -----------------------------------------------------------------------------


def test_dw_del_2_delete_stops_and_purges_everything_while_creates_and_events_race(
    rf_app: Application, fleet: Fleet, store_url: str, tmp_path: Path
) -> None:
    """DW-DEL-2, DW-DEL-3: DELETE closes create/event at once, fences the owners of the
    running contexts (their executors are killed), ends the sleeping, waiting and queued
    instances without any terminate(), purges them all, and completes only then."""
    app = rf_app
    uid = deploy(app)
    for label in "AB":
        fleet.start(store_url, label, app=APP, lease=LEASE)
    population = populate(app, uid, tmp_path, fleet)
    resource = app.workflow(uid).resource
    since = app.store.last_position()
    with Racers(app, uid, population.waiting + population.running) as racers:
        wait_for(
            lambda: any(c.kind == "create" for c in racers.accepted()),
            30,
            "a create to go through before the DELETE",
        )
        began = time.monotonic()
        deleted = app.control.delete_workflow(SPACE, uid, ACTOR, "delete-1")
        accepted = time.monotonic()
        operation = str(deleted["operationId"])
        waited = wait_for(
            lambda: completed(app, operation), 45, "the DELETE to complete", fleet.report
        )
        finished = time.monotonic()
        wait_for(  # and they go on against the deleted resource
            lambda: all(racers.began_after(finished, kind) >= 6 for kind in ("create", "event")),
            30,
            "creates and events to go on after the DELETE completed",
        )
    done_at = completed_at(app, operation)
    created = [c.target for c in racers.accepted() if c.kind == "create"]
    check_gone(app, resource, population.everyone + created, since, population.files, done_at)

    after = [c for c in racers.calls if c.began > accepted]
    assert len(after) > 10, "nothing raced the DELETE"
    assert {c.result for c in after} <= {"not_found", "unknown_instance"}, [
        (c.kind, c.target, c.result) for c in after if c.result not in ("not_found",)
    ]
    assert {c.result for c in after if c.kind == "create"} == {"not_found"}
    overlapping = [c for c in racers.calls if c.began <= accepted]
    odd = [c for c in overlapping if c.result.startswith("raised")]
    assert odd == [], [(c.kind, c.target, c.result) for c in odd]
    assert created, "no create went through before the DELETE"
    print(f"DELETE accepted in {accepted - began:.2f}s, completed {waited:.2f}s later")


def test_dw_del_3_delete_waits_out_the_lease_of_a_sigkilled_owner(
    rf_app: Application, fleet: Fleet, store_url: str, tmp_path: Path
) -> None:
    """DW-DEL-3: the owner of running contexts is SIGKILLed just before its DELETE is
    accepted. Its executors die with it, but nothing can say so but its lease: the
    DELETE completes, and not before that lease has run out."""
    app = rf_app
    uid = deploy(app)
    for label in "AB":
        fleet.start(store_url, label, app=APP, lease=LEASE)
    population = populate(app, uid, tmp_path, fleet)
    resource = app.workflow(uid).resource
    victim = fleet.workers[0]
    assert len(running_rows(app, uid, victim)) == EXECUTORS
    since = app.store.last_position()
    victim.signal(signal.SIGKILL)
    killed = time.monotonic()
    victim.wait_exit(10)
    # The dead owner's leases, as it last renewed them: until then it might still run.
    # Read before the DELETE is accepted: the other worker starts on it at once, and its
    # first fencing takes the row away from the dead owner.
    owned = running_rows(app, uid, victim)
    assert len(owned) == EXECUTORS
    lease_ends = max(r.due_at for r in owned) / 1_000_000
    deleted = app.control.delete_workflow(SPACE, uid, ACTOR, "delete-1")
    operation = str(deleted["operationId"])
    waited = wait_for(lambda: completed(app, operation), 45, "the DELETE to complete", fleet.report)
    done_at = completed_at(app, operation)
    assert done_at >= lease_ends, "the DELETE completed before the dead owner's lease ended"
    check_gone(app, resource, population.everyone, since, population.files, done_at)
    print(
        f"DELETE completed {time.monotonic() - killed:.2f}s after the kill "
        f"({done_at - lease_ends:.2f}s after the lease ended; waited {waited:.2f}s)"
    )


def test_dw_del_3_delete_is_no_success_while_every_worker_is_stopped(
    rf_app: Application, fleet: Fleet, store_url: str, tmp_path: Path
) -> None:
    """DW-DEL-3: every worker is frozen (SIGSTOP): none can stop its contexts or say
    they stopped. Running the DELETE here for less than a lease does not complete it
    (it retries; the running instances are not purged); a worker started afterwards
    completes it once the frozen owners' leases have run out; their executors have
    stopped by themselves by then (their watchdog) even though the owners never woke."""
    app = rf_app
    uid = deploy(app)
    for label in "AB":
        fleet.start(store_url, label, app=APP, lease=FROZEN_LEASE)
    population = populate(app, uid, tmp_path, fleet)
    resource = app.workflow(uid).resource
    since = app.store.last_position()
    freeze(fleet.workers, store_url)
    frozen = time.monotonic()
    # The frozen owners' leases as they last renewed them, read before the DELETE's first
    # attempt fences them: the earliest moment their stop could be proven by a lease.
    owned = [r for worker in fleet.workers for r in running_rows(app, uid, worker)]
    assert len(owned) == len(population.running)
    first_lease_end = min(r.due_at for r in owned) / 1_000_000
    deleted = app.control.delete_workflow(SPACE, uid, ACTOR, "delete-1")
    operation = str(deleted["operationId"])
    with pytest.raises(BlackOpsError) as unproven:
        app.control.work([operation], timeout=4)
    assert unproven.value.code == "backend_unavailable"
    view = app.status(operation)
    assert view["status"] == "retry_scheduled", view
    assert view["attempt"] >= 2  # it ran, could not prove the stop, and retries
    # All that within the owners' leases: its last attempt ended before any of them did.
    assert at_seconds(str(view["updatedAt"])) < first_lease_end, (view, first_lease_end)
    for instance_id in population.running:
        assert app.store.read_stream(instance_stream(uid, instance_id))[0].type != Topic.PURGED
    fleet.start(store_url, "C", app=APP, lease=LEASE)
    wait_for(lambda: completed(app, operation), 45, "the DELETE to complete", fleet.report)
    done_at = completed_at(app, operation)
    requested = at_seconds(str(view["createdAt"]))
    assert done_at >= requested + FROZEN_LEASE
    check_gone(app, resource, population.everyone, since, population.files, done_at)
    print(f"DELETE completed {time.monotonic() - frozen:.2f}s after the freeze")


# -- what the DELETE does not withstand (product bugs, see the reasons) --------------------


class StallingGate:
    """Wraps ``app.instances.gate``: once armed, the next caller that passes the gate
    stops right after it until released, like a thread descheduled between the check
    and its append (a GC pause, a slow connection)."""

    def __init__(self, app: Application) -> None:
        self.gate = app.instances.gate
        assert self.gate is not None
        self.armed = threading.Event()
        self.inside = threading.Event()
        self.release = threading.Event()
        app.instances.gate = self

    def __call__(self, resource: Any, action: str) -> None:
        assert self.gate is not None
        self.gate(resource, action)
        if self.armed.is_set():
            self.armed.clear()
            self.inside.set()
            self.release.wait(60)


def stalled_call(gate: StallingGate, fn: Any) -> tuple[threading.Thread, list[str]]:
    """Run ``fn`` in a thread that stops right after the gate; its result ("ok", an
    error code, or what it raised) lands in the returned list."""
    result: list[str] = []

    def run() -> None:
        try:
            fn()
            result.append("ok")
        except BlackOpsError as error:
            result.append(error.code)
        except Exception as error:
            result.append(f"raised {type(error).__name__}: {error}")

    gate.armed.set()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert gate.inside.wait(30), "the call never passed the gate"
    return thread, result


def test_dw_del_2_a_create_that_passed_the_gate_before_the_delete_is_purged_too(
    rf_app: Application, fleet: Fleet, store_url: str
) -> None:
    """DW-DEL-2: a create racing the DELETE is either refused (not_found) or purged
    with the rest; an instance of a deleted Workflow never survives."""
    app = rf_app
    uid = deploy(app)
    resource = app.workflow(uid).resource
    fleet.start(store_url, "A", app=APP, lease=LEASE)
    gate = StallingGate(app)
    thread, result = stalled_call(
        gate,
        lambda: app.instances.create(resource, "straggler", {"kind": "sleep"}, ACTOR),
    )
    deleted = app.control.delete_workflow(SPACE, uid, ACTOR, "delete-1")
    operation = str(deleted["operationId"])
    wait_for(lambda: completed(app, operation), 45, "the DELETE to complete", fleet.report)
    gate.release.set()
    thread.join(30)
    stream = instance_stream(uid, "straggler")
    survivors = [e.type for e in app.store.read_stream(stream) if e.type != Topic.PURGED]
    rows = [r.operation_id for r in app.store.work_rows() if uid in r.operation_type]
    assert (result, survivors, rows) == (["not_found"], [], []) or (survivors, rows) == ([], [])


def test_dw_del_2_an_event_that_passed_the_gate_before_the_delete_is_refused(
    rf_app: Application, fleet: Fleet, store_url: str
) -> None:
    """DW-DEL-2: an event racing the DELETE of its instance is refused as not found
    (``not_found`` or ``unknown_instance``), never an internal error."""
    app = rf_app
    uid = deploy(app)
    resource = app.workflow(uid).resource
    app.instances.create(resource, "target", {"kind": "sleep"}, ACTOR)  # queued: no worker
    gate = StallingGate(app)
    thread, result = stalled_call(
        gate, lambda: app.instances.send_event(resource, "target", "noise", None, ACTOR)
    )
    deleted = app.control.delete_workflow(SPACE, uid, ACTOR, "delete-1")
    operation = str(deleted["operationId"])
    fleet.start(store_url, "A", app=APP, lease=LEASE)  # it runs the DELETE
    wait_for(lambda: completed(app, operation), 45, "the DELETE to complete", fleet.report)
    gate.release.set()
    thread.join(30)
    assert result in (["not_found"], ["unknown_instance"])
    assert [e.type for e in app.store.read_stream(instance_stream(uid, "target"))] == [Topic.PURGED]


def test_dw_del_4_a_worker_frozen_across_the_delete_runs_other_workflows_afterwards(
    rf_app: Application, fleet: Fleet, store_url: str, tmp_path: Path
) -> None:
    """DW-DEL-3, DW-DEL-4: the only worker is frozen (SIGSTOP) while it owns running
    contexts; the DELETE (run here) completes once its leases ran out. When the worker
    wakes up, its stale contexts can commit nothing, and it goes on running the
    instances of another Workflow resource (no cascade)."""
    app = rf_app
    uid = deploy(app, others=("bystander",))
    other = app.workflow(workflow_named(app, "bystander")).resource
    resource = app.workflow(uid).resource
    worker = fleet.start(store_url, "A", app=APP, lease=FROZEN_LEASE)
    files = [tmp_path / f"run-{n}.txt" for n in range(EXECUTORS)]
    ids = [
        app.instances.create(resource, f"run-{n}", {"kind": "run", "file": str(p)}, ACTOR)
        for n, p in enumerate(files)
    ]
    wait_for(lambda: all(s > 0 for s in sizes(files)), 60, "the effects to run", fleet.report)
    since = app.store.last_position()
    freeze(worker, store_url)
    deleted = app.control.delete_workflow(SPACE, uid, ACTOR, "delete-1")
    operation = str(deleted["operationId"])
    app.control.work([operation], timeout=45)
    done_at = completed_at(app, operation)
    worker.signal(signal.SIGCONT)
    app.instances.create(other, "after", {"kind": "quick"}, ACTOR)
    wait_for(
        lambda: app.instances.status(other, "after")["status"] == "complete",
        20,
        "the woken worker to run another workflow's instance",
        fleet.report,
    )
    # Awake long enough to have tried to commit its stale contexts' ends: it did so in the
    # cycle that claimed "after".
    check_gone(app, resource, ids, since, files, done_at)
    assert "workflow runner stopped" not in worker.output()
