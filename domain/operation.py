"""The Operation aggregate: a fold of its journal that refuses every move OL-3 forbids."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from domain.documents import canonical_document, sha256_digest
from domain.errors import Conflict
from domain.events import NewEvent
from domain.lifecycle import (
    ATTEMPT_ENDINGS,
    ATTEMPT_NOTES,
    MOVES,
    PUBLIC_STATUS,
    RETENTION,
    TERMINAL,
    EventType,
    Mode,
    State,
)


class LifecycleViolation(Conflict):
    """An event the lifecycle does not allow in the operation's current state."""

    def __init__(self, operation_id: str, state: State | None, event: str, why: str) -> None:
        where = state.value if state else "nothing"
        super().__init__(f"operation {operation_id}: {event} is not allowed after {where}: {why}")
        self.state = state
        self.event = event


@dataclass(slots=True)
class Operation:
    """Current state of one operation, rebuilt from its events.

    ``record`` checks a new event against the lifecycle, applies it and keeps it
    pending; the journal appends pending events at ``version - len(pending)``.
    """

    id: str
    version: int = 0
    state: State | None = None
    mode: Mode | None = None
    type: str = ""
    tenant: str = ""
    correlation_id: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    attempt: int = 0
    attempt_open: bool = False
    fencing_token: int = 0
    failures: int = 0  # attempt.failed count: what the retry budget counts (OL-7)
    spared_failures: int = 0  # attempt.failed of a ``retry_always_on`` type: not counted
    claim_losses: int = 0
    lease_expires_at: str | None = None
    worker: str | None = None
    redrive_of: str | None = None
    #: The execution context of ``operation.received`` (who asked, correlation, trace);
    #: set by the journal when loading, since contexts are not part of the fold.
    origin: dict[str, Any] = field(default_factory=dict)
    created_at: str = ""
    updated_at: str = ""
    #: When it became terminal ("" until then, and for a purged one: the tombstone has it
    #: not); a later hold or release moves ``updated_at``, never this.
    terminal_at: str = ""
    retry_due_at: str | None = None
    last_error: dict[str, Any] | None = None
    rejection: dict[str, Any] | None = None
    completion: dict[str, Any] | None = None
    hold: dict[str, Any] | None = None
    purged: bool = False
    purge: dict[str, Any] | None = None
    #: A purged operation's params digest, kept by its tombstone (None before tombstones did):
    #: what a replayed idempotency key or redrive is compared with once the params are gone.
    purged_params_digest: str | None = None
    pending: list[NewEvent] = field(default_factory=list)

    @classmethod
    def replay(
        cls, operation_id: str, events: Iterable[tuple[str, str, dict[str, Any]]]
    ) -> Operation:
        """Fold ``(type, at, data)`` triples in journal order."""
        operation = cls(operation_id)
        for event_type, at, data in events:
            operation._apply(event_type, at, data)
        return operation

    @classmethod
    def from_tombstone(cls, operation_id: str, at: str, data: dict[str, Any]) -> Operation:
        """A purged operation: all that is left is its ``operation.purged`` tombstone."""
        operation = cls(operation_id)
        operation.state = State(data["final_state"])
        operation.mode = Mode(data["mode"])
        operation.type = data["operation_type"]
        operation.tenant = data["tenant"]
        operation.correlation_id = data.get("correlation_id", "")
        # Kept by tombstones since stop 33; an older one's status has no createdAt (null).
        operation.created_at = data.get("created_at", "")
        operation.attempt = data.get("attempt", 0)
        operation.version = data["versions"] + 1
        operation.updated_at = at
        operation.purged = True
        operation.purge = {"at": at, "reason": data["reason"]}
        operation.purged_params_digest = _digest_kept(data)
        return operation

    def submitted_with(self, canonical: bytes) -> bool:
        """Was this operation submitted with the params whose canonical bytes are
        ``canonical``? What a replayed idempotency key is compared with: the params, or
        once purged the digest its tombstone keeps (none before tombstones kept one: no).
        A purge cut short still holds the params; the tombstone answers all the same."""
        if self.purged:
            return self.purged_params_digest == sha256_digest(canonical)
        return canonical_document(self.params) == canonical

    @property
    def public_status(self) -> str:
        if self.state is None:
            raise LifecycleViolation(self.id, None, "status", "the operation has no events")
        return PUBLIC_STATUS[self.state]

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL

    def record(
        self, event_type: EventType, at: str, context: dict[str, Any], data: dict[str, Any]
    ) -> NewEvent:
        """Check, apply and keep a new event; raises LifecycleViolation if OL-3/OL-5 forbid it."""
        self._apply(event_type, at, data)
        event = NewEvent(type=event_type.value, at=at, context=context, data=data)
        self.pending.append(event)
        return event

    def take_pending(self) -> list[NewEvent]:
        events, self.pending = self.pending, []
        return events

    # -- folding ---------------------------------------------------------------------------

    def _apply(self, event_type: str, at: str, data: dict[str, Any]) -> None:
        try:
            kind = EventType(event_type)
        except ValueError:
            raise LifecycleViolation(
                self.id, self.state, event_type, "unknown event type"
            ) from None
        self._check(kind, data)
        move = MOVES.get((self.state, kind))
        if move is not None:
            self.state = move[0]
            if self.state in TERMINAL:
                self.terminal_at = at
        self._absorb(kind, at, data)
        self.version += 1
        self.updated_at = at

    def _refuse(self, kind: EventType, why: str) -> LifecycleViolation:
        return LifecycleViolation(self.id, self.state, kind.value, why)

    def _check(self, kind: EventType, data: dict[str, Any]) -> None:
        if self.purged:
            raise self._refuse(kind, "the operation was purged")
        if kind in RETENTION:
            self._check_retention(kind)
            return
        if self.state in TERMINAL:
            raise self._refuse(kind, "terminal operations accept no lifecycle event (OL-5)")
        if kind is EventType.RECEIVED:
            if self.state is not None:
                raise self._refuse(kind, "the operation was already received")
            if data.get("mode") not in tuple(Mode):
                raise self._refuse(kind, "mode must be 'inline' or 'deferred'")
            return
        if kind in ATTEMPT_NOTES:
            if self.state is not State.RUNNING or not self.attempt_open:
                raise self._refuse(kind, "no attempt is running")
            self._check_attempt_number(kind, data)
            return
        move = MOVES.get((self.state, kind))
        if move is None:
            raise self._refuse(kind, "not a transition of OL-3")
        assert self.mode is not None
        if self.mode not in move[1]:
            raise self._refuse(kind, f"not a transition of a {self.mode.value} operation")
        self._check_attempt_rules(kind, data)

    def _check_attempt_rules(self, kind: EventType, data: dict[str, Any]) -> None:
        if kind is EventType.ATTEMPT_STARTED:
            if data.get("attempt") != self.attempt + 1:
                raise self._refuse(kind, f"the next attempt is {self.attempt + 1}")
            token = data.get("fencing_token")
            if token is not None and token <= self.fencing_token:
                raise self._refuse(kind, "fencing tokens must increase with every claim")
            if self.mode is Mode.DEFERRED and (
                type(token) is not int
                or not isinstance(data.get("lease_expires_at"), str)
                or not isinstance(data.get("worker"), str)
            ):
                raise self._refuse(kind, "a Deferred claim needs a fencing token, lease and worker")
        elif kind in (EventType.ATTEMPT_FINALIZING, EventType.REJECTED) and (
            self.state is State.RUNNING
        ):
            if not self.attempt_open:
                raise self._refuse(kind, "the attempt has already ended")
            self._check_attempt_number(kind, data)
        elif kind is EventType.ATTEMPT_SUPERVISING and self.attempt_open:
            raise self._refuse(kind, "Supervising follows an ended attempt only")

    def _check_attempt_number(self, kind: EventType, data: dict[str, Any]) -> None:
        if data.get("attempt") != self.attempt:
            raise self._refuse(kind, f"the running attempt is {self.attempt}")

    def _check_retention(self, kind: EventType) -> None:
        if self.state is None:
            raise self._refuse(kind, "the operation has no events")
        if kind is EventType.HELD and self.hold is not None:
            raise self._refuse(kind, "the operation is already held")
        if kind is EventType.RELEASED and self.hold is None:
            raise self._refuse(kind, "the operation is not held")
        if kind is EventType.PURGED:
            if self.state not in TERMINAL:
                raise self._refuse(kind, "only terminal operations can be purged")
            if self.hold is not None:
                raise self._refuse(kind, "a held operation is never purged")

    def _absorb(self, kind: EventType, at: str, data: dict[str, Any]) -> None:
        if kind is EventType.RECEIVED:
            self.mode = Mode(data["mode"])
            self.type = data["operation_type"]
            self.tenant = data["tenant"]
            self.correlation_id = data["correlation_id"]
            self.params = data["params"]
            self.redrive_of = data.get("redrive_of")
            self.created_at = at
        elif kind is EventType.ATTEMPT_STARTED:
            self.attempt = data["attempt"]
            self.attempt_open = True
            self.retry_due_at = None
            if data.get("fencing_token") is not None:
                self.fencing_token = data["fencing_token"]
            self.lease_expires_at = data.get("lease_expires_at")
            self.worker = data.get("worker")
        elif kind in ATTEMPT_ENDINGS:
            self.attempt_open = False
            self.lease_expires_at = None
            if kind is EventType.ATTEMPT_FAILED:
                if data.get("spared") is True:
                    self.spared_failures += 1
                else:
                    self.failures += 1
                self.last_error = data.get("error")
            elif kind is EventType.ATTEMPT_CLAIM_LOST:
                self.claim_losses += 1
        elif kind is EventType.ATTEMPT_RETRY_SCHEDULED:
            self.retry_due_at = data["due_at"]
        elif kind in (EventType.FAILED, EventType.DEAD_LETTERED):
            self.last_error = data.get("error", self.last_error)
        elif kind is EventType.REJECTED:
            self.attempt_open = False
            self.rejection = {k: data[k] for k in ("category", "code", "message")}
        elif kind is EventType.COMPLETED:
            self.attempt_open = False
            self.completion = data
        elif kind is EventType.HELD:
            self.hold = {"at": at, **data}
        elif kind is EventType.RELEASED:
            self.hold = None
        elif kind is EventType.PURGED:
            self.purged = True
            self.purge = {"at": at, "reason": data.get("reason")}
            self.purged_params_digest = _digest_kept(data)


def _digest_kept(tombstone: dict[str, Any]) -> str | None:
    digest = tombstone.get("params_digest")
    return digest if isinstance(digest, str) else None
