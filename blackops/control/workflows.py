"""Workflow resources (DW-CRUD, DW-DEL, DW-SPEC-5, DW-OBS-1): create, replace and delete as
built-in Operations, readiness, the observed view, and the gate instances pass through."""

from __future__ import annotations

from typing import Any

from blackops.control.base import (
    WORKFLOW_CREATE,
    WORKFLOW_DELETE,
    WORKFLOW_REPLACE,
    new_event,
    workflow_uid,
)
from blackops.control.deployments import DeploymentControl
from blackops.ids import idempotent_operation_id
from blackops.workflows.code import WorkflowResource
from domain.context import Actor
from domain.documents import canonical_document
from domain.errors import Conflict, DependencyConflict, InvalidRequest, NotFound, ResourceBusy
from domain.resources import (
    Topic,
    WorkflowResourceState,
    check_name,
    check_workflow_spec,
    is_uid,
    named_keys,
    weighted,
)
from journal.resources import (
    catalog_change,
    load_deployment,
    load_name,
    load_version,
    load_workflow,
    name_stream,
    workflow_stream,
)
from journal.store import Append


class WorkflowControl(DeploymentControl):
    def create_workflow(
        self, space: str, body: object, actor: Actor, key: str | None = None
    ) -> dict[str, Any]:
        """DW-CRUD-1: reserve a UID and an empty instance ID space (an Operation)."""
        if type(body) is not dict:
            raise InvalidRequest('the body must be {"name": ..., "spec": {...}}')
        unknown = [k for k in body if k not in ("name", "spec")]
        if unknown or "spec" not in body or "name" not in body:
            raise InvalidRequest(
                'the body must be exactly {"name": ..., "spec": {...}}'
                + (f" (unknown: {named_keys(unknown)})" if unknown else "")
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
                    names,
                    claimed.version,
                    [new_event(Topic.NAME_CLAIMED, at, context, {"uid": uid})],
                ),
                Append(
                    workflow_stream(uid),
                    0,
                    [new_event(Topic.WORKFLOW_ACCEPTED, at, context, accepted)],
                ),
                catalog_change(
                    self.store, new_event(Topic.CATALOG_ADDED, at, context, {"uid": uid})
                ),
                self._attach(deployment, uid, spec, context),
            ]

        operation_id = self.accept(
            WORKFLOW_CREATE, params, space=space, actor=actor, key=key, effects=effects
        )
        uid = workflow_uid(operation_id)
        self.runtime.provider().refresh()  # this process's workers see it at once
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
        self, space: str, uid: str, body: object, actor: Actor, key: str | None = None
    ) -> dict[str, Any]:
        """DW-CRUD-2: full replacement with the same worker and className only; a new
        generation that reconciles again. History is never rewritten."""
        if type(body) is not dict:
            raise InvalidRequest('the body must be {"spec": {...}} (and optionally "name")')
        unknown = [k for k in body if k not in ("name", "spec")]
        if unknown or "spec" not in body:
            raise InvalidRequest(
                'the body must be {"spec": {...}} (and optionally "name")'
                + (f" (unknown: {named_keys(unknown)})" if unknown else "")
            )
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
            event = new_event(Topic.WORKFLOW_REPLACED, self._at(), context, data)
            return [
                Append(workflow_stream(uid), state.version, [event]),
                self._attach(deployment, uid, spec, context),
            ]

        operation_id = self.accept(
            WORKFLOW_REPLACE, params, space=space, actor=actor, key=key, effects=effects
        )
        return self.operation_view(operation_id, resource={"uid": uid, "name": current.name})

    def delete_workflow(
        self, space: str, uid: str, actor: Actor, key: str | None = None
    ) -> dict[str, Any]:
        """DW-DEL-1..5: refused while a live Version binds it; otherwise close it now and
        let the operation fence, stop and purge (it reconciles until stop is proven)."""
        params = {"space": space, "uid": uid}
        if key is not None:
            known = idempotent_operation_id(space, WORKFLOW_DELETE, key)
            # DW-DEL-5: the original key reconciles the same Operation (purged or not); the
            # key used for another request is a conflict, never that Operation's answer.
            if self.submitted(known, canonical_document(params)):
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
                    [new_event(Topic.WORKFLOW_DELETING, at, context, data)],
                ),
                catalog_change(
                    self.store, new_event(Topic.CATALOG_REMOVED, at, context, {"uid": uid})
                ),
            ]

        operation_id = self.accept(
            WORKFLOW_DELETE, params, space=space, actor=actor, key=key, effects=effects
        )
        self.runtime.provider().refresh()
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
                return False, self.unverified_reason(vid)
            if not verdict:
                return False, f"version {vid} has no class {state.class_name!r} (DW-ABI-1)"
        return True, "ready"

    def view(self, state: WorkflowResourceState) -> dict[str, Any]:
        """DW-CRUD-1: the management record and the last observation (DW-OBS-1)."""
        observed: dict[str, Any] = {}
        if state.reconciled_generation >= 1:
            ready, reason = self.readiness(state)
            counts = self.runtime.projections.instance_counts(state.uid, state.space)
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
            "registered": False,
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
