"""Running and accepting operations (python-contract §2), over a Runtime.

``Application.run / submit / redrive / status / events / outcome`` delegate here; so do
the HTTP routes and the CLI through the application.
"""

from __future__ import annotations

from typing import Any

from blackops.ids import idempotent_operation_id, redrive_id
from blackops.jsonbody import ParsedDocument, parse_document
from blackops.operations.contexts import (
    check_idempotency_key,
    check_operation_id,
    check_tenant,
    operation_context,
)
from blackops.operations.inline import InlineRunner, received_data
from blackops.operations.reads import OperationReads
from blackops.operations.results import OperationResult
from domain.clock import format_instant
from domain.context import Actor, ExecutionContext
from domain.documents import DocumentError, canonical_document
from domain.errors import Conflict, FencingError, InvalidRequest
from domain.json_text import load_canonical
from domain.lifecycle import EventType, Mode, State
from domain.operation import Operation
from domain.supervision import OperationRejected


def read_params(
    text: bytes | str, *, empty_is: dict[str, Any] | None = None
) -> ParsedDocument | dict[str, Any]:
    """A params document from JSON text (an HTTP body, CLI ``--params``): a
    :class:`ParsedDocument` (its canonical bytes made in the same pass, not made again by
    ``run`` / ``submit``), or the parsed value alone when the text is JSON but no document
    (too large once canonical, an unsafe integer, ...): the service then refuses it after
    its own checks (the operation type first), in the order a caller passing the value
    alone meets them.
    """
    try:
        return ParsedDocument(text, empty_is=empty_is)
    except DocumentError:
        return parse_document(text, empty_is=empty_is)


def _canonical_params(params: dict[str, Any] | ParsedDocument) -> bytes:
    if isinstance(params, ParsedDocument):
        return params.canonical
    return canonical_document(params)


class OperationService(OperationReads):
    """Inline runs, Deferred acceptance and redrives; and the reads of ``OperationReads``."""

    def run(
        self,
        type: str,
        params: dict[str, Any] | ParsedDocument,
        *,
        actor: Actor | str | dict[str, Any],
        tenant: str,
        traceparent: str | None = None,
        causation_id: str | None = None,
        correlation_id: str | None = None,
    ) -> OperationResult:
        """Run ``type`` Inline in this process; everything is validated before any side
        effect: a bad type, tenant, actor or params document records nothing (O3)."""
        spec = self.runtime.handlers.public(type)
        canonical = _canonical_params(params)
        ctx = operation_context(
            self.runtime.clock,
            spec.operation_type,
            actor,
            tenant,
            traceparent,
            causation_id,
            correlation_id,
        )
        return InlineRunner(self.runtime.journal(), self.runtime.clock).run(spec, canonical, ctx)

    def submit(
        self,
        type: str,
        params: dict[str, Any] | ParsedDocument,
        *,
        actor: Actor | str | dict[str, Any],
        tenant: str,
        idempotency_key: str | None = None,
        traceparent: str | None = None,
        causation_id: str | None = None,
        correlation_id: str | None = None,
    ) -> tuple[str, str]:
        """Accept ``type`` as Deferred, durably; see ``Application.submit``. Returns the id
        and the public status the acceptance knows (``pending``, or for a replayed key the
        status of the operation it names), without reading the journal again."""
        spec = self.runtime.handlers.public(type)
        canonical = _canonical_params(params)
        key = check_idempotency_key(idempotency_key)
        tenant = check_tenant(tenant)
        operation_id = idempotent_operation_id(tenant, spec.operation_type, key) if key else None
        ctx = operation_context(
            self.runtime.clock,
            spec.operation_type,
            actor,
            tenant,
            traceparent,
            causation_id,
            correlation_id,
            operation_id=operation_id,
        )
        if spec.params_model is not None:  # without one, any document is the handler's input
            try:
                spec.parse_params(load_canonical(canonical))
            except OperationRejected as invalid:
                raise InvalidRequest(invalid.message, code="invalid_params") from None
        data = received_data(spec, ctx, canonical, Mode.DEFERRED)
        if key:
            data["idempotency_key"] = key
        return self._accept(ctx, data, canonical, replayable=key is not None)

    def _accept(
        self, ctx: ExecutionContext, data: dict[str, Any], canonical: bytes, *, replayable: bool
    ) -> tuple[str, str]:
        """Record Received -> Accepted in one commit. ``replayable``: the id is derived,
        and finding it taken by the same request is success, not an error."""
        operation = Operation(ctx.operation_id)
        at, context = format_instant(self.runtime.clock.now()), ctx.to_dict()
        operation.record(EventType.RECEIVED, at, context, data)
        operation.record(EventType.ACCEPTED, at, context, {})
        journal = self.runtime.journal()
        try:
            journal.save(operation)
        except FencingError:
            if not replayable:
                raise
            existing = journal.load(operation.id)
            if existing.submitted_with(canonical):
                return operation.id, existing.public_status
            if existing.purged:  # retention has forgotten the params: only a digest is left
                raise Conflict(
                    f"operation {operation.id} was submitted with this key and purged "
                    "since; these params are not the ones it was submitted with (or "
                    "its tombstone predates keeping their digest): use another key"
                ) from None
            raise Conflict(
                f"operation {operation.id} was already submitted with this key and different params"
            ) from None
        if replayable:  # committed, or reconciled as an identical earlier commit (the
            # same request at the same instant): only the journal can tell which.
            return operation.id, journal.load(operation.id).public_status
        return operation.id, operation.public_status

    def redrive(self, operation_id: str, *, actor: Actor | str | dict[str, Any]) -> str:
        """A new operation from a Dead Letter one; see ``Application.redrive``."""
        journal = self.runtime.journal()
        events = journal.events(check_operation_id(operation_id))
        dead = journal.load(operation_id)
        if dead.state is not State.DEAD_LETTER:
            raise Conflict(
                f"operation {operation_id} is {dead.public_status}; only dead_letter "
                "operations can be redriven"
            )
        if dead.purged:
            # Its params went with the purge (the tombstone keeps only their digest): a
            # redrive made before it is the answer, as a replayed redrive's is; nothing can
            # be made now. It raised KeyError, a 500 (found by a defect hunt, stop 35).
            copy = redrive_id(dead.id)
            if journal.load_many([copy]):
                return copy
            raise Conflict(
                f"operation {operation_id} was purged (retention): its params are gone, so "
                "it cannot be redriven; submit the work anew"
            )
        ctx = operation_context(
            self.runtime.clock,
            dead.type,
            actor,
            dead.tenant,
            None,
            dead.id,
            dead.correlation_id,
            operation_id=redrive_id(dead.id),
        )
        asked = events[0].data
        data = {
            **{k: asked[k] for k in ("operation_type", "mode", "tenant", "params", "supervision")},
            "correlation_id": dead.correlation_id,
            "redrive_of": dead.id,
        }
        return self._accept(ctx, data, canonical_document(dead.params), replayable=True)[0]
