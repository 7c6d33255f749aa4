"""How an attempt's end is journaled: one place for Inline and Deferred alike.

Each function records events on an Operation aggregate (checked against OL-3/OL-5 by
the aggregate itself) and leaves saving to the caller, so a worker can commit the
ends of many attempts in one transaction.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from blackops.failures import describe_error
from blackops.operations.handlers import Outcome
from domain.clock import format_instant
from domain.context import ExecutionContext
from domain.lifecycle import EventType, Mode
from domain.operation import Operation
from domain.supervision import OperationRejected, Supervision

#: Lost claims (a worker died or stalled past its lease) do not spend the retry budget,
#: but an operation that keeps killing its workers is stopped after this many.
MAX_CLAIM_LOSSES: Final = 10


@dataclass(frozen=True, slots=True)
class Decision:
    """What the supervisor decided after a failed attempt."""

    retry_in: float | None  # seconds until the next attempt, or None when it has ended
    error: dict[str, str]


def record_completion(
    operation: Operation, ctx: ExecutionContext, now: datetime, outcome: Outcome, *, stored: bool
) -> None:
    """Running -> Finalizing -> Completed. ``stored``: an Outcome Record goes with it (OL-9)."""
    at, context = format_instant(now), ctx.to_dict()
    operation.record(EventType.ATTEMPT_FINALIZING, at, context, {"attempt": ctx.attempt})
    operation.record(
        EventType.COMPLETED,
        at,
        context,
        {
            "attempt": ctx.attempt,
            "outcome_type": outcome.type_name,
            "outcome_schema_version": outcome.schema_version,
            "outcome_digest": outcome.digest,
            "outcome_recorded": stored,
        },
    )


def record_rejection(
    operation: Operation, ctx: ExecutionContext, now: datetime, rejection: OperationRejected
) -> None:
    operation.record(
        EventType.REJECTED,
        format_instant(now),
        ctx.to_dict(),
        {
            "attempt": ctx.attempt,
            "category": rejection.category,
            "code": rejection.code,
            "message": rejection.message,
        },
    )


def record_failure(
    operation: Operation,
    ctx: ExecutionContext,
    now: datetime,
    policy: Supervision,
    error: BaseException,
) -> Decision:
    """attempt.failed, then Supervising decides: Retry Scheduled, Failed or Dead Letter."""
    described = describe_error(error)
    at, context = format_instant(now), ctx.to_dict()
    # Retried without spending the budget (retry_always_on): Deferred only, an Inline run
    # retries in its caller, which must get an answer (found by review).
    spared = policy.spares(error) and operation.mode is Mode.DEFERRED
    data: dict[str, Any] = {"attempt": ctx.attempt, "error": described}
    if spared:
        data["spared"] = True
    operation.record(EventType.ATTEMPT_FAILED, at, context, data)
    retryable = policy.is_retryable(error)
    if retryable and (spared or policy.may_retry(operation.failures)):
        # The backoff grows with every failure, spared ones included.
        failed = operation.failures + operation.spared_failures
        delay = policy.delay_after(failed, random.random())  # jitter, not security
        _schedule_retry(operation, context, now, delay, "retry")
        return Decision(delay, described)
    reason = "exhausted" if retryable else "not_retryable"
    # A non-retryable error fails at once; only exhaustion may quarantine (OL-3, OL-7).
    quarantine = retryable and policy.exhausted == "dead_letter" and operation.mode is Mode.DEFERRED
    _finish(operation, context, at, reason, described, quarantine=quarantine)
    return Decision(None, described)


def record_interrupted(
    operation: Operation, ctx: ExecutionContext, now: datetime, interrupt: str
) -> None:
    """A worker interrupt (OL-8): never a rejection, never the operation's fault.

    Deferred: rescheduled at once for another worker. Inline has no worker to hand
    it to, so it fails with reason ``interrupted`` (decisions P17).
    """
    at, context = format_instant(now), ctx.to_dict()
    operation.record(
        EventType.ATTEMPT_INTERRUPTED, at, context, {"attempt": ctx.attempt, "cause": interrupt}
    )
    if operation.mode is Mode.DEFERRED:
        _schedule_retry(operation, context, now, 0.0, "interrupted")
        return
    error = {
        "type": "interrupted",
        "message": f"the receiving process was interrupted ({interrupt})",
    }
    _finish(operation, context, at, "interrupted", error, quarantine=False)


def record_claim_lost(
    operation: Operation, ctx: ExecutionContext, now: datetime, policy: Supervision
) -> bool:
    """The running attempt's lease expired: record its loss (by the new claimant).

    Returns True when the operation may be claimed again at once, False when it has
    lost too many claims and ended (Failed or Dead Letter by the policy).
    """
    at, context = format_instant(now), ctx.to_dict()
    operation.record(
        EventType.ATTEMPT_CLAIM_LOST,
        at,
        context,
        {
            "attempt": operation.attempt,
            "fencing_token": operation.fencing_token,
            "worker": operation.worker,
            # The claim's own lease; heartbeats extend it outside the journal (O4), so
            # the loss itself is dated by this event's ``at``.
            "claimed_until": operation.lease_expires_at,
        },
    )
    if operation.claim_losses < MAX_CLAIM_LOSSES:
        _schedule_retry(operation, context, now, 0.0, "claim_lost")
        return True
    error = {
        "type": "claim_lost",
        "message": f"the operation lost {operation.claim_losses} claims (workers died or stalled)",
    }
    _finish(
        operation, context, at, "claim_lost", error, quarantine=policy.exhausted == "dead_letter"
    )
    return False


def _schedule_retry(
    operation: Operation, context: dict[str, Any], now: datetime, delay: float, reason: str
) -> None:
    at = format_instant(now)
    attempt = operation.attempt
    operation.record(
        EventType.ATTEMPT_SUPERVISING,
        at,
        context,
        {"attempt": attempt, "decision": "retry", "reason": reason},
    )
    due = format_instant(now + timedelta(seconds=delay))
    operation.record(
        EventType.ATTEMPT_RETRY_SCHEDULED,
        at,
        context,
        {"attempt": attempt, "delay_seconds": delay, "due_at": due},
    )


def _finish(
    operation: Operation,
    context: dict[str, Any],
    at: str,
    reason: str,
    error: dict[str, str],
    *,
    quarantine: bool,
) -> None:
    attempt = operation.attempt
    operation.record(
        EventType.ATTEMPT_SUPERVISING,
        at,
        context,
        {"attempt": attempt, "decision": "dead_letter" if quarantine else "fail", "reason": reason},
    )
    # Inline has no Dead Letter (OL-3: quarantine is Deferred only).
    ending = EventType.DEAD_LETTERED if quarantine else EventType.FAILED
    operation.record(ending, at, context, {"attempt": attempt, "error": error, "reason": reason})
