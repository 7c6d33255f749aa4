"""What the host decides for an instance: claims, step requests, and how a context ends.

Pure functions over :class:`InstanceState` and "now" (integer microseconds). They
return the events to append; the engine appends them at the version the state was
folded to, so every decision is fenced by the journal: if anything else was appended
meanwhile, the engine folds it in and decides again (or finds it was fenced).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from domain.workflow import (
    MAX_STEPS,
    InstanceState,
    RetryPolicy,
    StepRecord,
    Topic,
    micros_instant,
)

Event = tuple[str, dict[str, Any]]
SECOND = 1_000_000


@dataclass(frozen=True, slots=True)
class Owner:
    """Who runs a context: its number, fencing token and worker."""

    context: int
    token: int
    worker: str


@dataclass(slots=True)
class Suspension:
    """A stop decided while the context still runs; its events are appended only
    after the code has stopped (DW-FENCE-1), with the state as it is then."""

    kind: str  # sleep | wait | retry
    name: str
    due_at: int  # micros: sleep deadline, wait deadline, retry time
    config: dict[str, Any]
    attempt: int = 0
    message: str = ""


@dataclass(slots=True)
class StepDecision:
    events: list[Event]
    reply: tuple[Any, ...]
    suspension: Suspension | None = None


def is_fenced(state: InstanceState, owner: Owner) -> bool:
    """True when ``owner`` may no longer commit: another context started, termination
    was requested, the instance ended, or the context was already closed."""
    return (
        state.purged
        or not state.context_open
        or state.contexts != owner.context
        or state.fencing_token != owner.token
        or state.termination_requested_at is not None
        or state.is_terminal
    )


def lifetime_over(state: InstanceState, now: int) -> bool:
    return now >= state.lifetime_ends_at  # decisions D19: due when now >= deadline


# -- claims ------------------------------------------------------------------------------------


def decide_claim(
    state: InstanceState, now: int, owner: Owner, version: str, lease_seconds: float
) -> tuple[str, list[Event]]:
    """An instance whose row is due: start a context, end it, purge it, or nothing.

    Returns ``(kind, events)`` with kind ``context``, ``end``, ``purge`` or ``none``.
    The row being due means any earlier context's lease has run out (its worker
    stopped renewing, and abandons its contexts before the lease ends).
    """
    if not state.exists:
        return "none", []
    if state.is_terminal:
        if state.terminal_at is not None and now >= state.terminal_at + RETENTION_MICROS:
            return "purge", []
        return "none", []
    if lifetime_over(state, now):
        return "end", [errored(state, "lifetime_exceeded", "the instance outlived its lifetime")]
    if state.termination_requested_at is not None:
        return "end", [terminated(state, "lease_expired")]
    if not state.context_open and not _due(state, now):
        return "none", []
    lease = int(lease_seconds * SECOND)
    return "context", [
        (
            Topic.CONTEXT_STARTED,
            {
                "context": owner.context,
                "version": version,
                "worker": owner.worker,
                "fencing_token": owner.token,
                "lease_seconds": lease_seconds,
                "lease_expires_at": micros_instant(now + lease),
                "previous_lost": state.context_open,
            },
        )
    ]


def _due(state: InstanceState, now: int) -> bool:
    if state.status == "queued":
        return True
    pending = [r for r in state.steps.values() if not r.completed and r.due_at is not None]
    if state.status == "running":  # a do waiting out its retry delay (decisions D1)
        return any(r.kind == "do" and r.due_at <= now for r in pending)  # type: ignore[operator]
    record = state.steps.get(state.suspended_at or "")
    if record is None or record.completed or record.due_at is None:
        return False
    if state.status == "sleeping":
        return now >= record.due_at
    # waiting: a matching event, or strictly past the deadline (D19, DW-WAIT-4)
    return (
        now > record.due_at
        or state.matching_event(record.config["type"], record.due_at) is not None
    )


# -- step requests -----------------------------------------------------------------------------


def decide_step(state: InstanceState, request: tuple[Any, ...], now: int) -> StepDecision:
    """One step request from a context that is not fenced (checked by the caller)."""
    if lifetime_over(state, now):
        return StepDecision([], ("stop", "lifetime_exceeded", "the instance outlived its lifetime"))
    kind, name = request[0], request[1]
    record = state.steps.get(name)
    if record is not None and record.kind != kind:  # completed or not: DW-STEP-2, D7
        message = f"step {name[:64]!r} was a {record.kind} step, now called as {kind}"
        return StepDecision([], ("stop", "step_definition_mismatch", message))
    if record is None and len(state.steps) >= MAX_STEPS:
        # The host's limit (DW-STEP-5): the code's own count lives in its process, where
        # the code can reset it (found by a spec review, stop 37: 1,100 steps committed).
        return StepDecision([], ("stop", "step_limit_exceeded", f"more than {MAX_STEPS} steps"))
    if record is not None and record.completed:  # a stale plan: answer from the journal
        # A completed name replays its recorded outcome (DW-STEP-3).
        if record.succeeded:
            return StepDecision([], ("ok", record.result))
        error = record.error or {}
        return StepDecision(
            [], ("failed", error.get("message", ""), error.get("name", "step_failed"))
        )
    if kind == "do":
        return _decide_do(state, record, request, now)
    if kind == "sleep":
        return _decide_sleep(record, name, request[2], now)
    return _decide_wait(state, record, name, request[2], request[3], now)


def _completed(name: str, kind: str, config: dict[str, Any], **data: Any) -> Event:
    return (Topic.STEP_COMPLETED, {"name": name, "kind": kind, "config": config, **data})


def _decide_do(
    state: InstanceState, record: StepRecord | None, request: tuple[Any, ...], now: int
) -> StepDecision:
    _, name, attempt, ok, value, policy_doc = request
    config = record.config if record is not None and record.config else {"retryPolicy": policy_doc}
    policy = RetryPolicy.from_spec(config["retryPolicy"])
    failed_before = record.failed_attempts if record is not None else 0
    if attempt != failed_before + 1:  # a stale context's attempt: the journal moved on
        return StepDecision([], ("stop", "fenced", ""))
    if ok:
        data: dict[str, Any] = {"outcome": "succeeded", "failed_attempts": failed_before}
        if value is not None:
            data["result"] = value
        return StepDecision([_completed(name, "do", config, **data)], ("ok", value))
    if attempt >= policy.max_attempts:  # DW-DO-4: the final failure records step_failed
        error = {"name": "step_failed", "message": value}
        event = _completed(
            name, "do", config, outcome="failed", error=error, failed_attempts=attempt
        )
        return StepDecision([event], ("failed", value, "step_failed"))
    due = now + policy.delay_after(attempt) * SECOND
    # DW-DO-3: a retry always runs in a fresh context, even with a delay of 0.
    suspension = Suspension("retry", name, due, config, attempt, value)
    return StepDecision([], ("stop", "suspend", ""), suspension)


def _decide_sleep(record: StepRecord | None, name: str, seconds: int, now: int) -> StepDecision:
    if record is not None and record.due_at is not None:
        deadline, config = record.due_at, record.config  # fixed at the first call
    else:
        deadline, config = now + seconds * SECOND, {"seconds": seconds}
    if deadline <= now:
        return StepDecision([_completed(name, "sleep", config, outcome="succeeded")], ("ok", None))
    return StepDecision([], ("stop", "suspend", ""), Suspension("sleep", name, deadline, config))


def _decide_wait(
    state: InstanceState,
    record: StepRecord | None,
    name: str,
    event_type: str,
    timeout: int,
    now: int,
) -> StepDecision:
    if record is not None and record.due_at is not None:
        deadline, config = record.due_at, record.config  # the first call's type and deadline
    else:
        deadline = now + timeout * SECOND
        config = {"type": event_type, "timeoutSeconds": timeout}
    match = state.matching_event(config["type"], deadline)
    if match is not None:  # DW-WAIT-2: consumed together with the step result
        data: dict[str, Any] = {"outcome": "succeeded", "event": match.seq}
        if match.payload is not None:
            data["result"] = match.payload
        return StepDecision([_completed(name, "wait", config, **data)], ("ok", match.payload))
    if now > deadline:  # DW-WAIT-4: after the deadline, recorded and raised
        message = f"no {config['type'][:64]!r} event within {config['timeoutSeconds']} s"
        error = {"name": "wait_timeout", "message": message}
        event = _completed(name, "wait", config, outcome="failed", error=error)
        return StepDecision([event], ("failed", message, "wait_timeout"))
    return StepDecision([], ("stop", "suspend", ""), Suspension("wait", name, deadline, config))


# -- how a context ends ------------------------------------------------------------------------


def decide_end(
    state: InstanceState,
    owner: Owner,
    now: int,
    *,
    kind: str,
    reason: str | None = None,
    message: str = "",
    output: dict[str, Any] | None = None,
    suspension: Suspension | None = None,
) -> list[Event]:
    """Events for a context whose code has stopped. ``kind``: complete, errored,
    stopped (suspension or fenced) or lost (its process died or was killed)."""
    if is_fenced(state, owner):
        # Only termination lets a fenced owner write: its code has stopped, which is
        # the proof DW-TERM-1 asks for, as long as no newer context started.
        if (
            state.termination_requested_at is not None
            and not state.is_terminal
            and state.contexts == owner.context
        ):
            return [terminated(state, "owner_stopped")]
        return []
    if lifetime_over(state, now):
        return [errored(state, "lifetime_exceeded", "the instance outlived its lifetime")]
    if kind == "complete":
        data: dict[str, Any] = {"discarded_events": len(state.queue)}
        if output is not None:
            data["output"] = output
        return [(Topic.COMPLETED, data)]
    if kind == "errored":
        return [errored(state, reason or "run_threw", message)]
    if kind == "stopped" and suspension is not None:
        return [_suspended(state, suspension, now)]
    return []  # lost, or stopped without a decision: the lease runs out, another claims it


def _suspended(state: InstanceState, s: Suspension, now: int) -> Event:
    wake = s.due_at
    if s.kind == "wait":
        wake = s.due_at + 1  # a timeout is recorded only strictly after the deadline (D19)
        if state.matching_event(s.config["type"], s.due_at) is not None:
            wake = now  # it arrived while the context was stopping: due at once
    wake = min(wake, state.lifetime_ends_at)  # decisions D14
    if s.kind == "retry":
        return (
            Topic.STEP_RETRY_SCHEDULED,
            {
                "name": s.name,
                "kind": "do",
                "attempt": s.attempt,
                "message": s.message,
                "due_at": micros_instant(s.due_at),
                "wake_at": micros_instant(wake),
                "config": s.config,
            },
        )
    return (
        Topic.STEP_SUSPENDED,
        {
            "name": s.name,
            "kind": s.kind,
            "due_at": micros_instant(s.due_at),
            "wake_at": micros_instant(wake),
            "config": s.config,
        },
    )


def errored(state: InstanceState, reason: str, message: str) -> Event:
    return (
        Topic.ERRORED,
        {"reason": reason, "message": message[:500], "discarded_events": len(state.queue)},
    )


def terminated(state: InstanceState, how: str) -> Event:
    return (Topic.TERMINATED, {"stopped": how, "discarded_events": len(state.queue)})


RETENTION_MICROS = 2_592_000 * SECOND
