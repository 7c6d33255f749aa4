"""Reading operations: status, lifecycle events, Outcome Records (python-contract §2).

Apart from the write side so that a reader (``blackops op status``) imports only the
journal and the status rules, not the handler machinery.
"""

from __future__ import annotations

from typing import Any

from blackops.operations.contexts import check_operation_id
from blackops.operations.outcomes import OutcomeRecord, outcome_record
from blackops.operations.results import status_view
from blackops.runtime import Runtime


class OperationReads:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def status(self, operation_id: str) -> dict[str, Any]:
        """The HTTP shape of ``GET /v1/operations/{id}``; ``not_found`` if unknown."""
        return status_view(self.runtime.journal().load(check_operation_id(operation_id)))

    def outcome_record(self, operation_id: str) -> OutcomeRecord:
        operation = self.runtime.journal().load(check_operation_id(operation_id))
        return outcome_record(self.runtime.store, operation)

    def events(self, operation_id: str) -> list[dict[str, Any]]:
        events = self.runtime.journal().events(check_operation_id(operation_id))
        return [event.to_observed() for event in events]

    def list_operations(self, **filters: Any) -> dict[str, Any]:
        """Operations by creation time: ``tenant``, ``type``, ``status``, ``since``,
        ``until`` (RFC 3339), ``limit`` (1-1000), ``cursor`` (from ``next``)."""
        return self.runtime.projections.list_operations(**filters)

    def operation_counts(self, tenant: str | None = None) -> dict[str, Any]:
        """``{tenant: {type: {status: count}}}`` from the counts projection."""
        return self.runtime.projections.counts(tenant)
