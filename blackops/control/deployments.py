"""Deployments: a Worker's weighted allocation of Versions, updated by built-in Operations
applied in acceptance order; the DW-SPEC-4/7 checks a Workflow makes against it."""

from __future__ import annotations

from typing import Any

from blackops.control.base import DEPLOYMENT_UPDATE, new_event
from blackops.control.versions import VersionControl
from domain.context import Actor
from domain.errors import DependencyConflict, InvalidRequest, NotFound, ResourceBusy
from domain.resources import DeploymentState, Topic, check_allocation, weighted
from journal.resources import deployment_stream, load_deployment, load_version
from journal.store import Append


class DeploymentControl(VersionControl):
    def update_deployment(
        self,
        space: str,
        worker_uid: str,
        allocation: object,
        actor: Actor,
        key: str | None = None,
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
            event = new_event(Topic.DEPLOYMENT_UPDATE_ACCEPTED, self._at(), context, data)
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
            # Never a mismatch (DW-SPEC-7); the reason names any verifier trouble (R9).
            raise ResourceBusy(
                f"{self.unverified_reason(unverified[0])}; try again shortly (worker "
                f"{worker_uid}, DW-SPEC-7)"
            )
        return deployment

    def _attach(
        self, deployment: DeploymentState, uid: str, spec: dict[str, Any], context: dict[str, Any]
    ) -> Append:
        """``deployment.workflow_attached``: the Workflow that was checked against this
        Deployment, appended at the version the check read (DW-SPEC-7 atomicity)."""
        data = {"workflow": uid, "className": spec["className"]}
        event = new_event(Topic.DEPLOYMENT_ATTACHED, self._at(), context, data)
        return Append(deployment_stream(deployment.worker), deployment.version, [event])
