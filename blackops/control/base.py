"""What every control-plane resource kind shares: acceptance as a built-in Operation.

Every mutation is an Operation with the OL lifecycle. What a caller asks is checked
before any side effect (DW-SPEC-1..7, DW-CRUD-2, DW-DEL-1); then the operation's
Received/Accepted and the aggregate events that make the request visible (a name
claimed, a UID reserved, a Deployment update pending, a DELETE closing the resource)
are appended in **one** transaction (:meth:`ControlBase.accept`). The work that follows
(ABI verification, applying an allocation, reconciling, fencing and purging) runs in a
worker as the operation's handler (``blackops/control/handlers.py``). With an
Idempotency-Key the operation id is derived from it, so a retried request finds the same
Operation and is never pre-rejected afterwards (DW-SPEC-7 last rule, DW-DEL-5).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from blackops.ids import derived_id, idempotent_operation_id, redrive_id
from blackops.operations.contexts import check_idempotency_key, operation_context
from blackops.operations.inline import received_data
from blackops.operations.service import OperationService
from blackops.runtime import Runtime
from domain.clock import format_instant
from domain.context import Actor, ExecutionContext
from domain.documents import canonical_document
from domain.errors import Conflict, FencingError, ResourceBusy
from domain.events import NewEvent
from domain.lifecycle import TERMINAL, EventType, Mode
from domain.operation import Operation
from domain.resources import minted_uid
from journal.operations import OperationJournal, pending_append
from journal.store import Append, EventStore

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


def new_event(kind: str, at: str, context: dict[str, Any], data: dict[str, Any]) -> NewEvent:
    return NewEvent(kind, at, context, data)


class ControlBase:
    """Acceptance and the shared reads of the control plane of one runtime."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.operations = OperationService(runtime)

    @property
    def store(self) -> EventStore:
        return self.runtime.store

    def _context(
        self, type_name: str, actor: Actor, space: str, *, operation_id: str | None = None
    ) -> ExecutionContext:
        return operation_context(
            self.runtime.clock, type_name, actor, space, operation_id=operation_id
        )

    def _at(self) -> str:
        return format_instant(self.runtime.clock.now())

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
        key = check_idempotency_key(key)
        spec = self.runtime.handlers.get(type_name)
        canonical = canonical_document(params)
        if operation_id is None and key is not None:
            operation_id = idempotent_operation_id(space, type_name, key)
        ctx = self._context(type_name, actor, space, operation_id=operation_id)
        data = received_data(spec, ctx, canonical, Mode.DEFERRED)
        if key:
            data["idempotency_key"] = key
        context = ctx.to_dict()
        for _ in range(_RACES):
            if self.submitted(ctx.operation_id, canonical):
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

    def submitted(self, operation_id: str, canonical: bytes) -> bool:
        """Whether ``operation_id`` exists, submitted with the params ``canonical`` (the
        same request again: that Operation, whatever happened since, a purge included);
        ``conflict`` when it was submitted with others. A purged Operation is compared by
        the digest its tombstone keeps: its first event is no longer the request (found by
        a defect hunt, stop 40: a replay after a purge was refused as ``invalid_params``)."""
        found = OperationJournal(self.store).load_many([operation_id]).get(operation_id)
        if found is None:
            return False
        if not found.submitted_with(canonical):
            said = "and a different request"
            if found.purged:  # only the digest its tombstone keeps is left to compare with
                said = (
                    "and purged since; this request is not the one it was submitted with (or "
                    "its tombstone predates keeping that digest)"
                )
            raise Conflict(f"operation {operation_id} was already submitted with this key {said}")
        return True

    def _replay(self, space: str, type_name: str, key: str) -> bool:
        """Whether ``key`` already names an Operation: then only ``accept`` answers it
        (same request: that Operation; another: ``conflict``), no check runs again."""
        check_idempotency_key(key)
        return bool(self.store.read_stream(idempotent_operation_id(space, type_name, key))[:1])

    def operation_view(self, operation_id: str, **extra: Any) -> dict[str, Any]:
        status = self.operations.status(operation_id)
        location = f"/v1/operations/{operation_id}"
        return {
            "operationId": operation_id,
            "status": status["status"],
            "location": location,
            **extra,
        }

    def _finished(self, operation_id: str) -> bool:
        """Whether what ``operation_id`` was accepted to do is settled: its newest redrive
        (itself if none) is terminal or purged. A redrive continues the operation it
        redrives (the handlers act for ``redrive_of``, followed back), so an entry keyed
        by a dead-lettered operation is unfinished again while its redrive is live
        (DW-SPEC-7: the pending effect of an accepted, unfinished update)."""
        newest = self.newest_redrive(operation_id)
        return newest is not None and (newest.state in TERMINAL or newest.purged)

    def newest_redrive(self, operation_id: str) -> Operation | None:
        """The operation that now continues ``operation_id``: its newest redrive, or itself
        (None if there is no such operation). Redrive ids are derived (``redrive_id``), one
        per dead operation, so the chain is followed forward without a search."""
        journal = OperationJournal(self.store)
        current = next(iter(journal.load_many([operation_id]).values()), None)
        while current is not None:
            following = journal.load_many([redrive_id(current.id)])
            if not following:
                break
            [current] = following.values()
        return current
