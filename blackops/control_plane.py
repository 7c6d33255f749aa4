"""The control plane: Workers, Versions, Deployments and Workflow resources (spec §1).

Every mutation is an Operation with the OL lifecycle. What a caller asks is checked
before any side effect (DW-SPEC-1..7, DW-CRUD-2, DW-DEL-1); then the operation's
Received/Accepted and the aggregate events that make the request visible (a name
claimed, a UID reserved, a Deployment update pending, a DELETE closing the resource)
are appended in **one** transaction. The work that follows (ABI verification,
applying an allocation, reconciling, fencing and purging) runs in a worker as the
operation's handler (``blackops/control_handlers.py``). With an Idempotency-Key the
operation id is derived from it, so a retried request finds the same Operation and
is never pre-rejected afterwards (DW-SPEC-7 last rule, DW-DEL-5).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from blackops.bundles import check_bundle
from blackops.ids import derived_id
from blackops.inline import InlineRunner, received_data
from blackops.workflow_code import WorkflowResource
from domain.clock import format_instant
from domain.context import Actor
from domain.documents import canonical_document
from domain.errors import (
    BackendUnavailable,
    Conflict,
    DependencyConflict,
    FencingError,
    InvalidRequest,
    NotFound,
    ResourceBusy,
)
from domain.events import NewEvent
from domain.lifecycle import TERMINAL, EventType, Mode
from domain.operation import Operation
from domain.resources import (
    VERSION_ID,
    DeploymentState,
    Topic,
    VersionState,
    WorkflowResourceState,
    check_allocation,
    check_bindings,
    check_env,
    check_name,
    check_workflow_spec,
    is_uid,
    minted_uid,
    version_id,
    weighted,
)
from journal.operations import OperationJournal, pending_append
from journal.resources import (
    catalog_change,
    deployment_stream,
    load_deployment,
    load_name,
    load_version,
    load_worker,
    load_workflow,
    name_stream,
    version_stream,
    workflow_stream,
)
from journal.store import Append, EventStore

if TYPE_CHECKING:
    from blackops.application import Application

#: Built-in operation types (the ``blackops.`` prefix is reserved for them).
WORKER_CREATE = "blackops.worker.create"
VERSION_VERIFY = "blackops.version.verify"
VERSION_DELETE = "blackops.version.delete"
DEPLOYMENT_UPDATE = "blackops.deployment.update"
WORKFLOW_CREATE = "blackops.workflow.create"
WORKFLOW_REPLACE = "blackops.workflow.replace"
WORKFLOW_DELETE = "blackops.workflow.delete"
_RACES = 20


def workflow_uid(operation_id: str) -> str:
    """The UID a Workflow create reserves: derived from its operation (decisions R7)."""
    return minted_uid("wf", derived_id("workflow", operation_id))


def _event(kind: str, at: str, context: dict[str, Any], data: dict[str, Any]) -> NewEvent:
    return NewEvent(kind, at, context, data)


class ControlPlane:
    """Checks, acceptance and reads of the control-plane resources of one application."""

    def __init__(self, app: Application) -> None:
        self.app = app

    @property
    def store(self) -> EventStore:
        return self.app.store

    def _at(self) -> str:
        return format_instant(self.app.clock.now())

    # -- acceptance ------------------------------------------------------------------------

    def accept(
        self,
        type_name: str,
        params: dict[str, Any],
        *,
        space: str,
        actor: Actor,
        key: str | None,
        effects: Callable[[dict[str, Any]], list[Append]],
        operation_id: str | None = None,
    ) -> str:
        """Received + Accepted of a Deferred built-in operation and ``effects(context)``
        in one transaction. ``effects`` reads fresh state on every try and raises the
        pre-rejection (before any side effect) when the request cannot be accepted."""
        from blackops.application import check_idempotency_key

        key = check_idempotency_key(key)
        spec = self.app.handler(type_name)
        canonical = canonical_document(params)
        if operation_id is None and key is not None:
            operation_id = derived_id("idempotency", space, type_name, key)
        ctx = self.app._context(
            type_name, actor, space, None, None, None, operation_id=operation_id
        )
        data = received_data(spec, ctx, canonical, Mode.DEFERRED)
        if key:
            data["idempotency_key"] = key
        context = ctx.to_dict()
        for _ in range(_RACES):
            existing = self.store.read_stream(ctx.operation_id)[:1]
            if existing:
                # The same request again: the same Operation, whatever happened since.
                if canonical_document(existing[0].data.get("params")) != canonical:
                    raise Conflict(
                        f"operation {ctx.operation_id} was already submitted with this key "
                        "and a different request"
                    )
                return ctx.operation_id
            appends = effects(context)
            operation = Operation(ctx.operation_id)
            at = self._at()
            operation.record(EventType.RECEIVED, at, context, data)
            operation.record(EventType.ACCEPTED, at, context, {})
            try:
                self.store.append(pending_append(operation), *appends)
            except FencingError:
                continue  # a concurrent change: decide again on fresh state
            return ctx.operation_id
        raise ResourceBusy("the resource kept changing; try again")

    def _replay(self, space: str, type_name: str, key: str) -> bool:
        """Whether ``key`` already names an Operation: then only ``accept`` answers it
        (same request: that Operation; another: ``conflict``), no check runs again."""
        from blackops.application import check_idempotency_key

        check_idempotency_key(key)
        return bool(self.store.read_stream(derived_id("idempotency", space, type_name, key))[:1])

    def operation_view(self, operation_id: str, **extra: Any) -> dict[str, Any]:
        status = self.app.status(operation_id)
        location = f"/v1/operations/{operation_id}"
        return {
            "operationId": operation_id,
            "status": status["status"],
            "location": location,
            **extra,
        }

    def _finished(self, operation_id: str) -> bool:
        operation = OperationJournal(self.store).load(operation_id)
        return operation.state in TERMINAL or operation.purged

    # -- Workers ---------------------------------------------------------------------------

    def create_worker(self, space: str, name: str, actor: Actor) -> dict[str, Any]:
        """A Worker (a named code unit) in ``space``; an Inline operation."""
        check_name(name, "worker")
        if load_name(self.store, name_stream(space, "worker", name)).holder is not None:
            raise Conflict(f"a worker named {name!r} already exists in space {space!r}")
        # Inline, through the runner itself: ``app.run`` refuses the built-in types.
        params = canonical_document({"space": space, "name": name})
        ctx = self.app._context(WORKER_CREATE, actor, space, None, None, None)
        runner = InlineRunner(OperationJournal(self.store), self.app.clock)
        result = runner.run(self.app.handler(WORKER_CREATE), params, ctx)
        if result.rejection is not None:
            raise Conflict(result.rejection.message or "the worker was not created")
        if result.failure is not None:
            raise BackendUnavailable(result.failure.message)
        assert result.outcome is not None
        return {**result.outcome, "operationId": result.operation_id}

    def worker_in(self, space: str, uid: str) -> dict[str, Any]:
        """DW-SPEC-4: a Worker of this Space, by UID only (never by name, DW-SPEC-6)."""
        if not is_uid(uid, "wk"):
            raise NotFound(f"no worker {str(uid)[:128]!r} in space {space!r}")
        worker = load_worker(self.store, uid)
        if not worker.exists or worker.space != space:
            raise NotFound(f"no worker {uid!r} in space {space!r}")
        return worker.view()

    def workers(self, space: str) -> list[dict[str, Any]]:
        found = []
        for event in self.store.read_topics([Topic.WORKER_CREATED]):
            if event.data["space"] == space:
                found.append(load_worker(self.store, event.data["uid"]).view())
        return found

    # -- Versions --------------------------------------------------------------------------

    def upload_version(
        self,
        space: str,
        worker_uid: str,
        bundle: dict[str, Any],
        actor: Actor,
    ) -> dict[str, Any]:
        """Record an immutable, content-addressed Version and accept its ABI verification
        (a Deferred operation) in one transaction. The same content again is the same
        Version and the same verification (idempotent by content)."""
        self.worker_in(space, worker_uid)
        if type(bundle) is not dict:
            raise InvalidRequest("a Version is an object")
        allowed = {"modules", "main", "env", "workflowBindings"}
        unknown = sorted(str(k)[:64] for k in bundle if k not in allowed)
        if unknown:
            raise InvalidRequest(f"unknown Version keys: {', '.join(unknown)}")
        modules, main = bundle.get("modules"), bundle.get("main")
        check_bundle(modules, main)
        assert isinstance(modules, dict) and isinstance(main, str)
        env = check_env(bundle.get("env"))
        bindings = check_bindings(bundle.get("workflowBindings"), env)
        self._bound_workflows(space, bindings)
        content = {
            "worker": worker_uid,
            "space": space,
            "main": main,
            "modules": modules,
            "env": env,
            "workflowBindings": bindings,
        }
        vid = version_id(content)

        def effects(context: dict[str, Any]) -> list[Append]:
            state = load_version(self.store, vid)
            if state.exists:
                return []
            at = self._at()
            event = _event(Topic.VERSION_UPLOADED, at, context, {"id": vid, **content})
            appends = [Append(version_stream(vid), 0, [event])]
            # Each bound Workflow records the binding at the version read, so a DELETE
            # accepted meanwhile makes this fail and be checked again (DW-DEL-1).
            for bound in self._bound_workflows(space, bindings):
                data = {"version": vid}
                appends.append(
                    Append(
                        workflow_stream(bound.uid),
                        bound.version,
                        [_event(Topic.WORKFLOW_BOUND, at, context, data)],
                    )
                )
            return appends

        operation_id = self.accept(
            VERSION_VERIFY,
            {"version": vid},
            space=space,
            actor=actor,
            key=None,
            effects=effects,
            operation_id=derived_id("verify", vid),
        )
        return self.operation_view(operation_id, version=vid, worker={"resourceUid": worker_uid})

    def _bound_workflows(
        self, space: str, bindings: list[dict[str, Any]]
    ) -> list[WorkflowResourceState]:
        found: list[WorkflowResourceState] = []
        for binding in bindings:
            uid = binding["resource"]["resourceUid"]
            bound = load_workflow(self.store, uid)
            if not bound.exists or bound.space != space or bound.deleting:
                raise InvalidRequest(
                    f"binding {binding['name']!r} names no Workflow {uid!r} in space {space!r}"
                )
            if all(b.uid != uid for b in found):
                found.append(bound)
        return found

    def version_in(self, space: str, vid: str) -> VersionState:
        if type(vid) is not str or not VERSION_ID.fullmatch(vid):
            raise NotFound(f"no version {str(vid)[:80]!r} in space {space!r}")
        state = load_version(self.store, vid)
        if not state.exists or state.space != space:
            raise NotFound(f"no version {vid!r} in space {space!r}")
        return state

    def versions(self, space: str, worker_uid: str) -> list[dict[str, Any]]:
        self.worker_in(space, worker_uid)
        found = []
        for event in self.store.read_topics([Topic.VERSION_UPLOADED]):
            if event.data["worker"] == worker_uid:
                found.append(load_version(self.store, event.data["id"]).view())
        return found

    def delete_version(self, space: str, vid: str, actor: Actor, key: str | None) -> dict[str, Any]:
        """A Version leaves the Worker: refused while any allocation (active or pending)
        weighs it, so the code of a running context is never taken away."""
        state = self.version_in(space, vid)

        def effects(context: dict[str, Any]) -> list[Append]:
            current = self.version_in(space, vid)
            if current.deleted:
                raise NotFound(f"version {vid} is deleted")
            deployment = load_deployment(self.store, state.worker)
            pending = [a for op, a in deployment.pending.items() if not self._finished(op)]
            allocations = [deployment.allocation, *pending]
            if any(e["version"] == vid for a in allocations for e in a):
                raise DependencyConflict(
                    f"version {vid} is in the Deployment of worker {state.worker} (active or "
                    "pending); change the allocation first"
                )
            at = self._at()
            event = _event(Topic.VERSION_DELETED, at, context, {"version": vid})
            # Also on the Deployment's stream, at the version read: an update accepted
            # meanwhile makes this fail and be checked again.
            marker = _event(Topic.DEPLOYMENT_VERSION_REMOVED, at, context, {"version": vid})
            return [
                Append(version_stream(vid), current.version, [event]),
                Append(deployment_stream(state.worker), deployment.version, [marker]),
            ]

        operation_id = self.accept(
            VERSION_DELETE, {"version": vid}, space=space, actor=actor, key=key, effects=effects
        )
        return self.operation_view(operation_id, version=vid)

    # -- Deployments -----------------------------------------------------------------------

    def update_deployment(
        self,
        space: str,
        worker_uid: str,
        allocation: object,
        actor: Actor,
        key: str | None,
    ) -> dict[str, Any]:
        """Accept an allocation update (an operation); until it finishes it is pending,
        and DW-SPEC-7's create check looks at it too."""
        entries = check_allocation(allocation)
        if key is not None and self._replay(space, DEPLOYMENT_UPDATE, key):
            return self.operation_view(
                self.accept(
                    DEPLOYMENT_UPDATE,
                    {"worker": worker_uid, "allocation": entries},
                    space=space,
                    actor=actor,
                    key=key,
                    effects=lambda _: [],
                ),
                worker={"resourceUid": worker_uid},
            )
        self.worker_in(space, worker_uid)
        for entry in entries:
            version = self.version_in(space, entry["version"])
            if version.worker != worker_uid or version.deleted:
                raise InvalidRequest(
                    f"version {entry['version']} is not a live Version of worker {worker_uid}"
                )

        def effects(context: dict[str, Any]) -> list[Append]:
            deployment = load_deployment(self.store, worker_uid)
            data = {"operation": context["operation_id"], "allocation": entries}
            event = _event(Topic.DEPLOYMENT_UPDATE_ACCEPTED, self._at(), context, data)
            return [Append(deployment_stream(worker_uid), deployment.version, [event])]

        operation_id = self.accept(
            DEPLOYMENT_UPDATE,
            {"worker": worker_uid, "allocation": entries},
            space=space,
            actor=actor,
            key=key,
            effects=effects,
        )
        return self.operation_view(operation_id, worker={"resourceUid": worker_uid})

    def deployment(self, space: str, worker_uid: str) -> dict[str, Any]:
        self.worker_in(space, worker_uid)
        state = load_deployment(self.store, worker_uid)
        pending = [
            {"operationId": op, "allocation": allocation}
            for op, allocation in state.pending.items()
            if not self._finished(op)
        ]
        return {
            "worker": {"resourceUid": worker_uid},
            "allocation": state.allocation,
            "generation": state.generation,
            "pending": pending,
        }

    # -- Workflow resources ----------------------------------------------------------------

    def check_dependencies(self, space: str, spec: dict[str, Any]) -> DeploymentState:
        """DW-SPEC-4 and DW-SPEC-7, before any side effect.

        The Worker must be this Space's (by UID). Every Version weighted by the active
        allocation or by an accepted, unfinished update must have a class ``className``
        that passes DW-ABI-1: an established mismatch is ``dependency_conflict``; a
        Version whose verification has not finished is ``resource_busy`` (never called
        a mismatch). No Deployment at all, active or pending: allowed.

        Returns the Deployment as examined: the accepting transaction appends to its
        stream at that version, so an update accepted meanwhile makes it fail and the
        check run again (an update is never missed).
        """
        worker_uid = spec["worker"]["resourceUid"]
        try:
            self.worker_in(space, worker_uid)
        except NotFound:
            raise InvalidRequest(
                f"spec.worker.resourceUid {worker_uid[:128]!r} is not a Worker of space "
                f"{space!r} (DW-SPEC-4)"
            ) from None
        deployment = load_deployment(self.store, worker_uid)
        concerned = set(weighted(deployment.allocation))
        for operation_id, allocation in deployment.pending.items():
            if not self._finished(operation_id):
                concerned.update(weighted(allocation))
        class_name = spec["className"]
        mismatched, unverified = [], []
        for vid in sorted(concerned):
            verdict = load_version(self.store, vid).abi(class_name)
            if verdict is None:
                unverified.append(vid)
            elif not verdict:
                mismatched.append(vid)
        if mismatched:
            raise DependencyConflict(
                f"version {mismatched[0]} of worker {worker_uid} has no class {class_name!r} "
                "with a callable run (DW-ABI-1, DW-SPEC-7)"
            )
        if unverified:
            raise ResourceBusy(
                f"version {unverified[0]} of worker {worker_uid} is still being verified; "
                "try again shortly (DW-SPEC-7)"
            )
        return deployment

    def _attach(
        self, deployment: DeploymentState, uid: str, spec: dict[str, Any], context: dict[str, Any]
    ) -> Append:
        """``deployment.workflow_attached``: the Workflow that was checked against this
        Deployment, appended at the version the check read (DW-SPEC-7 atomicity)."""
        data = {"workflow": uid, "className": spec["className"]}
        event = _event(Topic.DEPLOYMENT_ATTACHED, self._at(), context, data)
        return Append(deployment_stream(deployment.worker), deployment.version, [event])

    def create_workflow(
        self, space: str, body: object, actor: Actor, key: str | None
    ) -> dict[str, Any]:
        """DW-CRUD-1: reserve a UID and an empty instance ID space (an Operation)."""
        if type(body) is not dict:
            raise InvalidRequest('the body must be {"name": ..., "spec": {...}}')
        unknown = sorted(str(k)[:64] for k in body if k not in ("name", "spec"))
        if unknown or "spec" not in body or "name" not in body:
            raise InvalidRequest(
                'the body must be exactly {"name": ..., "spec": {...}}'
                + (f" (unknown: {', '.join(unknown)})" if unknown else "")
            )
        name = check_name(body["name"], "workflow")
        spec = check_workflow_spec(body["spec"])
        params = {"space": space, "name": name, "spec": spec}
        # With a key already used, ``accept`` answers its Operation before any check:
        # an accepted Operation is never turned into a pre-rejection (DW-SPEC-7).

        def effects(context: dict[str, Any]) -> list[Append]:
            operation_id = context["operation_id"]
            uid = workflow_uid(operation_id)
            names = name_stream(space, "workflow", name)
            claimed = load_name(self.store, names)
            if claimed.holder is not None:
                raise Conflict(f"a workflow named {name!r} exists in space {space!r}")
            deployment = self.check_dependencies(space, spec)
            at = self._at()
            accepted = {**params, "uid": uid, "operation": operation_id}
            return [
                Append(
                    names, claimed.version, [_event(Topic.NAME_CLAIMED, at, context, {"uid": uid})]
                ),
                Append(
                    workflow_stream(uid),
                    0,
                    [_event(Topic.WORKFLOW_ACCEPTED, at, context, accepted)],
                ),
                catalog_change(self.store, _event(Topic.CATALOG_ADDED, at, context, {"uid": uid})),
                self._attach(deployment, uid, spec, context),
            ]

        operation_id = self.accept(
            WORKFLOW_CREATE, params, space=space, actor=actor, key=key, effects=effects
        )
        uid = workflow_uid(operation_id)
        self.app.code_provider.refresh()  # this process's workers see it at once
        return self.operation_view(operation_id, resource={"uid": uid, "name": params["name"]})

    def workflow_in(self, space: str, uid: str) -> WorkflowResourceState:
        """A live (not deleted) Workflow resource of this Space; else ``not_found``."""
        if not is_uid(uid, "wf"):
            raise NotFound(f"no workflow {str(uid)[:128]!r} in space {space!r}")
        state = load_workflow(self.store, uid)
        if not state.exists or state.space != space:
            raise NotFound(f"no workflow {uid!r} in space {space!r}")
        return state

    def replace_workflow(
        self, space: str, uid: str, body: object, actor: Actor, key: str | None
    ) -> dict[str, Any]:
        """DW-CRUD-2: full replacement with the same worker and className only; a new
        generation that reconciles again. History is never rewritten."""
        if type(body) is not dict:
            raise InvalidRequest('the body must be {"spec": {...}} (and optionally "name")')
        unknown = sorted(str(k)[:64] for k in body if k not in ("name", "spec"))
        if unknown or "spec" not in body:
            raise InvalidRequest('the body must be {"spec": {...}} (and optionally "name")')
        spec = check_workflow_spec(body["spec"])
        params = {"space": space, "uid": uid, "spec": spec}
        if key is not None and self._replay(space, WORKFLOW_REPLACE, key):
            replayed = self.accept(
                WORKFLOW_REPLACE, params, space=space, actor=actor, key=key, effects=lambda _: []
            )
            return self.operation_view(replayed, resource={"uid": uid})
        current = self.workflow_in(space, uid)
        if "name" in body and body["name"] != current.name:
            raise InvalidRequest("a PUT cannot rename a workflow (DW-CRUD-2)")
        if spec != current.spec:
            raise InvalidRequest(
                "a PUT may not change worker or className (DW-CRUD-2); create a new workflow"
            )

        def effects(context: dict[str, Any]) -> list[Append]:
            state = self.workflow_in(space, uid)
            if state.deleting:
                raise ResourceBusy(f"workflow {uid} is being deleted")
            deployment = self.check_dependencies(space, spec)
            data = {"spec": spec, "generation": state.generation + 1}
            data["operation"] = context["operation_id"]
            event = _event(Topic.WORKFLOW_REPLACED, self._at(), context, data)
            return [
                Append(workflow_stream(uid), state.version, [event]),
                self._attach(deployment, uid, spec, context),
            ]

        operation_id = self.accept(
            WORKFLOW_REPLACE, params, space=space, actor=actor, key=key, effects=effects
        )
        return self.operation_view(operation_id, resource={"uid": uid, "name": current.name})

    def delete_workflow(
        self, space: str, uid: str, actor: Actor, key: str | None
    ) -> dict[str, Any]:
        """DW-DEL-1..5: refused while a live Version binds it; otherwise close it now and
        let the operation fence, stop and purge (it reconciles until stop is proven)."""
        params = {"space": space, "uid": uid}
        if key is not None:
            known = derived_id("idempotency", space, WORKFLOW_DELETE, key)
            first = self.store.read_stream(known)[:1]
            if first:
                # DW-DEL-5: the original key reconciles the same Operation; the key used
                # for another request is a conflict, never that Operation's answer.
                if first[0].data.get("params") != params:
                    raise Conflict(
                        f"operation {known} was already submitted with this key for another request"
                    )
                return self.operation_view(known, resource={"uid": uid})
        current = self.workflow_in(space, uid)
        if current.deleting:
            raise ResourceBusy(f"workflow {uid} is already being deleted by {current.deleting}")
        binders = self.live_binders(current)
        if binders:
            raise DependencyConflict(
                f"version {binders[0]} binds workflow {uid} (workflowBindings); delete that "
                "Version first (DW-DEL-1)"
            )

        def effects(context: dict[str, Any]) -> list[Append]:
            state = self.workflow_in(space, uid)
            if state.deleting:
                raise ResourceBusy(f"workflow {uid} is already being deleted by {state.deleting}")
            if state.reconciled_generation < state.generation and not self._finished(
                state.operations[-1]
            ):
                raise ResourceBusy(f"workflow {uid} has a change in progress; try again shortly")
            # Again inside: a binding upload appends to this stream too, so the two
            # cannot both be accepted (DW-DEL-1).
            binders = self.live_binders(state)
            if binders:
                raise DependencyConflict(
                    f"version {binders[0]} binds workflow {uid} (workflowBindings); delete "
                    "that Version first (DW-DEL-1)"
                )
            data = {"operation": context["operation_id"]}
            at = self._at()
            # Off the catalog at once: no worker claims (wakes) its instances any more.
            return [
                Append(
                    workflow_stream(uid),
                    state.version,
                    [_event(Topic.WORKFLOW_DELETING, at, context, data)],
                ),
                catalog_change(
                    self.store, _event(Topic.CATALOG_REMOVED, at, context, {"uid": uid})
                ),
            ]

        operation_id = self.accept(
            WORKFLOW_DELETE, params, space=space, actor=actor, key=key, effects=effects
        )
        self.app.code_provider.refresh()
        return self.operation_view(operation_id, resource={"uid": uid, "name": current.name})

    def binding_versions(self, uid: str) -> list[str]:
        """Live Versions whose workflowBindings name ``uid`` (weighted or not, DW-DEL-1)."""
        return self.live_binders(load_workflow(self.store, uid))

    def live_binders(self, state: WorkflowResourceState) -> list[str]:
        """The Versions recorded as binding this Workflow that are not deleted."""
        return [v for v in state.bound if not load_version(self.store, v).deleted]

    # -- readiness and observation (DW-SPEC-5, DW-OBS-1) -----------------------------------

    def readiness(self, state: WorkflowResourceState) -> tuple[bool, str]:
        """Ready: open, reconciled, and every weighted Version of the active allocation
        has the class (DW-SPEC-5). The reason says what is missing."""
        if state.deleting:
            return False, "being deleted"
        if state.reconciled_generation < 1:
            return False, "not reconciled yet"
        allocation = weighted(load_deployment(self.store, state.worker).allocation)
        if not allocation:
            return False, "no Version is selected in the Deployment"
        for vid in allocation:
            verdict = load_version(self.store, vid).abi(state.class_name)
            if verdict is None:
                return False, f"version {vid} is still being verified"
            if not verdict:
                return False, f"version {vid} has no class {state.class_name!r} (DW-ABI-1)"
        return True, "ready"

    def view(self, state: WorkflowResourceState) -> dict[str, Any]:
        """DW-CRUD-1: the management record and the last observation (DW-OBS-1)."""
        observed: dict[str, Any] = {}
        if state.reconciled_generation >= 1:
            ready, reason = self.readiness(state)
            counts = self.app.projections.instance_counts(state.uid)
            observed = {
                "ready": ready,
                "instanceCounts": counts["instanceCounts"],
                "observedAt": self._at(),
                "observedPosition": counts["observedPosition"],
                "reason": reason,
            }
        return {
            "uid": state.uid,
            "name": state.name,
            "space": state.space,
            "spec": state.spec,
            "generation": state.generation,
            "observedGeneration": state.reconciled_generation,
            "createdAt": state.created_at,
            "deleting": state.deleting is not None,
            "operations": state.operations,
            "observed": observed,
            "output": {},
        }

    def get_workflow(self, space: str, uid: str) -> dict[str, Any]:
        return self.view(self.workflow_in(space, uid))

    def list_workflows(self, space: str) -> list[dict[str, Any]]:
        found = []
        for event in self.store.read_topics([Topic.WORKFLOW_ACCEPTED]):
            if event.data["space"] == space:
                state = load_workflow(self.store, event.data["uid"])
                if state.exists:
                    found.append(self.view(state))
        return found

    def resource(self, uid: str) -> WorkflowResource | None:
        """The engine's and callers' view of a live Workflow resource (None: not one)."""
        if not is_uid(uid, "wf"):
            return None
        state = load_workflow(self.store, uid)
        if not state.exists:
            return None
        return WorkflowResource(uid, state.space, state.class_name)

    def gate(self, resource: WorkflowResource, action: str) -> None:
        """Instance create/event on a Workflow resource: closed once DELETE is accepted
        (DW-DEL-2); a create also needs the resource Ready (DW-SPEC-5, DW-OBS-1)."""
        if not is_uid(resource.uid, "wf"):
            return  # a local resource: always open
        state = load_workflow(self.store, resource.uid)
        if not state.exists or state.deleting:
            # Also checked after a create committed ("created"): one that raced the
            # DELETE's acceptance is purged by its creator (DW-DEL-2).
            raise NotFound(f"no workflow {resource.uid!r} in space {resource.space!r}")
        if action == "create":
            ready, reason = self.readiness(state)
            if not ready:
                raise ResourceBusy(f"workflow {resource.uid} is not ready: {reason}")


def work_control_plane(app: Application, operation_ids: list[str], timeout: float = 60.0) -> None:
    """Run control-plane operations in this process until ``operation_ids`` have all
    finished (or ``timeout`` seconds pass: ``backend_unavailable``). Only the built-in
    ``blackops.*`` types are claimed, so a CLI can do its own control-plane work while
    any running worker may take the same operations too (claims are exclusive)."""
    import os
    import time

    from blackops.deferred import DeferredEngine

    handlers = {t: h for t, h in app._handlers.items() if t.startswith("blackops.")}
    engine = DeferredEngine(app.store, handlers, app.clock, f"cli-{os.getpid()}", 30.0)
    journal = OperationJournal(app.store)
    deadline = time.monotonic() + timeout
    while True:
        states = journal.load_many(operation_ids)
        if all(op.state in TERMINAL or op.purged for op in states.values()):
            return
        attempts = engine.claim(10)
        for attempt in attempts:
            engine.commit([engine.execute(attempt)])
        if time.monotonic() > deadline:
            raise BackendUnavailable("the control-plane operations did not finish in time")
        if not attempts:
            time.sleep(0.05)
