"""``blackops demo``: a short tour of the lifecycle on a journal, in this process.

It runs, in order: an Inline operation that completes, one the handler rejects (OL-6), a
Deferred operation whose first attempt fails retryably and whose retry completes (OL-7,
with its typed Outcome Record), and a workflow instance that runs a step, sleeps, waits for
an event and completes; then it verifies the journal (every event against its Merkle leaf).
What each step recorded is returned as one report, and stays in the journal to look at.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from blackops.application import Application
from domain.context import ExecutionContext
from domain.errors import BlackOpsError
from domain.supervision import OperationRejected, Retryable, Supervision

ACTOR = "demo"
TENANT = "default"
#: How long the tour waits for what it started (a retry, a sleep) before it gives up.
DEADLINE_SECONDS = 30.0


class DemoOrder:
    """A workflow: price the order, wait a moment, wait for the approval, then confirm."""

    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> dict[str, Any]:
        order = (event.params or {}).get("order", "demo")
        quote = await step.do("price the order", lambda: {"total": 42})
        await step.sleep("a moment", 1)
        approval = await step.wait_for_event("approval", type="approved", timeout_seconds=60)
        by = approval.get("by") if approval else None
        return {"order": order, "total": quote["total"], "approved_by": by}


def demo_application(store: str | None) -> Application:
    """The demo's operations and workflow, on ``store`` (None: the default store)."""
    app = Application(store)
    attempts: dict[str, int] = {}

    @app.operation("demo.greet")
    def greet(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        name = params.get("name")
        if not isinstance(name, str) or not name:
            raise OperationRejected("validation", "name_missing", "say whom to greet")
        return {"greeting": f"hello, {name}"}

    @app.operation(
        "demo.flaky",
        supervision=Supervision(max_attempts=3, backoff="constant", initial_delay_seconds=0.05),
    )
    def flaky(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        attempts[ctx.operation_id] = attempts.get(ctx.operation_id, 0) + 1
        if attempts[ctx.operation_id] == 1:
            raise Retryable("the first attempt always times out")
        return {"attempt": ctx.attempt}

    app.register_workflow(DemoOrder)
    return app


async def tour(app: Application) -> dict[str, Any]:
    """Run every step of the tour on ``app`` (built by `demo_application`); the report."""
    from replay.verify import verify_store

    completed = app.run("demo.greet", {"name": "world"}, actor=ACTOR, tenant=TENANT)
    rejected = app.run("demo.greet", {}, actor=ACTOR, tenant=TENANT)
    deferred = app.submit("demo.flaky", {}, actor=ACTOR, tenant=TENANT)
    await _work_until(app, lambda: _done(app.status(deferred)["status"] == "completed"))

    instance = await app.workflow("DemoOrder").create(params={"order": "A-1"})
    await _work_until(app, lambda: _status_is(instance, "waiting"))
    await instance.send_event(type="approved", payload={"by": "ana"})
    await _work_until(app, lambda: _status_is(instance, "complete"))
    verified = verify_store(app.store)
    return {
        "store": app.store.location.display,
        "inline": _operation(app, completed.operation_id),
        "rejected": {
            **_operation(app, rejected.operation_id),
            "rejection": rejected.rejection.code if rejected.rejection else None,
        },
        "deferred": {**_operation(app, deferred), "outcome": app.outcome(deferred)},
        "workflow": {"instance": instance.id, **(await instance.status())},
        "journal": {"events": app.store.last_position(), "verified": verified.ok},
    }


def _operation(app: Application, operation_id: str) -> dict[str, Any]:
    status = app.status(operation_id)
    events = [event["type"] for event in app.events(operation_id)]
    return {"operationId": operation_id, "status": status["status"], "events": events}


async def _done(value: bool) -> bool:
    return value


async def _status_is(instance: Any, status: str) -> bool:
    """Whether ``instance`` is ``status`` now; an instance that ended otherwise fails the
    tour at once."""
    found: dict[str, Any] = await instance.status()
    if found.get("status") != status and found.get("status") in ("errored", "terminated"):
        raise BlackOpsError("internal_error", f"the demo's workflow ended {found}")
    return found.get("status") == status


async def _work_until(app: Application, done: Callable[[], Awaitable[bool]]) -> None:
    """Work what is due in this process until ``done()``; a stuck tour is an error."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    while True:
        await app.work_until_idle()
        if await done():
            return
        if time.monotonic() > deadline:
            raise BlackOpsError(
                "internal_error", f"the demo did not finish in {DEADLINE_SECONDS:.0f} s"
            )
        await asyncio.sleep(0.05)
