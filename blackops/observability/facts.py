"""Committed journal events as facts an operator cares about (claims, attempt ends,
retries, dead letters, context starts and stops), with the fields logs, counters and spans
may show: identifiers and counters of the execution context, never params, payloads,
outcomes, error messages or tokens (decisions M5)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from domain.lifecycle import EventType
from domain.workflow import Topic
from journal.store import Append

#: Operation events worth a fact, and what each one is to an operator.
OPERATION_FACTS = {
    EventType.RECEIVED.value: "operation.received",
    EventType.ACCEPTED.value: "operation.accepted",
    EventType.ATTEMPT_STARTED.value: "attempt.started",
    EventType.ATTEMPT_FAILED.value: "attempt.failed",
    EventType.ATTEMPT_RETRY_SCHEDULED.value: "retry.scheduled",
    EventType.ATTEMPT_CLAIM_LOST.value: "attempt.claim_lost",
    EventType.ATTEMPT_INTERRUPTED.value: "attempt.interrupted",
    EventType.COMPLETED.value: "operation.completed",
    EventType.REJECTED.value: "operation.rejected",
    EventType.FAILED.value: "operation.failed",
    EventType.DEAD_LETTERED.value: "operation.dead_lettered",
}
#: Events that end an attempt (its span, its "attempt ended" line).
ATTEMPT_ENDS = frozenset(
    {
        EventType.ATTEMPT_FAILED.value,
        EventType.ATTEMPT_INTERRUPTED.value,
        EventType.COMPLETED.value,
        EventType.REJECTED.value,
    }
)
OPERATION_ENDS = frozenset(
    {
        EventType.COMPLETED.value,
        EventType.REJECTED.value,
        EventType.FAILED.value,
        EventType.DEAD_LETTERED.value,
    }
)
WORKFLOW_FACTS = {
    Topic.CREATED: "instance.created",
    Topic.CONTEXT_STARTED: "context.started",
    Topic.STEP_COMPLETED: "step.completed",
    Topic.STEP_RETRY_SCHEDULED: "step.retry_scheduled",
    Topic.STEP_SUSPENDED: "context.stopped",
    Topic.COMPLETED: "context.stopped",
    Topic.ERRORED: "context.stopped",
    Topic.TERMINATED: "context.stopped",
}
#: Data fields that are identifiers, counts or times (never a document someone wrote).
_SAFE_DATA = ("delay_seconds", "due_at", "wake_at", "kind", "step", "cause", "code")


@dataclass(frozen=True, slots=True)
class Fact:
    """One committed event as logs, metrics and spans see it."""

    name: str  # what happened (OPERATION_FACTS / WORKFLOW_FACTS values)
    topic: str  # the journal event type
    stream: str
    at: str
    fields: dict[str, Any]  # identifiers only, safe to log
    traceparent: str | None

    @property
    def type(self) -> str:
        """The operation type or the Workflow's uid (a bounded label)."""
        found = self.fields.get("type") or self.fields.get("workflow") or ""
        return str(found)


def facts(appends: Sequence[Append]) -> Iterator[Fact]:
    for append in appends:
        for event in append.events:
            name = OPERATION_FACTS.get(event.type) or WORKFLOW_FACTS.get(event.type)
            if name is None:
                continue
            yield Fact(
                name, event.type, append.stream, event.at,
                _fields(event.context, event.data), event.context.get("traceparent"),
            )  # fmt: skip


def _fields(context: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if "operation_id" in context:
        fields["operation_id"] = context["operation_id"]
        fields["type"] = context.get("operation_type")
        fields["tenant"] = context.get("tenant")
        fields["attempt"] = context.get("attempt")
    else:
        fields["instance_id"] = context.get("instance_id")
        fields["workflow"] = context.get("workflow")
        fields["space"] = context.get("tenant")
        fields["context"] = context.get("context")
    fields["fencing_token"] = context.get("fencing_token")
    fields["worker"] = context.get("worker")
    for key in _SAFE_DATA:
        value = data.get(key)
        if isinstance(value, (int, float, str)) and not isinstance(value, bool):
            fields[key] = value
    if isinstance(data.get("name"), str) and "instance_id" in fields:
        fields["step"] = data["name"]  # a step's name, chosen in the workflow's code
    error = data.get("error")
    if isinstance(error, dict) and isinstance(error.get("type"), str):
        fields["error_type"] = error["type"]
    return {key: value for key, value in fields.items() if value is not None}
