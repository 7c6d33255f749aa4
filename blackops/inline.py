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

import random
from datetime import timedelta
from typing import Any

from blackops.handlers import HandlerSpec, OutcomeInvalid
from blackops.results import Failure, OperationResult, Rejection
from domain.clock import Clock, format_instant
from domain.context import ExecutionContext
from domain.lifecycle import EventType, Mode
from domain.operation import Operation
from domain.supervision import OperationRejected
from journal.operations import OperationJournal


def describe_error(error: BaseException) -> dict[str, str]:
    """Short and human-readable (decisions D18): type and message, no traceback."""
    kind = type(error)
    name = (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )
    if isinstance(error, OutcomeInvalid):
        name = "outcome_invalid"
    text = str(error)
    message = f"{kind.__name__}: {text}" if text else kind.__name__
    return {"type": name, "message": message[:500]}


class InlineRunner:
    def __init__(self, journal: OperationJournal, clock: Clock) -> None:
        self.journal = journal
        self.clock = clock

    def _now(self) -> str:
        return format_instant(self.clock.now())

    def run(
        self, spec: HandlerSpec, params: dict[str, Any], ctx: ExecutionContext
    ) -> OperationResult:
        """Record and run one Inline operation; ``params`` is an already valid document."""
        operation = Operation(ctx.operation_id)
        operation.record(
            EventType.RECEIVED,
            self._now(),
            ctx.to_dict(),
            {
                "operation_type": spec.operation_type,
                "mode": Mode.INLINE.value,
                "tenant": ctx.tenant,
                "correlation_id": ctx.correlation_id,
                "params": params,
                "supervision": spec.supervision.describe(),
            },
        )
        try:
            parsed = spec.parse_params(params)
        except OperationRejected as rejection:
            # Received -> Rejected: the input failed the handler's declared model.
            return self._reject(operation, ctx, rejection)
        attempt = 1
        while True:
            actx = ctx.for_attempt(attempt)
            operation.record(
                EventType.ATTEMPT_STARTED, self._now(), actx.to_dict(), {"attempt": attempt}
            )
            self.journal.save(operation)
            try:
                outcome = spec.outcome_of(spec.call(actx, parsed))
            except OperationRejected as rejection:
                return self._reject(operation, actx, rejection)
            except Exception as error:  # OL-8: an ordinary exception is never a rejection
                retry_in = self._fail_attempt(operation, spec, actx, error)
                if retry_in is None:
                    return OperationResult(
                        operation.id,
                        operation.public_status,
                        failure=Failure(**_failure_fields(error)),
                        attempt=attempt,
                    )
                self.clock.sleep(retry_in)
                attempt += 1
                continue
            context = actx.to_dict()
            operation.record(
                EventType.ATTEMPT_FINALIZING, self._now(), context, {"attempt": attempt}
            )
            operation.record(
                EventType.COMPLETED,
                self._now(),
                context,
                {
                    "attempt": attempt,
                    "outcome_type": outcome.type_name,
                    "outcome_schema_version": outcome.schema_version,
                    "outcome_digest": outcome.digest,
                    "outcome_recorded": False,
                },
            )
            self.journal.save(operation)
            return OperationResult(
                operation.id, operation.public_status, outcome=outcome.document, attempt=attempt
            )

    def _reject(
        self, operation: Operation, ctx: ExecutionContext, rejection: OperationRejected
    ) -> OperationResult:
        operation.record(
            EventType.REJECTED,
            self._now(),
            ctx.to_dict(),
            {
                "attempt": ctx.attempt,
                "category": rejection.category,
                "code": rejection.code,
                "message": rejection.message,
            },
        )
        self.journal.save(operation)
        return OperationResult(
            operation.id,
            operation.public_status,
            rejection=Rejection(rejection.category, rejection.code, rejection.message),
            attempt=ctx.attempt,
        )

    def _fail_attempt(
        self, operation: Operation, spec: HandlerSpec, ctx: ExecutionContext, error: Exception
    ) -> float | None:
        """Record the failed attempt and the supervisor's decision; the delay if it retries."""
        policy = spec.supervision
        described = describe_error(error)
        context = ctx.to_dict()
        now = self._now()
        operation.record(
            EventType.ATTEMPT_FAILED, now, context, {"attempt": ctx.attempt, "error": described}
        )
        retryable = policy.is_retryable(error)
        if retryable and policy.may_retry(ctx.attempt):
            delay = policy.delay_after(ctx.attempt, random.random())  # jitter only, not security
            due = format_instant(self.clock.now() + timedelta(seconds=delay))
            operation.record(
                EventType.ATTEMPT_SUPERVISING,
                now,
                context,
                {"attempt": ctx.attempt, "decision": "retry"},
            )
            operation.record(
                EventType.ATTEMPT_RETRY_SCHEDULED,
                now,
                context,
                {"attempt": ctx.attempt, "delay_seconds": delay, "due_at": due},
            )
            self.journal.save(operation)
            return delay
        reason = "exhausted" if retryable else "not_retryable"
        operation.record(
            EventType.ATTEMPT_SUPERVISING,
            now,
            context,
            {"attempt": ctx.attempt, "decision": "fail", "reason": reason},
        )
        # Inline has no Dead Letter (OL-3: quarantine is Deferred only): exhaustion fails.
        operation.record(
            EventType.FAILED, now, context, {"attempt": ctx.attempt, "error": described}
        )
        self.journal.save(operation)
        return None


def _failure_fields(error: BaseException) -> dict[str, Any]:
    described = describe_error(error)
    return {"message": described["message"], "error_type": described["type"]}
