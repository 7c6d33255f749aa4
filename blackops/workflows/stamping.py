"""How instance events are stamped: the execution context on each, and appends at the version
a caller or a context last saw (shared by the engine, the callers' side and retention)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from domain.events import NewEvent
from domain.workflow import InstanceState
from domain.workflow_rules import Event, Owner
from journal.store import Append


def event_context(state: InstanceState, owner: Owner | None = None) -> dict[str, Any]:
    """The execution context on every instance event: who asked (the creation's
    actor and correlation), and which context, worker and token act now."""
    origin = state.origin
    return {
        "instance_id": state.instance_id,
        "workflow": state.workflow,
        "tenant": state.space,
        "actor": origin.get("actor"),
        "correlation_id": origin.get("correlation_id"),
        "causation_id": origin.get("causation_id"),
        "traceparent": origin.get("traceparent"),
        "context": owner.context if owner else 0,
        "worker": owner.worker if owner else None,
        "fencing_token": owner.token if owner else None,
    }


def stamp(state: InstanceState, events: Sequence[Event], at: str, ctx: dict[str, Any]) -> Append:
    """The append of ``events`` at the version ``state`` was folded to."""
    return Append(state.stream, state.version, [NewEvent(t, at, ctx, d) for t, d in events])


def fold_in(state: InstanceState, append: Append) -> None:
    """Apply our own committed append to the in-memory state."""
    for event in append.events:
        state.apply(event.type, event.at, event.data, event.context)
