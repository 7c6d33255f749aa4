"""DurableWorkflow instances as aggregates: limits, names, retry policies, events, fold.

Pure model (no I/O). An instance's journal stream is the only truth about it; this
module folds that stream into :class:`InstanceState` and names the events. The
engine (``blackops/workflows/engine.py``) decides, this module only describes. One
module because the fold and the vocabulary it folds (topics, limits, statuses, the
retry policy's document) change together; the decisions are ``workflow_rules.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from domain.errors import BlackOpsError, InvalidRequest

MAX_STEPS: Final = 1024  # DW-STEP-5
LIFETIME_SECONDS: Final = 31_536_000  # DW-STEP-5
MAX_QUEUED_EVENTS: Final = 1024  # DW-EVT-3
MAX_QUEUED_BYTES: Final = 1_048_576  # DW-EVT-3
RETENTION_SECONDS: Final = 2_592_000  # DW-RET-1
MAX_ATTEMPTS: Final = 100  # DW-DO-2
MAX_DELAY_SECONDS: Final = 43_200  # DW-DO-2
MAX_SLEEP_SECONDS: Final = 31_536_000  # DW-SLEEP-1
MAX_TEXT: Final = 256  # DW-INST-1, DW-STEP-1, DW-EVT-1

STATUSES: Final = ("queued", "running", "sleeping", "waiting", "complete", "errored", "terminated")
TERMINAL_STATUSES: Final = frozenset({"complete", "errored", "terminated"})
REASONS: Final = (
    "run_threw",
    "step_failed",
    "step_limit_exceeded",
    "lifetime_exceeded",
    "step_definition_mismatch",
)


class Topic:
    """Event types of an instance stream (all start with ``workflow.``)."""

    CREATED: Final = "workflow.created"
    CONTEXT_STARTED: Final = "workflow.context_started"
    STEP_COMPLETED: Final = "workflow.step_completed"
    STEP_RETRY_SCHEDULED: Final = "workflow.step_retry_scheduled"
    STEP_SUSPENDED: Final = "workflow.step_suspended"
    EVENT_ACCEPTED: Final = "workflow.event_accepted"
    TERMINATION_REQUESTED: Final = "workflow.termination_requested"
    COMPLETED: Final = "workflow.completed"
    ERRORED: Final = "workflow.errored"
    TERMINATED: Final = "workflow.terminated"
    PURGED: Final = "workflow.purged"


TERMINAL_TOPICS: Final = frozenset({Topic.COMPLETED, Topic.ERRORED, Topic.TERMINATED})


class UnknownInstance(BlackOpsError):
    def __init__(self, instance_id: str) -> None:
        super().__init__("unknown_instance", f"no workflow instance {instance_id!r}")


class InstanceExists(BlackOpsError):
    def __init__(self, instance_id: str) -> None:
        super().__init__("instance_exists", f"instance id {instance_id!r} is already taken")


class InstanceTerminal(BlackOpsError):
    def __init__(self, instance_id: str, status: str) -> None:
        super().__init__("instance_terminal", f"instance {instance_id!r} is {status}")


class EventQueueFull(BlackOpsError):
    def __init__(self, message: str) -> None:
        super().__init__("event_queue_full", message)


class InvalidStepArgument(TypeError, ValueError):
    """Invalid arguments for an unfinished step name, or an invalid ``RetryPolicy``
    (the spec says TypeError; python-contract §1 makes it a ValueError too)."""


def check_text(value: object, what: str, code: str = "invalid_request") -> str:
    """1-256 Unicode scalar values (decisions D4): ``len()`` of a str without surrogates."""
    if type(value) is not str or not 1 <= len(value) <= MAX_TEXT:
        raise InvalidRequest(f"{what} must be a string of 1-{MAX_TEXT} characters", code)
    if any(0xD800 <= ord(ch) <= 0xDFFF for ch in value):
        raise InvalidRequest(f"{what} must not contain surrogate code points", code)
    return value


def _int_in(value: object, low: int, high: int) -> bool:
    return type(value) is int and low <= value <= high


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``step.do``'s retry policy (DW-DO-2); defaults are the spec's."""

    max_attempts: int = 1
    initial_delay_seconds: int = 0
    backoff: str = "constant"
    max_delay_seconds: int = MAX_DELAY_SECONDS

    def __post_init__(self) -> None:
        if not _int_in(self.max_attempts, 1, MAX_ATTEMPTS):
            raise InvalidStepArgument(f"maxAttempts must be an integer from 1 to {MAX_ATTEMPTS}")
        if not _int_in(self.initial_delay_seconds, 0, MAX_DELAY_SECONDS):
            raise InvalidStepArgument(
                f"initialDelaySeconds must be an integer from 0 to {MAX_DELAY_SECONDS}"
            )
        if not _int_in(self.max_delay_seconds, 0, MAX_DELAY_SECONDS):
            raise InvalidStepArgument(
                f"maxDelaySeconds must be an integer from 0 to {MAX_DELAY_SECONDS}"
            )
        if self.backoff not in ("constant", "exponential") or type(self.backoff) is not str:
            raise InvalidStepArgument('backoff must be "constant" or "exponential"')

    @classmethod
    def from_spec(cls, value: object) -> RetryPolicy:
        """A RetryPolicy, a camelCase mapping, or None (one attempt); InvalidStepArgument."""
        if value is None:
            return cls()
        if isinstance(value, RetryPolicy):
            return value
        if not isinstance(value, Mapping):
            raise InvalidStepArgument("retry_policy must be a RetryPolicy or a mapping")
        names = {
            "maxAttempts": "max_attempts",
            "initialDelaySeconds": "initial_delay_seconds",
            "backoff": "backoff",
            "maxDelaySeconds": "max_delay_seconds",
        }
        unknown = [k for k in value if k not in names]
        if unknown:
            raise InvalidStepArgument(f"unknown retry policy key {str(unknown[0])[:64]!r}")
        if "maxAttempts" not in value:
            raise InvalidStepArgument("a retry policy needs maxAttempts")
        return cls(**{names[k]: v for k, v in value.items()})

    def delay_after(self, failed_attempt: int) -> int:
        """Seconds to wait after failed attempt ``k`` (1-based), exactly as DW-DO-2 says."""
        if self.backoff == "constant":
            return min(self.max_delay_seconds, self.initial_delay_seconds)
        # Exact in Python ints (k <= 100), then capped.
        return min(self.max_delay_seconds, self.initial_delay_seconds << (failed_attempt - 1))

    def to_document(self) -> dict[str, Any]:
        return {
            "maxAttempts": self.max_attempts,
            "initialDelaySeconds": self.initial_delay_seconds,
            "backoff": self.backoff,
            "maxDelaySeconds": self.max_delay_seconds,
        }


def check_seconds(value: object, what: str, low: int, high: int) -> int:
    if not _int_in(value, low, high):
        raise InvalidStepArgument(f"{what} must be an integer from {low} to {high}")
    assert isinstance(value, int)
    return value


# -- time ------------------------------------------------------------------------------------

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_micros(moment: datetime) -> int:
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_micros(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)


def instant_micros(instant: str) -> int:
    return to_micros(datetime.fromisoformat(instant.replace("Z", "+00:00")))


def micros_instant(micros: int) -> str:
    return from_micros(micros).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# -- the folded instance -----------------------------------------------------------------------


@dataclass(slots=True)
class StepRecord:
    """One step name's history: pending (config first saved) or completed."""

    name: str
    kind: str
    completed: bool = False
    succeeded: bool = False
    result: dict[str, Any] | None = None
    error: dict[str, str] | None = None  # {"name": "step_failed"|"wait_timeout", "message"}
    config: dict[str, Any] = field(default_factory=dict)
    failed_attempts: int = 0
    due_at: int | None = None  # micros: retry time, sleep deadline or wait deadline

    def to_plan(self) -> dict[str, Any]:
        """What a context needs to replay or continue this step."""
        return {
            "kind": self.kind,
            "completed": self.completed,
            "succeeded": self.succeeded,
            "result": self.result,
            "error": self.error,
            "config": self.config,
            "failed_attempts": self.failed_attempts,
            "due_at": self.due_at,
        }


@dataclass(slots=True)
class QueuedEvent:
    seq: int
    type: str
    payload: dict[str, Any] | None
    accepted_at: int
    size: int
    direct: bool


@dataclass(slots=True)
class InstanceState:
    """An instance folded from its stream. ``version`` is the stream's last version."""

    stream: str
    version: int = 0
    exists: bool = False
    purged: bool = False
    workflow: str = ""
    instance_id: str = ""
    space: str = ""
    origin: dict[str, Any] = field(default_factory=dict)
    params: dict[str, Any] | None = None
    created_at: int = 0
    lifetime_ends_at: int = 0
    status: str = "queued"
    output: dict[str, Any] | None = None
    error: dict[str, str] | None = None
    terminal_at: int | None = None
    steps: dict[str, StepRecord] = field(default_factory=dict)
    queue: list[QueuedEvent] = field(default_factory=list)
    next_seq: int = 1
    contexts: int = 0
    fencing_token: int = 0
    context_open: bool = False
    worker: str | None = None
    lease_seconds: float = 0.0
    lease_expires_at: int = 0
    workflow_version: str | None = None
    termination_requested_at: int | None = None
    #: The step a suspended context stopped at (sleep or wait), for wake decisions.
    suspended_at: str | None = None

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def queued_bytes(self) -> int:
        return sum(e.size for e in self.queue if not e.direct)

    @property
    def queued_count(self) -> int:
        return sum(1 for e in self.queue if not e.direct)

    def waiting_for(self) -> StepRecord | None:
        """The pending wait the last context stopped at, if the instance is waiting."""
        if self.status != "waiting" or self.suspended_at is None:
            return None
        record = self.steps.get(self.suspended_at)
        return record if record is not None and not record.completed else None

    def matching_event(self, event_type: str, deadline: int) -> QueuedEvent | None:
        """The oldest queued event of ``event_type`` accepted no later than ``deadline``
        (an event accepted at the timeout instant wins, DW-WAIT-4 / decisions D11)."""
        for event in self.queue:
            if event.type == event_type and event.accepted_at <= deadline:
                return event
        return None

    def status_view(self) -> dict[str, Any]:
        """``status()``'s exact shape (DW-INST-4)."""
        view: dict[str, Any] = {"status": self.status}
        if self.status == "complete" and self.output is not None:
            view["output"] = self.output
        if self.status == "errored" and self.error is not None:
            view["error"] = dict(self.error)
        return view

    # -- folding ---------------------------------------------------------------------------

    def apply(
        self, topic: str, at: str, data: Mapping[str, Any], context: Mapping[str, Any]
    ) -> None:
        self.version += 1
        handler = _APPLY.get(topic)
        if handler is not None:
            handler(self, at, data, context)  # handlers parse ``at`` only if they need it


def _created(s: InstanceState, at: str, d: Mapping[str, Any], ctx: Mapping[str, Any]) -> None:
    version = s.version
    fresh = InstanceState(s.stream, version=version, exists=True)
    for name in InstanceState.__slots__:
        setattr(s, name, getattr(fresh, name))
    s.workflow, s.instance_id = d["workflow"], d["instance_id"]
    s.space, s.origin = ctx.get("tenant", ""), dict(ctx)
    s.params = d.get("params")
    s.created_at = instant_micros(at)
    s.lifetime_ends_at = instant_micros(d["lifetime_ends_at"])


def _context_started(s: InstanceState, at: str, d: Mapping[str, Any], _: Mapping[str, Any]) -> None:
    s.contexts = d["context"]
    s.fencing_token = d["fencing_token"]
    s.context_open = True
    s.worker = d["worker"]
    s.lease_seconds = d["lease_seconds"]
    s.lease_expires_at = instant_micros(d["lease_expires_at"])
    s.workflow_version = d["version"]
    s.status = "running"
    s.suspended_at = None


def _record(s: InstanceState, d: Mapping[str, Any]) -> StepRecord:
    record = s.steps.get(d["name"])
    if record is None:
        record = s.steps[d["name"]] = StepRecord(d["name"], d["kind"], config=d.get("config", {}))
    return record


def _step_completed(s: InstanceState, at: str, d: Mapping[str, Any], _: Mapping[str, Any]) -> None:
    record = _record(s, d)
    record.completed, record.due_at = True, None
    record.succeeded = d["outcome"] == "succeeded"
    record.result = d.get("result")
    record.error = d.get("error")
    if "failed_attempts" in d:
        record.failed_attempts = d["failed_attempts"]
    consumed = d.get("event")
    if consumed is not None:
        s.queue = [e for e in s.queue if e.seq != consumed]


def _retry_scheduled(s: InstanceState, at: str, d: Mapping[str, Any], _: Mapping[str, Any]) -> None:
    record = _record(s, d)
    record.failed_attempts = d["attempt"]
    record.due_at = instant_micros(d["due_at"])
    s.context_open = False
    s.status = "running"  # decisions D1


def _suspended(s: InstanceState, at: str, d: Mapping[str, Any], _: Mapping[str, Any]) -> None:
    record = _record(s, d)
    record.due_at = instant_micros(d["due_at"])
    s.context_open = False
    s.suspended_at = d["name"]
    s.status = "sleeping" if d["kind"] == "sleep" else "waiting"


def _event_accepted(s: InstanceState, at: str, d: Mapping[str, Any], _: Mapping[str, Any]) -> None:
    s.queue.append(
        QueuedEvent(
            d["seq"], d["type"], d.get("payload"), instant_micros(at), d["size"], d["direct"]
        )
    )
    s.next_seq = d["seq"] + 1


def _termination_requested(
    s: InstanceState, at: str, d: Mapping[str, Any], _: Mapping[str, Any]
) -> None:
    s.termination_requested_at = instant_micros(at)
    s.fencing_token = d["fencing_token"]


def _terminal(status: str) -> Any:
    def apply(s: InstanceState, at: str, d: Mapping[str, Any], _: Mapping[str, Any]) -> None:
        s.status, s.terminal_at, s.context_open = status, instant_micros(at), False
        s.queue = []  # DW-EVT-4: unmatched events are purged with the terminal transition
        if status == "complete":
            s.output = d.get("output")
        elif status == "errored":
            s.error = {"reason": d["reason"], "message": d["message"]}

    return apply


def _purged(s: InstanceState, at: str, d: Mapping[str, Any], _: Mapping[str, Any]) -> None:
    version = s.version
    fresh = InstanceState(s.stream, version=version, purged=True)
    for name in InstanceState.__slots__:
        setattr(s, name, getattr(fresh, name))


_APPLY: dict[str, Any] = {
    Topic.CREATED: _created,
    Topic.CONTEXT_STARTED: _context_started,
    Topic.STEP_COMPLETED: _step_completed,
    Topic.STEP_RETRY_SCHEDULED: _retry_scheduled,
    Topic.STEP_SUSPENDED: _suspended,
    Topic.EVENT_ACCEPTED: _event_accepted,
    Topic.TERMINATION_REQUESTED: _termination_requested,
    Topic.COMPLETED: _terminal("complete"),
    Topic.ERRORED: _terminal("errored"),
    Topic.TERMINATED: _terminal("terminated"),
    Topic.PURGED: _purged,
}


def fold(stream: str, events: Iterable[Any], start: InstanceState | None = None) -> InstanceState:
    """Fold recorded events (objects with type/at/data/context/version) into a state."""
    state = start or InstanceState(stream)
    for event in events:
        if event.type == Topic.PURGED and event.version > state.version + 1:
            # The versions before the tombstone were purged: it replaces everything.
            state.version = event.version - 1
        if event.version != state.version + 1:
            raise ValueError(
                f"stream {stream} jumps from version {state.version} to {event.version}"
            )
        state.apply(event.type, event.at, event.data, event.context)
    return state
