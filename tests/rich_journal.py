"""A journal with one of nearly everything in it, for tests that read every line of a real
export: operations of every outcome (Inline and Deferred, completed, rejected, failed, dead
letter, retried, redriven, held and released, purged with their Outcome Records), workflow
instances (complete, errored, terminated, waiting with events, purged after retention),
the control plane (Spaces, principals, roles, tokens issued and revoked, a Worker, Versions
uploaded, verified and deleted, a Deployment, a Workflow resource created, replaced and
deleted with its instances purged by digest) and chain-of-custody records (an export and a
checkpoint).

Everything runs in the test's process on a FakeClock (``app.work_until_idle``).
"""

from __future__ import annotations

import asyncio
import io
from typing import Any

from resource_helpers import (
    ACTOR,
    SPACE,
    bundle,
    create_workflow,
    deployed_worker,
    op_status,
    spec,
    upload,
    work,
)

from blackops import (
    Application,
    ExecutionContext,
    OperationRejected,
    Retention,
    Retryable,
    Supervision,
)
from blackops.testing import FakeClock
from domain.context import Actor
from replay.custody import export_with_manifest, record_checkpoint

DAY = 86_400.0


class Greeter:
    """A local workflow: waits for a ``name`` event (or throws when asked to)."""

    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> dict[str, Any]:
        params = event.params or {}
        if params.get("throw"):
            raise ValueError("asked to throw")
        got = await step.wait_for_event("name", type="name", timeout_seconds=1000)
        return {"hello": got}


def inline_runs(store_url: str, tenants: list[str]) -> None:
    """A small journal for tests that read it back: one completed Inline run of ``t.ok``
    (result ``{"n": n}``) per tenant given, in that order."""
    app = Application(store_url)

    @app.operation("t.ok")
    def ok(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        return {"n": params["n"]}

    for n, tenant in enumerate(tenants):
        app.run("t.ok", {"n": n}, actor="a", tenant=tenant)
    app.close()


def fill(app: Application, clock: FakeClock) -> dict[str, Any]:
    """Write the whole cast into ``app``'s (empty) journal; returns ids worth naming."""
    ids: dict[str, Any] = {}

    @app.operation("t.ok")
    def ok(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        return {"echo": params}

    @app.operation("t.reject")
    def reject(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        raise OperationRejected("business_rule", "no", "nein \u00e9\U0001f600")

    @app.operation("t.fail")
    def fail(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        raise RuntimeError("broken")

    @app.operation("t.dead", supervision=Supervision(max_attempts=2, exhausted="dead_letter"))
    def dead(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        raise Retryable("again")

    @app.operation("t.short", retention=Retention(journal_seconds=DAY))
    def short(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        return {"kept": "briefly"}

    @app.operation("t.outcome", retention=Retention(outcome_seconds=60))
    def outcome(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        return {"outcome": "kept briefly"}

    greeter = app.register_workflow(Greeter, uid="Greeter", space=SPACE)
    awkward = {"\u00e9": [1.5, -0.0, 1e21, 2**53 - 1, None, True], "z": {"a\u2028b": "\x00"}}
    traceparent = "00-0af7651916cd43dd8448eb211dcb319c-b7ad6b7169203331-01"

    # Operations of every ending, Inline and Deferred.
    ids["inline"] = app.run(
        "t.ok", awkward, actor="ana", tenant=SPACE, traceparent=traceparent
    ).operation_id
    ids["inline_rejected"] = app.run("t.reject", {}, actor="ana", tenant=SPACE).operation_id
    ids["inline_failed"] = app.run("t.fail", {}, actor="ana", tenant=SPACE).operation_id
    ids["deferred"] = app.submit("t.ok", awkward, actor="ana", tenant=SPACE, idempotency_key="k1")
    ids["rejected"] = app.submit("t.reject", {}, actor="ana", tenant=SPACE)
    ids["dead"] = app.submit("t.dead", {}, actor="bo", tenant="other")
    ids["short"] = app.submit("t.short", {}, actor="ana", tenant=SPACE)
    ids["held"] = app.submit("t.short", {"n": 2}, actor="ana", tenant=SPACE)
    ids["outcome"] = app.submit("t.outcome", {}, actor="ana", tenant=SPACE)
    work(app)
    ids["redriven"] = app.redrive(ids["dead"], actor="ops")
    app.hold(ids["held"], reason="audit", actor="ana")
    app.release(ids["held"], reason="done", actor=Actor("root", "system"))
    app.hold(ids["held"], reason="audit again", actor="ana")

    # Workflow instances: complete, errored, terminated, waiting (the first three are
    # purged after their retention, below; their ``-kept`` twins are not).
    async def instances(suffix: str) -> None:
        done = await greeter.create(id="done" + suffix)
        await app.work_until_idle()
        await done.send_event(type="name", payload={"who": "ana"})
        await greeter.create(id="throws" + suffix, params={"throw": True})
        stopped = await greeter.create(id="stopped" + suffix)
        await app.work_until_idle()
        await stopped.terminate()
        await app.work_until_idle()

    async def waiting() -> None:
        instance = await greeter.create(id="waiting \u00e9/%")
        await app.work_until_idle()
        await instance.send_event(type="other", payload={"n": 1})

    asyncio.run(instances(""))
    asyncio.run(waiting())

    # The control plane: access, a Worker, Versions, a Deployment, a Workflow resource.
    access = app.access
    context = app.access_context(Actor("root", "system"), "globex")
    access.create_space("globex", context)
    access.create_principal("gina", context)
    access.grant("gina", "globex", _role("reader"), context)
    token, record = access.issue_token("gina", context, label="ci", space="globex")
    access.revoke_token("gina", record["tokenId"], context)
    access.revoke("gina", "globex", context)
    deployed = deployed_worker(app)
    spare = upload(app, deployed.worker, bundle("spare"))
    work(app)
    app.control.delete_version(SPACE, spare, ACTOR)
    created = create_workflow(app, deployed.worker, "wf1")
    work(app)
    uid = created["resource"]["uid"]
    asyncio.run(app.workflow(uid).create(id="r1", params={"mode": "wait"}))
    work(app)
    app.control.replace_workflow(SPACE, uid, {"spec": spec(deployed.worker)}, ACTOR)
    work(app)
    deleting = app.control.delete_workflow(SPACE, uid, ACTOR)
    for _ in range(50):  # the delete fences, stops and purges the instance (R17)
        work(app)
        if op_status(app, deleting["operationId"]) == "completed":
            break
        clock.advance(1)
    ids["workflow_delete"] = deleting["operationId"]
    assert op_status(app, deleting["operationId"]) == "completed"

    # Retention: past an outcome's and a journal's retention, and an instance's 30 days.
    clock.advance(31 * DAY)
    report = app.purge(actor=Actor("root", "system"))
    ids["purge"] = report
    asyncio.run(instances("-kept"))

    # Chain of custody: an export with its manifest, and a checkpoint.
    export_with_manifest(
        app.store, io.BytesIO(), actor=Actor("auditor", "cli"), clock=clock, output_name="x"
    )
    record_checkpoint(app.store, actor=Actor("auditor", "cli"), clock=clock)
    del token
    return ids


def _role(name: str) -> Any:
    from domain.access import Role

    return Role.parse(name)
