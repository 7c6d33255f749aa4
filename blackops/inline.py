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

from pydantic import ValidationError

from blackops.handlers import HandlerSpec, Outcome, OutcomeInvalid, summarise_validation
from blackops.results import Failure, OperationResult, Rejection
from domain.clock import Clock, format_instant
from domain.context import ExecutionContext
from domain.json_text import load_canonical, scalar_text
from domain.lifecycle import EventType, Mode
from domain.operation import Operation
from domain.supervision import OperationRejected
from journal.operations import OperationJournal


def describe_error(error: BaseException) -> dict[str, str]:
    """Short and human-readable (decisions D18): type and message, never a traceback.

    Whatever the exception holds, the result is recordable: lone surrogates are
    spelled out, a failing ``__str__`` is survived, pydantic errors omit inputs.
    """
    kind = type(error)
    if isinstance(error, OutcomeInvalid):
        name = "outcome_invalid"
    elif kind.__module__ == "builtins":
        name = kind.__qualname__
    else:
        name = f"{kind.__module__}.{kind.__qualname__}"
    try:
        text = summarise_validation(error) if isinstance(error, ValidationError) else str(error)
    except Exception:  # an exception whose __str__ raises must not lose the failure
        text = "(message unavailable)"
    message = f"{kind.__name__}: {text}" if text else kind.__name__
    return {"type": scalar_text(name, 200), "message": scalar_text(message, 500)}


class InlineRunner:
    def __init__(self, journal: OperationJournal, clock: Clock) -> None:
        self.journal = journal
        self.clock = clock

    def _now(self) -> str:
        return format_instant(self.clock.now())

    def run(self, spec: HandlerSpec, params: bytes, ctx: ExecutionContext) -> OperationResult:
        """Record and run one Inline operation; ``params`` is a validated canonical document.

        Each attempt gets its own copy of the params, so a handler that mutates them
        cannot change what a retry sees or what the journal says was asked.
        """
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
                "params": load_canonical(params),
                "supervision": spec.supervision.describe(),
            },
        )
        try:
            # A fresh copy for attempt 1; later attempts parse their own.
            parsed: Any = spec.parse_params(load_canonical(params))
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
            if attempt > 1:
                parsed = spec.parse_params(load_canonical(params))
            try:
                outcome = spec.outcome_of(spec.call(actx, parsed))
            except OperationRejected as rejection:
                return self._reject(operation, actx, rejection)
            except Exception as error:  # OL-8: an ordinary exception is never a rejection
                retry_in, described = self._fail_attempt(operation, spec, actx, error)
                if retry_in is None:
                    failure = Failure(described["message"], described["type"])
                    return OperationResult(
                        operation.id, operation.public_status, failure=failure, attempt=attempt
                    )
                self.clock.sleep(retry_in)
                attempt += 1
                continue
            except BaseException as interrupt:  # SystemExit, KeyboardInterrupt, cancellation
                self._interrupted(operation, actx, interrupt)
                raise
            return self._complete(operation, actx, outcome)

    def _complete(
        self, operation: Operation, ctx: ExecutionContext, outcome: Outcome
    ) -> OperationResult:
        context = ctx.to_dict()
        operation.record(
            EventType.ATTEMPT_FINALIZING, self._now(), context, {"attempt": ctx.attempt}
        )
        operation.record(
            EventType.COMPLETED,
            self._now(),
            context,
            {
                "attempt": ctx.attempt,
                "outcome_type": outcome.type_name,
                "outcome_schema_version": outcome.schema_version,
                "outcome_digest": outcome.digest,
                "outcome_recorded": False,
            },
        )
        self.journal.save(operation)
        return OperationResult(
            operation.id, operation.public_status, outcome=outcome.document, attempt=ctx.attempt
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
    ) -> tuple[float | None, dict[str, str]]:
        """Record the failed attempt and the supervisor's decision: (retry delay or None,
        the recorded error)."""
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
            return delay, described
        self._finish_failed(
            operation,
            context,
            ctx.attempt,
            "exhausted" if retryable else "not_retryable",
            described,
        )
        return None, described

    def _interrupted(
        self, operation: Operation, ctx: ExecutionContext, interrupt: BaseException
    ) -> None:
        """The receiving process is being stopped mid-attempt (decisions P17).

        Inline has no worker to hand the attempt to, so the operation fails with reason
        ``interrupted`` rather than staying Running for ever. Best effort: the interrupt
        is re-raised by the caller whether or not this commit succeeds.
        """
        context = ctx.to_dict()
        operation.record(
            EventType.ATTEMPT_INTERRUPTED, self._now(), context, {"attempt": ctx.attempt}
        )
        error = {
            "type": "interrupted",
            "message": f"the receiving process was interrupted ({type(interrupt).__name__})",
        }
        try:
            self._finish_failed(operation, context, ctx.attempt, "interrupted", error)
        except Exception:  # the store may be going away too; the interrupt still wins
            operation.take_pending()

    def _finish_failed(
        self,
        operation: Operation,
        context: dict[str, Any],
        attempt: int,
        reason: str,
        error: dict[str, str],
    ) -> None:
        now = self._now()
        operation.record(
            EventType.ATTEMPT_SUPERVISING,
            now,
            context,
            {"attempt": attempt, "decision": "fail", "reason": reason},
        )
        # Inline has no Dead Letter (OL-3: quarantine is Deferred only): exhaustion fails.
        operation.record(EventType.FAILED, now, context, {"attempt": attempt, "error": error})
        self.journal.save(operation)
