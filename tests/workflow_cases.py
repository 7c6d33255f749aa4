"""Helpers shared by the workflow tests (test_workflow_steps/instances/errors.py).

Everything runs in the test's process on a fake clock: ``work(app)`` runs every due
context (and its effects) at the clock's current time. The journal of an instance is
read back through ``history`` so a test can check what was recorded, in which
context and at which time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from datetime import datetime
from typing import Any, TypeVar

import pytest

from blackops import (
    Application,
    BlackOpsError,
    WorkflowBinding,
    WorkflowInstance,
    canonical_document,
)
from domain.events import RecordedEvent

T = TypeVar("T")

#: DW-STEP-5 / DW-RET-1 / DW-DO-2 numbers, written out so a changed constant in the
#: engine cannot silently move the tests with it.
LIFETIME = 31_536_000
RETENTION = 2_592_000
MAX_BYTES = 1_048_576
MAX_EVENTS = 1024
MAX_STEPS = 1024
MAX_DELAY = 43_200
MICRO = 0.000001


def sync(awaitable: Coroutine[Any, Any, T]) -> T:
    """Run one binding call (a coroutine) to completion from a synchronous test."""
    return asyncio.run(awaitable)


def work(app: Application) -> None:
    """``work_until_idle`` at the fake clock's current time."""
    asyncio.run(app.work_until_idle())


def status(instance: WorkflowInstance) -> dict[str, Any]:
    return sync(instance.status())


def create(binding: WorkflowBinding, id: str | None = None, params: Any = None) -> WorkflowInstance:
    return sync(binding.create(id=id, params=params))


def send(instance: WorkflowInstance, type: str, payload: Any = None) -> None:
    sync(instance.send_event(type=type, payload=payload))


def error_code(call: Coroutine[Any, Any, Any]) -> str:
    """The ``.code`` of the BlackOpsError a binding call raises (fails if it succeeds)."""
    with pytest.raises(BlackOpsError) as caught:
        sync(call)
    return caught.value.code


def history(app: Application, binding: WorkflowBinding, instance_id: str) -> list[RecordedEvent]:
    """Every recorded event of one instance, in stream order."""
    stream = app.instances.load(binding.resource, instance_id).stream
    return app.store.read_stream(stream)


def topics(app: Application, binding: WorkflowBinding, instance_id: str) -> list[str]:
    return [e.type.removeprefix("workflow.") for e in history(app, binding, instance_id)]


def of_type(
    app: Application, binding: WorkflowBinding, instance_id: str, topic: str
) -> list[RecordedEvent]:
    return [e for e in history(app, binding, instance_id) if e.type == f"workflow.{topic}"]


def contexts_started(app: Application, binding: WorkflowBinding, instance_id: str) -> int:
    return len(of_type(app, binding, instance_id, "context_started"))


def step_record(
    app: Application, binding: WorkflowBinding, instance_id: str, name: str
) -> RecordedEvent:
    """The one ``step_completed`` event of step ``name``."""
    found = [
        e for e in of_type(app, binding, instance_id, "step_completed") if e.data["name"] == name
    ]
    assert len(found) == 1, f"step {name!r} completed {len(found)} times"
    return found[0]


def seconds_between(start: str, end: str) -> float:
    """Seconds from one recorded RFC 3339 instant to another."""

    def parse(text: str) -> datetime:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))

    return (parse(end) - parse(start)).total_seconds()


def instant(moment: datetime) -> str:
    """A clock reading in the journal's instant format, for exact comparisons."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def event_size(type: str, payload: dict[str, Any] | None = None) -> int:
    """DW-EVT-3's measure: the canonical UTF-8 bytes of the stored ``{type, payload?}``."""
    bare = len(canonical_document({"type": type}))
    if payload is None:
        return bare
    # '{"payload":' + payload + ',' + '"type":...}': keys sort "payload" before "type".
    size = bare + len(b'"payload":,') + len(canonical_document(payload))
    if size <= MAX_BYTES:
        assert size == len(canonical_document({"type": type, "payload": payload}))
    return size


def payload_of_size(type: str, size: int) -> dict[str, Any]:
    """A payload whose event ``{type, payload}`` is exactly ``size`` canonical bytes.

    The text mixes 2-byte (é), 4-byte (😀) and escaped (newline, quote) characters so a
    host that counts characters, UTF-16 units or unescaped text gets it wrong.
    """
    head = 'é\n😀"' * 8
    base = event_size(type, {"d": head})
    assert base <= size, "target smaller than the smallest padded payload"
    payload = {"d": head + "x" * (size - base)}
    assert event_size(type, payload) == size
    return payload
