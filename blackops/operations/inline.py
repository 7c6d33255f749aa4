"""Inline operations (OL-1, OL-4): the attempt runs in the receiving process.

Journal writes per run, each one transaction: ``received + attempt.started`` before
the handler runs (so the journal shows the attempt before any side effect), then the
attempt's end: ``finalizing + completed``, ``rejected``, or ``attempt.failed +
supervising + (retry_scheduled | failed)``. Retries run in this process after the
policy's delay on the injected clock (docs/decisions.md, P5). Inline never writes
an Outcome Record (OL-9): ``operation.completed`` carries only the outcome's type,
schema version and digest.
"""

from __future__ import annotations

from typing import Any

from blackops.operations.attempts import (
    record_completion,
    record_failure,
    record_interrupted,
    record_rejection,
)
from blackops.operations.handlers import HandlerSpec
from blackops.operations.results import Failure, OperationResult, Rejection
from domain.clock import Clock, format_instant
from domain.context import ExecutionContext
from domain.errors import FencingError
from domain.json_text import load_canonical
from domain.lifecycle import EventType, Mode
from domain.operation import Operation
from domain.supervision import OperationRejected
from journal.group_commit import MAX_REBASES
from journal.operations import OperationJournal, pending_append, rebased_past_holds


def received_data(
    spec: HandlerSpec, ctx: ExecutionContext, params: bytes, mode: Mode
) -> dict[str, Any]:
    """The data of ``operation.received``: what was asked, and under which policy."""
    return {
        "operation_type": spec.operation_type,
        "mode": mode.value,
        "tenant": ctx.tenant,
        "correlation_id": ctx.correlation_id,
        "params": load_canonical(params),
        "supervision": spec.supervision.describe(),
    }


class InlineRunner:
    def __init__(self, journal: OperationJournal, clock: Clock) -> None:
        self.journal = journal
        self.clock = clock

    def run(self, spec: HandlerSpec, params: bytes, ctx: ExecutionContext) -> OperationResult:
        """Record and run one Inline operation; ``params`` is a validated canonical document.

        Each attempt gets its own copy of the params, so a handler that mutates them
        cannot change what a retry sees or what the journal says was asked.
        """
        operation = Operation(ctx.operation_id)
        operation.record(
            EventType.RECEIVED,
            format_instant(self.clock.now()),
            ctx.to_dict(),
            received_data(spec, ctx, params, Mode.INLINE),
        )
        try:
            # A fresh copy for attempt 1; later attempts parse their own.
            parsed: Any = spec.parse_params(load_canonical(params))
        except OperationRejected as rejection:
            # Received -> Rejected: the input failed the handler's declared model.
            record_rejection(operation, ctx, self.clock.now(), rejection)
            self._save(operation)
            return self._rejected(operation, ctx, rejection)
        attempt = 1
        while True:
            actx = ctx.for_attempt(attempt)
            operation.record(
                EventType.ATTEMPT_STARTED,
                format_instant(self.clock.now()),
                actx.to_dict(),
                {"attempt": attempt},
            )
            self._save(operation)
            if attempt > 1:
                parsed = spec.parse_params(load_canonical(params))
            try:
                outcome = spec.outcome_of(spec.call(actx, parsed))
            except OperationRejected as rejection:
                record_rejection(operation, actx, self.clock.now(), rejection)
                self._save(operation)
                return self._rejected(operation, actx, rejection)
            except Exception as error:  # OL-8: an ordinary exception is never a rejection
                decision = record_failure(
                    operation, actx, self.clock.now(), spec.supervision, error
                )
                self._save(operation)
                if decision.retry_in is None:
                    failure = Failure(decision.error["message"], decision.error["type"])
                    return OperationResult(
                        operation.id, operation.public_status, failure=failure, attempt=attempt
                    )
                try:
                    self.clock.sleep(decision.retry_in)
                except BaseException as interrupt:
                    # Interrupted while it waits: its next attempt begins and ends interrupted
                    # (Retry Scheduled leads only to Running), so the run ends failed, reason
                    # interrupted (P17). It stayed retry_scheduled for good, with nobody to
                    # run it (found by a spec review, stop 37).
                    upcoming = ctx.for_attempt(attempt + 1)
                    operation.record(
                        EventType.ATTEMPT_STARTED,
                        format_instant(self.clock.now()),
                        upcoming.to_dict(),
                        {"attempt": attempt + 1},
                    )
                    self._interrupted(operation, upcoming, interrupt)
                    raise
                attempt += 1
                continue
            except BaseException as interrupt:  # SystemExit, KeyboardInterrupt, cancellation
                self._interrupted(operation, actx, interrupt)
                raise
            record_completion(operation, actx, self.clock.now(), outcome, stored=False)
            self._save(operation)
            return OperationResult(
                operation.id, operation.public_status, outcome=outcome.document, attempt=attempt
            )

    def _save(self, operation: Operation) -> None:
        """Commit the pending events. An operator's hold or release may land while the
        handler runs: the run's events then follow it (a hold does not change the
        lifecycle), and so does the operation's version. Any other writer is a real
        conflict and raises, as before."""
        store = self.journal.store
        append, rebases = pending_append(operation), 0
        while True:
            try:
                store.append(append)
                return
            except FencingError:
                moved = rebased_past_holds(store, append) if rebases < MAX_REBASES else None
                if moved is None:
                    raise
                operation.version += moved.expected_version - append.expected_version
                append, rebases = moved, rebases + 1

    @staticmethod
    def _rejected(
        operation: Operation, ctx: ExecutionContext, rejection: OperationRejected
    ) -> OperationResult:
        return OperationResult(
            operation.id,
            operation.public_status,
            rejection=Rejection(rejection.category, rejection.code, rejection.message),
            attempt=ctx.attempt,
        )

    def _interrupted(
        self, operation: Operation, ctx: ExecutionContext, interrupt: BaseException
    ) -> None:
        """Best effort: the interrupt is re-raised whether or not this commit succeeds."""
        try:
            record_interrupted(operation, ctx, self.clock.now(), type(interrupt).__name__)
            self._save(operation)
        except Exception:  # the store may be going away too; the interrupt still wins
            operation.take_pending()
