"""What control-plane Operations do once accepted: the built-in handlers.

Each runs in a worker like any Deferred operation. ``install`` registers them on an
application under the reserved ``blackops.`` prefix.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import replace
from typing import Any

from blackops.control.abi_check import VERIFIER_TROUBLE, verify_abi
from blackops.control.base import (
    DEPLOYMENT_UPDATE,
    VERSION_DELETE,
    VERSION_VERIFY,
    WORKER_CREATE,
    WORKFLOW_CREATE,
    WORKFLOW_DELETE,
    WORKFLOW_REPLACE,
    workflow_uid,
)
from blackops.control.plane import ControlPlane
from blackops.control.provider import ResourceProvider
from blackops.ids import derived_id
from blackops.operations.handlers import HandlerSpec
from blackops.workflows.retention import finish_purges_of, purge_instance, stream_positions
from domain.context import Actor, ExecutionContext
from domain.errors import BackendUnavailable, FencingError
from domain.events import NewEvent
from domain.resources import Topic, check_name, minted_uid
from domain.supervision import OperationRejected, Retryable, Supervision
from journal.instances import load_instance
from journal.resources import (
    deployment_stream,
    load_deployment,
    load_name,
    load_version,
    load_workflow,
    name_stream,
    version_stream,
    worker_stream,
    workflow_stream,
)
from journal.store import Append, EventStore

log = logging.getLogger("blackops.control")


class StopNotProven(Retryable):
    """Some execution of the deleted Workflow has not provably stopped yet."""


class VerifierTrouble(Retryable):
    """The verifier crashed, timed out, could not start or answered nothing readable:
    not a verdict about the code (decisions R9), so never recorded as one."""


#: Reconciling keeps going (with backoff up to 15 s); a store error spends the budget.
RECONCILE = Supervision(
    max_attempts=1000,
    backoff="exponential",
    initial_delay_seconds=0.2,
    max_delay_seconds=15,
    retry_on=(BackendUnavailable,),
    exhausted="dead_letter",
)
#: DW-DEL-3: while stop is not proven the same Operation keeps reconciling, however long
#: the owner's lease (up to 86,400 s, P25); only other failures can exhaust it.
UNTIL_STOPPED = replace(RECONCILE, retry_always_on=(StopNotProven,))
#: DW-SPEC-7: verifier trouble is retried (backoff up to 5 minutes) until a verdict,
#: never recorded as one; meanwhile the Version is unverified (creates: resource_busy).
#: Other failures dead-letter after three, and the same content's upload redrives them.
VERIFY = Supervision(
    max_attempts=3,
    backoff="exponential",
    initial_delay_seconds=1,
    max_delay_seconds=300,
    retry_on=(BackendUnavailable,),
    exhausted="dead_letter",
    retry_always_on=(VerifierTrouble,),
)


def _ctx(ctx: ExecutionContext) -> dict[str, Any]:
    return ctx.to_dict()


def install(plane: ControlPlane, provider: ResourceProvider) -> None:
    """Register the built-in handlers on the plane's runtime (``blackops.*`` types)."""
    runtime = plane.runtime

    def at() -> str:
        return plane._at()

    def worker_create(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        space, name = params["space"], check_name(params["name"], "worker")
        uid = minted_uid("wk", derived_id("worker", ctx.operation_id))
        names = name_stream(space, "worker", name)
        claimed = load_name(plane.store, names)
        if claimed.holder is not None:
            raise OperationRejected("conflict", "name_taken", f"worker {name!r} exists")
        context, when = _ctx(ctx), at()
        data = {"uid": uid, "name": name, "space": space}
        try:
            plane.store.append(
                Append(
                    names,
                    claimed.version,
                    [NewEvent(Topic.NAME_CLAIMED, when, context, {"uid": uid})],
                ),
                Append(
                    worker_stream(uid), 0, [NewEvent(Topic.WORKER_CREATED, when, context, data)]
                ),
            )
        except FencingError:
            raise OperationRejected("conflict", "name_taken", f"worker {name!r} exists") from None
        return {"uid": uid, "name": name, "space": space}

    def version_verify(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        """DW-ABI-1 in an isolated process; only a verdict is recorded on the Version."""
        vid = params["version"]
        state = load_version(plane.store, vid)
        if state.verification is None:
            if state.deleted:  # nothing left to verify for: end the retries
                raise OperationRejected(
                    "conflict", "version_deleted", f"version {vid} was deleted unverified"
                )
            try:
                result = verify_abi(vid, state.modules, state.main)
            except OSError as error:  # no process or pipe for it: the machine's trouble
                raise VerifierTrouble(f"verifier could not start: {error}") from None
            # R9, DW-SPEC-7: the verifier's own failure is no verdict about the code; the
            # Version stays unverified while it is retried, however often that takes.
            if not result["loaded"] and str(result.get("error") or "").startswith(VERIFIER_TROUBLE):
                raise VerifierTrouble(str(result["error"]))
            event = NewEvent(Topic.VERSION_VERIFIED, at(), _ctx(ctx), {"result": result})
            with contextlib.suppress(FencingError):  # verified concurrently: first one stands
                plane.store.append(Append(version_stream(vid), state.version, [event]))
            state = load_version(plane.store, vid)
            if state.verification is None:  # the stream moved: not by a verdict
                if state.deleted:  # deleted while it was verified (was an AssertionError)
                    raise OperationRejected(
                        "conflict", "version_deleted", f"version {vid} was deleted unverified"
                    )
                raise Retryable(f"version {vid} changed while it was verified")
        classes = state.verification.get("classes", {})
        return {
            "version": vid,
            "loaded": state.verification.get("loaded"),
            "error": state.verification.get("error"),
            "classes": {name: bool(c.get("ok")) for name, c in classes.items()},
        }

    def version_delete(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        # Once every worker's allocation is newer than the delete, none picks the deleted
        # Version for a new context (found by a defect hunt: one did).
        provider.outlast_caches()
        return {"version": params["version"], "deleted": True}

    def deployment_update(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        """Apply allocation updates in the order they were accepted: this one and every
        earlier one still pending, in one append (a later update never loses to an
        earlier one that finished last)."""
        worker, mine = params["worker"], _origin(plane, ctx)
        for _ in range(20):
            deployment = load_deployment(plane.store, worker)
            if mine in deployment.pending:
                order = list(deployment.pending)  # acceptance order
                events = []
                for operation in order[: order.index(mine) + 1]:
                    allocation = deployment.pending[operation]
                    data: dict[str, Any] = {"operation": operation, "allocation": allocation}
                    dead = [
                        e["version"]
                        for e in allocation
                        if load_version(plane.store, e["version"]).deleted
                    ]
                    if operation != mine and plane._finished(operation):
                        kind, data = Topic.DEPLOYMENT_UPDATE_REFUSED, {**data, "ended": True}
                    elif dead:
                        kind, data = Topic.DEPLOYMENT_UPDATE_REFUSED, {**data, "deleted": dead}
                    else:
                        kind = Topic.DEPLOYMENT_ALLOCATED
                    events.append(NewEvent(kind, at(), _ctx(ctx), data))
                try:
                    plane.store.append(
                        Append(deployment_stream(worker), deployment.version, events)
                    )
                except FencingError:
                    continue
                deployment = load_deployment(plane.store, worker)
            refused = deployment.refused.get(mine)
            if refused is not None:
                raise OperationRejected(
                    "conflict", "version_deleted", f"version {refused[0]} was deleted"
                )
            # Completed only once no worker can still read the allocation it replaced: a
            # Version it dropped may then be deleted, and no new context picks it (a context
            # started 0.25 s later ran the deleted Version).
            provider.outlast_caches()
            return {
                "worker": worker,
                "allocation": params["allocation"],
                "active": deployment.allocation,
                "generation": deployment.generation,
            }
        raise Retryable("the deployment kept changing")

    def workflow_reconcile(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        """Create and replace: record that the generation is reconciled; from now on the
        resource is observed (DW-OBS-1) and Ready when its code allows (DW-SPEC-5)."""
        origin = _origin(plane, ctx)
        uid = params.get("uid") or workflow_uid(origin)
        for _ in range(20):
            state = load_workflow(plane.store, uid)
            if not state.exists or state.deleting:
                raise OperationRejected("conflict", "deleted", f"workflow {uid} was deleted")
            generation = next(
                (g for g, op in _generations(plane, uid) if op == origin),
                state.generation,
            )
            if state.reconciled_generation < generation:
                data = {"generation": generation, "operation": ctx.operation_id}
                event = NewEvent(Topic.WORKFLOW_RECONCILED, at(), _ctx(ctx), data)
                try:
                    plane.store.append(Append(workflow_stream(uid), state.version, [event]))
                except FencingError:
                    continue
                state = load_workflow(plane.store, uid)
            ready, reason = plane.readiness(state)
            return {"uid": uid, "generation": generation, "ready": ready, "reason": reason}
        raise Retryable("the workflow kept changing")

    def workflow_delete(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        """DW-DEL-2/3: fence every owner, prove every stop, purge everything of the UID,
        then record the deletion. Until stop is proven the same Operation retries."""
        uid = params["uid"]
        state = load_workflow(plane.store, uid)
        if state.deleted:
            return {"uid": uid, "deleted": True}
        if not state.deleting or state.space != ctx.tenant:
            raise OperationRejected("conflict", "not_deleting", f"workflow {uid} is not closed")
        actor = Actor(ctx.operation_id, "operation")
        purged = 0
        grace = False
        for _ in range(50):
            streams = _instance_streams(plane.store, uid)
            if not streams:
                if grace:
                    break
                # Once every worker's catalog is newer than the close, none can claim an
                # instance of this UID any more, and a create that raced the close purges
                # itself; one more scan then finds everything.
                provider.outlast_caches()
                grace = True
                continue
            unstopped = 0
            for stream in streams:
                instance = load_instance(plane.store, stream)
                if instance.purged or not instance.exists:
                    continue
                if not runtime.instances.advance_termination(instance, actor, "workflow_deleted"):
                    unstopped += 1
            if unstopped:
                raise StopNotProven(f"{unstopped} instance(s) of {uid} have not stopped yet")
            purged += _purge(plane, streams, actor)
        else:
            raise StopNotProven(f"instances of {uid} keep appearing")
        # A purge cut short between its tombstone and the deletion (its worker died) left
        # history that no index row lists any more: deleted before the DELETE succeeds.
        received = plane.store.read_stream(ctx.operation_id)[:1]
        finish_purges_of(plane.store, uid, received[0].position - 1 if received else 0)
        state = load_workflow(plane.store, uid)
        names = name_stream(state.space, "workflow", state.name)
        claim = load_name(plane.store, names)
        context, when = _ctx(ctx), at()
        appends = [
            Append(
                workflow_stream(uid),
                state.version,
                [
                    NewEvent(
                        Topic.WORKFLOW_DELETED,
                        when,
                        context,
                        {"operation": ctx.operation_id, "purged": purged},
                    )
                ],
            ),
        ]
        if claim.holder == uid:
            appends.append(
                Append(
                    names,
                    claim.version,
                    [NewEvent(Topic.NAME_RELEASED, when, context, {"uid": uid})],
                )
            )
        try:
            plane.store.append(*appends)
        except FencingError:
            raise StopNotProven("the workflow changed while it was deleted; trying again") from None
        return {"uid": uid, "deleted": True, "purgedInstances": purged}

    registrations = {
        WORKER_CREATE: (worker_create, None),
        VERSION_VERIFY: (version_verify, VERIFY),
        VERSION_DELETE: (version_delete, None),
        DEPLOYMENT_UPDATE: (deployment_update, RECONCILE),
        WORKFLOW_CREATE: (workflow_reconcile, RECONCILE),
        WORKFLOW_REPLACE: (workflow_reconcile, RECONCILE),
        WORKFLOW_DELETE: (workflow_delete, UNTIL_STOPPED),
    }
    for type_name, (fn, supervision) in registrations.items():
        spec = HandlerSpec.build(type_name, _in_own_space(fn), supervision)
        runtime.handlers.register(spec, builtin=True)


def _in_own_space(fn: Any) -> Any:
    """A control-plane operation acts in its own Space only (defence in depth: they are
    accepted only through ``ControlPlane``, which checks the caller's Space)."""

    def handler(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        if "space" in params and params["space"] != ctx.tenant:
            raise OperationRejected("authorization", "other_space", "not this operation's Space")
        result: dict[str, Any] = fn(ctx, params)
        return result

    handler.__name__ = getattr(fn, "__name__", "handler")
    return handler


def _origin(plane: ControlPlane, ctx: ExecutionContext) -> str:
    """The operation a redrive continues (``redrive_of``, followed back), else this one."""
    operation = ctx.operation_id
    for _ in range(100):
        first = plane.store.read_stream(operation)[:1]
        if not first or not first[0].data.get("redrive_of"):
            return operation
        operation = str(first[0].data["redrive_of"])
    return operation


def _generations(plane: ControlPlane, uid: str) -> list[tuple[int, str]]:
    """(generation, operation) of each create/replace of ``uid``."""
    found = []
    for event in plane.store.read_stream(workflow_stream(uid)):
        if event.type == Topic.WORKFLOW_ACCEPTED:
            found.append((1, str(event.data["operation"])))
        elif event.type == Topic.WORKFLOW_REPLACED:
            found.append((int(event.data["generation"]), str(event.data["operation"])))
    return found


def _instance_streams(store: EventStore, uid: str) -> list[str]:
    """Every unpurged instance of ``uid``: the due-work index holds a row for each (its
    wake-up or its retention timer) until it is purged."""
    return [row.operation_id for row in store.work_rows_of(f"workflow:{uid}")]


def _purge(plane: ControlPlane, streams: list[str], actor: Actor) -> int:
    """Purge stopped instances: a tombstone each, then their history (DW-DEL-2)."""
    store, clock = plane.store, plane.runtime.clock
    count = 0
    for stream in streams:
        instance = load_instance(store, stream)
        if instance.purged or not instance.exists:
            continue
        positions = stream_positions(store, stream)
        if purge_instance(
            store,
            clock,
            instance,
            positions,
            actor=actor.to_dict(),
            reason="workflow_deleted",
            by="delete",
        ):
            count += 1
        else:
            raise StopNotProven(f"instance {instance.instance_id!r} changed while it was purged")
    return count
