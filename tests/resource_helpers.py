"""Helpers of the Workflow resource conformance tests (test_workflow_resources*.py).

Everything runs in the test's process on the fake clock: ``work(app)`` runs every due
control-plane operation (ABI verification included: one subprocess per Version) and
every due workflow context. One bundle (``bundle()``) carries every class the tests
need, so a test verifies as few Versions as it can.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest

from blackops import Application, BlackOpsError
from domain.context import Actor
from domain.events import RecordedEvent

T = TypeVar("T")

SPACE = "acme"
ACTOR = Actor("ana", "principal")
#: The seven statuses of DW-INST-4 / DW-OBS-1.
STATUSES = ("queued", "running", "sleeping", "waiting", "complete", "errored", "terminated")

#: The main module. ``Flow`` behaves by ``params.mode``: ``do`` (default: two steps that
#: record the Version's MARK), ``sleep`` (100 s), ``wait`` (for a ``go`` event),
#: ``throw``. ``Parent`` creates a child through its binding ``env.CHILD``. ``NoRun``
#: fails DW-ABI-1.
FLOWS = """\
import helpers


class Flow:
    def __init__(self, env):
        self.env = env

    async def run(self, event, step):
        params = event.params or {}
        mode = params.get("mode", "do")
        if mode == "sleep":
            await step.sleep("nap", 100)
        elif mode == "wait":
            got = await step.wait_for_event("go", type="go", timeout_seconds=1000)
            return {"got": got}
        elif mode == "throw":
            raise ValueError("boom")
        a = await step.do("a", lambda: {"mark": helpers.MARK})
        b = await step.do("b", lambda: {"mark": helpers.MARK})
        return {"a": a["mark"], "b": b["mark"], "mark": helpers.MARK}


class Parent:
    def __init__(self, env):
        self.env = env

    async def run(self, event, step):
        async def spawn():
            child = await self.env.CHILD.create(
                id="child-of-" + event.instance_id, params={"mode": "do"}
            )
            return {"child": child.id}

        made = await step.do("spawn", spawn)
        return {
            "child": made["child"],
            "greeting": self.env.GREETING,
            "binding": type(self.env.CHILD).__name__,
            "bound": self.env.CHILD.uid,
        }


class NoRun:
    def __init__(self, env):
        pass
"""


def bundle(mark: str = "one", **extra: Any) -> dict[str, Any]:
    """A Version bundle: modules ``flows`` (main) and ``helpers`` (``MARK = mark``)."""
    modules = {"flows": FLOWS, "helpers": f"MARK = {mark!r}\n"}
    return {"modules": modules, "main": "flows", **extra}


def sync(awaitable: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(awaitable)


def work(app: Application) -> None:
    """``work_until_idle`` at the fake clock's current time."""
    asyncio.run(app.work_until_idle())


def error_code(call: Callable[[], Any]) -> str:
    """The code of the BlackOpsError ``call`` raises (fails the test if it returns)."""

    def invoke() -> None:
        result = call()
        if asyncio.iscoroutine(result):
            sync(result)

    with pytest.raises(BlackOpsError) as caught:
        invoke()
    return caught.value.code


def op_status(app: Application, operation_id: str) -> str:
    return str(app.status(operation_id)["status"])


# -- Workers, Versions, Deployments -----------------------------------------------------------


def new_worker(app: Application, name: str = "w1", space: str = SPACE) -> str:
    return str(app.control.create_worker(space, name, ACTOR)["uid"])


def upload(app: Application, worker: str, body: dict[str, Any], space: str = SPACE) -> str:
    """Upload a Version (not verified until ``work``); returns its id."""
    return str(app.control.upload_version(space, worker, body, ACTOR)["version"])


def deploy(
    app: Application,
    worker: str,
    allocation: list[tuple[str, int]],
    *,
    key: str | None = None,
    space: str = SPACE,
    run: bool = True,
) -> str:
    """Accept an allocation update (and run it unless ``run=False``); its operation id."""
    entries = [{"version": v, "weight": w} for v, w in allocation]
    operation = str(
        app.control.update_deployment(space, worker, entries, ACTOR, key)["operationId"]
    )
    if run:
        work(app)
        assert op_status(app, operation) == "completed"
    return operation


@dataclass(frozen=True)
class Deployed:
    worker: str
    version: str


def deployed_worker(
    app: Application, name: str = "w1", space: str = SPACE, mark: str = "one"
) -> Deployed:
    """A Worker whose verified Version (``bundle(mark)``) is deployed at 100 %."""
    worker = new_worker(app, name, space)
    version = upload(app, worker, bundle(mark), space)
    work(app)
    assert app.control.version_in(space, version).verification is not None
    deploy(app, worker, [(version, 100)], space=space)
    return Deployed(worker, version)


# -- Workflow resources ---------------------------------------------------------------------


def spec(worker: str, class_name: str = "Flow") -> dict[str, Any]:
    return {"worker": {"resourceUid": worker}, "className": class_name}


def create_workflow(
    app: Application,
    worker: str,
    name: str = "wf1",
    class_name: str = "Flow",
    *,
    key: str | None = None,
    space: str = SPACE,
) -> dict[str, Any]:
    body = {"name": name, "spec": spec(worker, class_name)}
    return app.control.create_workflow(space, body, ACTOR, key)


def ready_workflow(
    app: Application,
    worker: str,
    name: str = "wf1",
    class_name: str = "Flow",
    *,
    space: str = SPACE,
) -> str:
    """A Workflow resource, reconciled and Ready; its UID."""
    view = create_workflow(app, worker, name, class_name, space=space)
    work(app)
    assert op_status(app, view["operationId"]) == "completed"
    uid = str(view["resource"]["uid"])
    assert app.control.get_workflow(space, uid)["observed"]["ready"] is True
    return uid


def observed(app: Application, uid: str, space: str = SPACE) -> dict[str, Any]:
    result: dict[str, Any] = app.control.get_workflow(space, uid)["observed"]
    return result


def counts(app: Application, uid: str, space: str = SPACE) -> dict[str, int]:
    result: dict[str, int] = observed(app, uid, space)["instanceCounts"]
    return result


def instance_rows(app: Application, uid: str) -> list[str]:
    """Streams of the due-work index rows of ``uid``'s instances."""
    return [r.operation_id for r in app.store.work_rows() if uid in r.operation_type]


def context_versions(events: list[RecordedEvent]) -> list[str]:
    """The Version each ``workflow.context_started`` of one instance recorded."""
    return [str(e.data["version"]) for e in events if e.type == "workflow.context_started"]
