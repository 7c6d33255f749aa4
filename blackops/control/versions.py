"""Versions: immutable, content-addressed bundles of a Worker; upload with ABI verification
(DW-ABI-1, a built-in Operation) and deletion while no allocation weighs them."""

from __future__ import annotations

from typing import Any

from blackops.control.base import VERSION_DELETE, VERSION_VERIFY, new_event
from blackops.control.bundles import check_bundle
from blackops.control.workers import WorkerControl
from blackops.ids import derived_id
from domain.context import Actor
from domain.errors import Conflict, DependencyConflict, InvalidRequest, NotFound
from domain.lifecycle import State
from domain.operation import Operation
from domain.resources import (
    VERSION_ID,
    Topic,
    VersionState,
    WorkflowResourceState,
    check_bindings,
    check_env,
    named_keys,
    version_id,
)
from journal.resources import (
    deployment_stream,
    load_deployment,
    load_version,
    load_workflow,
    version_stream,
    workflow_stream,
)
from journal.store import Append


class VersionControl(WorkerControl):
    def upload_version(
        self,
        space: str,
        worker_uid: str,
        bundle: dict[str, Any],
        actor: Actor,
    ) -> dict[str, Any]:
        """Record an immutable, content-addressed Version and accept its ABI verification
        (a Deferred operation) in one transaction. The same content again is the same
        Version and the same verification (idempotent by content); when that ended in
        dead letter without a verdict, uploading it again asks again (a redrive)."""
        self.worker_in(space, worker_uid)
        if type(bundle) is not dict:
            raise InvalidRequest("a Version is an object")
        allowed = {"modules", "main", "env", "workflowBindings"}
        unknown = [k for k in bundle if k not in allowed]
        if unknown:
            raise InvalidRequest(f"unknown Version keys: {named_keys(unknown)}")
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
        if load_version(self.store, vid).deleted:
            # Content-addressed: this content *is* that Version, and a deleted Version
            # stays deleted (its verification is the same finished Operation). Answering
            # 202 with that Operation would claim an upload that made nothing usable.
            raise Conflict(
                f"version {vid} was deleted; its content cannot be uploaded again (change "
                "the content, e.g. a module's text, to make a new Version)"
            )

        def effects(context: dict[str, Any]) -> list[Append]:
            state = load_version(self.store, vid)
            if state.exists:
                return []
            at = self._at()
            event = new_event(Topic.VERSION_UPLOADED, at, context, {"id": vid, **content})
            appends = [Append(version_stream(vid), 0, [event])]
            # Each bound Workflow records the binding at the version read, so a DELETE
            # accepted meanwhile makes this fail and be checked again (DW-DEL-1).
            for bound in self._bound_workflows(space, bindings):
                data = {"version": vid}
                appends.append(
                    Append(
                        workflow_stream(bound.uid),
                        bound.version,
                        [new_event(Topic.WORKFLOW_BOUND, at, context, data)],
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
        operation_id = self._verify_again(operation_id, vid, actor)
        return self.operation_view(operation_id, version=vid, worker={"resourceUid": worker_uid})

    def _verify_again(self, operation_id: str, vid: str, actor: Actor) -> str:
        """DW-SPEC-7: a Version without a verdict whose verification is dead-lettered (its
        store or worker failures outlasted their budget; verifier trouble never does) is
        verified again by a redrive (P22) of the chain's newest, which continues that same
        verification (a redrive is idempotent per dead operation). The newest otherwise."""
        if load_version(self.store, vid).verification is not None:
            return operation_id
        newest = self.newest_redrive(operation_id)
        if newest is None:
            return operation_id
        if newest.state is State.DEAD_LETTER:
            return self.operations.redrive(newest.id, actor=actor)
        return newest.id

    def verification(self, vid: str) -> Operation | None:
        """The newest operation of ``vid``'s verification (its redrives followed)."""
        return self.newest_redrive(derived_id("verify", vid))

    def unverified_reason(self, vid: str) -> str:
        """Why ``vid`` has no verdict yet, for a refusal or a readiness reason: verifier
        trouble (or another failure) is named with the operation that retries it."""
        operation = self.verification(vid)
        if operation is None or not operation.last_error:
            return f"version {vid} is still being verified"
        why = str(operation.last_error.get("message", ""))[:300]
        if operation.state is State.FAILED:  # not retryable: a redrive would not help
            return f"version {vid} is not verified: its verification {operation.id} failed ({why})"
        if operation.state is State.DEAD_LETTER:
            return (
                f"version {vid} is not verified: its verification {operation.id} is in dead "
                f"letter after {why!r}; upload the same content again to verify it again"
            )
        return (
            f"version {vid} is not verified yet: its last verification attempt failed "
            f"({why}) and operation {operation.id} is retrying it"
        )

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

    def delete_version(
        self, space: str, vid: str, actor: Actor, key: str | None = None
    ) -> dict[str, Any]:
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
            event = new_event(Topic.VERSION_DELETED, at, context, {"version": vid})
            # Also on the Deployment's stream, at the version read: an update accepted
            # meanwhile makes this fail and be checked again.
            marker = new_event(Topic.DEPLOYMENT_VERSION_REMOVED, at, context, {"version": vid})
            return [
                Append(version_stream(vid), current.version, [event]),
                Append(deployment_stream(state.worker), deployment.version, [marker]),
            ]

        operation_id = self.accept(
            VERSION_DELETE, {"version": vid}, space=space, actor=actor, key=key, effects=effects
        )
        return self.operation_view(operation_id, version=vid)
