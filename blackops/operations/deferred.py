"""Deferred attempts: claim, run, end; shared by worker processes and ``work_until_idle``.

A claim is the append of ``attempt.started`` (with a fencing token one higher than
the last, the worker's id and the lease expiry) at the version the claimant read:
of two racing claimants exactly one commits. Every later event of that attempt is
appended at the version after the claim, so a holder whose claim was superseded is
refused by the journal (FencingError) and can never record success (OL-8).

Claims and attempt ends are committed in groups, one transaction for many
operations; an operation whose stream moved on is dropped from the group and the
rest is committed again. Each operation is only ever acknowledged by its commit.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from blackops.operations.attempts import (
    record_claim_lost,
    record_completion,
    record_failure,
    record_interrupted,
    record_rejection,
)
from blackops.operations.handlers import HandlerSpec, Outcome
from domain.clock import Clock, format_instant
from domain.context import ExecutionContext
from domain.lifecycle import EventType, State
from domain.operation import LifecycleViolation, Operation
from domain.supervision import OperationRejected
from journal.group_commit import commit_group
from journal.leases import RESERVATION_HOLD, check_lease_seconds
from journal.operations import OperationJournal, fold, pending_append, rebased_past_holds
from journal.outcomes import outcome_append
from journal.store import Append, EventStore
from journal.work_index import moment_micros

log = logging.getLogger("blackops.operations.deferred")


@dataclass(eq=False)
class Attempt:
    """One claimed attempt: the operation at its claim version, and who may end it."""

    operation: Operation
    spec: HandlerSpec
    ctx: ExecutionContext
    #: Set when the lease is lost: the attempt's end is never committed.
    abandoned: bool = False

    @property
    def lease(self) -> tuple[str, int]:
        assert self.ctx.fencing_token is not None
        return self.operation.id, self.ctx.fencing_token


@dataclass(eq=False)
class Ending:
    """How an attempt ended, before it is committed."""

    attempt: Attempt
    outcome: Outcome | None = None
    rejection: OperationRejected | None = None
    error: BaseException | None = None
    interrupt: str | None = None
    raised: BaseException | None = field(default=None, repr=False)
    #: The journal appends recording this end, made once: a turn that failed to commit
    #: retries these same appends (the aggregate has already moved past them).
    appends: list[Append] | None = field(default=None, repr=False)


def _abandon(item: Ending | Attempt | None) -> None:
    """The journal refused this item: its attempt is never ended by us (its lease runs out)."""
    if isinstance(item, Ending):
        item.attempt.abandoned = True
    elif isinstance(item, Attempt):
        item.abandoned = True


class Cycle(NamedTuple):
    """What one `DeferredEngine.cycle` committed and found."""

    committed: list[Ending]  # the attempt ends committed
    attempts: list[Attempt]  # the claims committed: attempts this worker now holds
    found: int  # due operations the claim found: fewer than its limit, nothing more was due


class DeferredEngine:
    def __init__(
        self,
        store: EventStore,
        handlers: Mapping[str, HandlerSpec],
        clock: Clock,
        worker_id: str,
        lease_seconds: float = 30.0,
    ) -> None:
        check_lease_seconds(lease_seconds)
        self.store = store
        self.journal = OperationJournal(store)
        self.handlers = dict(handlers)
        self.clock = clock
        self.worker_id = worker_id
        self.lease = timedelta(seconds=lease_seconds)

    @property
    def types(self) -> list[str]:
        return sorted(self.handlers)

    # -- claiming --------------------------------------------------------------------------

    def claim(self, limit: int) -> list[Attempt]:
        """Claim up to ``limit`` due operations; returns the attempts this worker now holds."""
        return self.cycle([], limit).attempts

    def commit(self, endings: Sequence[Ending]) -> list[Ending]:
        """Record and commit attempt ends in one group; returns those that were committed.

        An abandoned attempt (lease lost) is never written. One whose operation moved
        on (a new claimant) is refused by the journal and left out.
        """
        return self.cycle(endings, 0).committed

    def cycle(self, endings: Sequence[Ending], claim_limit: int) -> Cycle:
        """Commit ``endings`` and up to ``claim_limit`` new claims in **one** transaction.

        Returns the endings that were committed, the attempts now held and how many due
        operations the claim found. Items that lost a race (their stream moved on) are left
        out; the rest still commits.
        """
        now = self.clock.now()
        group: list[tuple[list[Append], Ending | Attempt | None]] = []
        for ending in endings:
            if ending.attempt.abandoned:
                continue
            if ending.appends is None:
                try:
                    ending.appends = self._record_end(ending, now)
                except LifecycleViolation as refused:  # a stale in-memory copy: drop it
                    log.warning("attempt end not recorded: %s", refused)
                    continue
            group.append((ending.appends, ending))
        found = 0
        if claim_limit > 0:
            claims, found = self._prepare_claims(claim_limit, now)
            group.extend(claims)
        committed = commit_group(self.store, group, _abandon, self._rebase)
        return Cycle(
            [item for item in committed if isinstance(item, Ending)],
            [item for item in committed if isinstance(item, Attempt)],
            found,
        )

    def _rebase(self, refused: Append, item: Ending | Attempt | None) -> Append | None:
        # A hold or release landed since the claim (or the reservation's read): it leaves
        # the fencing token current, so the claim or end still holds (Part B, Leases).
        moved = rebased_past_holds(self.store, refused)
        attempt = item.attempt if isinstance(item, Ending) else item
        if moved is not None and attempt is not None and refused.stream == attempt.operation.id:
            # The attempt's later events follow the hold too.
            attempt.operation.version += moved.expected_version - refused.expected_version
        return moved

    def _prepare_claims(
        self, limit: int, now: datetime
    ) -> tuple[list[tuple[list[Append], Attempt | None]], int]:
        """The claims' appends (with their attempts) and how many due operations the
        reservation found (claimable or not)."""
        until = now + self.lease
        # The reservation only has to outlive this turn: the claim sets the real lease.
        # If the turn fails, the rows are due again after the hold, not after a lease.
        hold = now + min(self.lease, RESERVATION_HOLD)
        streams = self.store.reserve_due_streams(
            moment_micros(now), moment_micros(hold), self.worker_id, self.types, limit
        )
        group: list[tuple[list[Append], Attempt | None]] = []
        for operation_id, events in streams.items():
            if not events or not events[0].type.startswith("operation."):
                continue
            operation = fold(operation_id, events)
            if operation.is_terminal:
                continue
            claimed = self._claim_one(operation, now, until)
            if claimed is None or isinstance(claimed, Attempt):
                group.append(([pending_append(operation)], claimed))
        return group, len(streams)

    def _claim_one(
        self, operation: Operation, now: datetime, until: datetime
    ) -> Attempt | bool | None:
        """Record the claim on ``operation``: an Attempt, None (it ended instead), or
        False (nothing to do: not claimable by the journal's account)."""
        spec = self.handlers.get(operation.type)
        if spec is None:
            return False
        origin = ExecutionContext.from_dict(operation.origin)
        token = operation.fencing_token + 1
        if operation.state is State.RUNNING and operation.attempt_open:
            # The index says its lease ran out: the holder died or stalled (OL-8).
            lost = origin.for_attempt(operation.attempt, worker=self.worker_id, fencing_token=token)
            if not record_claim_lost(operation, lost, now, spec.supervision):
                return None
        elif operation.state is State.RETRY_SCHEDULED:
            if operation.retry_due_at is not None and operation.retry_due_at > format_instant(now):
                return False
        elif operation.state is not State.ACCEPTED:
            return False
        ctx = origin.for_attempt(operation.attempt + 1, worker=self.worker_id, fencing_token=token)
        operation.record(
            EventType.ATTEMPT_STARTED,
            format_instant(now),
            ctx.to_dict(),
            {
                "attempt": ctx.attempt,
                "fencing_token": token,
                "worker": self.worker_id,
                "lease_expires_at": format_instant(until),
            },
        )
        return Attempt(operation, spec, ctx)

    # -- running ---------------------------------------------------------------------------

    def execute(self, attempt: Attempt, *, in_pool: bool = False) -> Ending:
        """Run the handler once; never raises (a BaseException is kept in ``raised``).

        ``in_pool``: on a worker's handler thread, which no signal reaches, a BaseException
        (``sys.exit()``, a cancellation) is the handler's own doing: a failure its policy
        decides, like any other. It was taken for a worker interrupt, rescheduled at once
        without spending the budget, and so retried for ever (found by a spec review, stop
        37). In the caller's thread (``work_until_idle``) it is the caller's interrupt (P24).
        """
        spec = attempt.spec
        try:
            parsed: Any = spec.parse_params(attempt.operation.params)  # freshly loaded copy
            return Ending(attempt, outcome=spec.outcome_of(spec.call(attempt.ctx, parsed)))
        except OperationRejected as rejection:
            return Ending(attempt, rejection=rejection)
        except Exception as error:  # OL-8: never a rejection
            return Ending(attempt, error=error)
        except BaseException as interrupt:  # SystemExit, KeyboardInterrupt, cancellation
            if in_pool:
                return Ending(attempt, error=interrupt)
            return Ending(attempt, interrupt=type(interrupt).__name__, raised=interrupt)

    # -- ending ----------------------------------------------------------------------------

    def _record_end(self, ending: Ending, now: datetime) -> list[Append]:
        attempt = ending.attempt
        operation, ctx = attempt.operation, attempt.ctx
        extra: list[Append] = []
        if ending.outcome is not None:
            record_completion(operation, ctx, now, ending.outcome, stored=True)
            record = {
                "outcome_type": ending.outcome.type_name,
                "schema_version": ending.outcome.schema_version,
                "digest": ending.outcome.digest,
                "outcome": ending.outcome.document,
            }
            extra.append(outcome_append(operation.id, format_instant(now), ctx.to_dict(), record))
        elif ending.rejection is not None:
            record_rejection(operation, ctx, now, ending.rejection)
        elif ending.error is not None:
            record_failure(operation, ctx, now, attempt.spec.supervision, ending.error)
        else:
            record_interrupted(operation, ctx, now, ending.interrupt or "interrupted")
        return [pending_append(operation), *extra]

    def renew(self, attempts: Sequence[Attempt]) -> list[Attempt]:
        """Heartbeat: extend the leases of ``attempts``; returns (and abandons) the lost ones."""
        live = [a for a in attempts if not a.abandoned]
        if not live:
            return []
        now = self.clock.now()
        renewed = set(
            self.store.renew_leases(
                [a.lease for a in live],
                self.worker_id,
                moment_micros(now),
                moment_micros(now + self.lease),
            )
        )
        lost = [a for a in live if a.operation.id not in renewed]
        for attempt in lost:
            attempt.abandoned = True
        return lost
