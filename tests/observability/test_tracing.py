"""Spans continued from the recorded traceparent (decisions M8), checked with the SDK's
in-memory exporter: names, the recorded trace and parent ids, attributes, no payloads.
Under CI=true a missing OpenTelemetry SDK fails (the ``otel`` extra is installed by make)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from typing import Any

import pytest

from blackops import Application, Retryable, Supervision
from blackops.observability.hub import observe
from blackops.testing import FakeClock

if os.environ.get("CI") == "true":
    import opentelemetry.sdk  # noqa: F401  (CI must run these tests, never skip them)
sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

TRACE = "0af7651916cd43dd8448eb211c80319c"
PARENT = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE}-{PARENT}-01"
SECRET = "hunter2-do-not-log"


def traced(app: Application) -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    observe(app.runtime, metrics=False).trace_with(provider)
    return exporter


def values(span: Any) -> list[str]:
    return [str(v) for v in (span.attributes or {}).values()]


def attrs(span: Any) -> dict[str, Any]:
    return dict(span.attributes or {})


def test_operation_and_attempt_spans_continue_the_recorded_traceparent(
    store_url: str, clock: FakeClock
) -> None:
    calls: list[int] = []
    with Application(store_url, clock=clock) as app:

        @app.operation("t.flaky", supervision=Supervision(max_attempts=3, initial_delay_seconds=1))
        def flaky(ctx: Any, params: dict[str, Any]) -> dict[str, Any]:
            calls.append(ctx.attempt)
            if ctx.attempt == 1:
                raise Retryable("not yet")
            return {"ok": True, "echo": params["secret"]}

        exporter = traced(app)
        op = app.submit("t.flaky", {"secret": SECRET}, actor="t", tenant="acme",
                        traceparent=TRACEPARENT)  # fmt: skip
        asyncio.run(app.work_until_idle())
        clock.advance(5)
        asyncio.run(app.work_until_idle())
        assert app.status(op)["status"] == "completed" and calls == [1, 2]
    spans = exporter.get_finished_spans()
    by_name: dict[str, list[Any]] = {}
    for span in spans:
        by_name.setdefault(span.name, []).append(span)
    (operation,) = by_name["blackops.operation"]
    attempts = sorted(by_name["blackops.attempt"], key=lambda s: s.start_time)
    assert len(attempts) == 2
    assert all(s.context.trace_id == int(TRACE, 16) for s in spans)
    assert operation.parent is not None and operation.parent.span_id == int(PARENT, 16)
    assert operation.parent.is_remote
    for number, attempt in enumerate(attempts, start=1):
        assert attempt.parent is not None
        assert attempt.parent.span_id == operation.context.span_id
        assert attempt.attributes["blackops.attempt"] == number
        assert attempt.attributes["blackops.operation_id"] == op
        assert attempt.attributes["blackops.type"] == "t.flaky"
        assert attempt.attributes["blackops.fencing_token"] == number
    assert attempts[0].attributes["blackops.end"] == "attempt.failed"
    assert attempts[1].attributes["blackops.end"] == "operation.completed"
    assert operation.attributes["blackops.end"] == "operation.completed"
    assert operation.attributes["blackops.tenant"] == "acme"
    # The spans' times are the journal's: the retry waited 5 s of the fake clock.
    assert attempts[1].start_time - operation.start_time >= 5 * 10**9
    assert not any(SECRET in v for span in spans for v in values(span))


class Steps:
    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> dict[str, Any]:
        first = await step.do("first", lambda: {"n": 1})
        second = await step.do("second", lambda: {"n": first["n"] + 1})
        return {"secret": event.params["secret"], **second}


def test_workflow_context_and_step_spans(store_url: str, clock: FakeClock) -> None:
    with Application(store_url, clock=clock) as app:
        app.register_workflow(Steps, uid="steps")
        exporter = traced(app)

        async def run() -> str:
            instance = await app.workflow("steps").create(params={"secret": SECRET})
            await app.work_until_idle()
            return str((await instance.status())["status"])

        assert asyncio.run(run()) == "complete"
    spans = exporter.get_finished_spans()
    contexts = [s for s in spans if s.name == "blackops.workflow.context"]
    steps = [s for s in spans if s.name == "blackops.workflow.step"]
    assert len(contexts) == 1 and len(steps) == 2
    assert sorted(str(attrs(s)["blackops.step"]) for s in steps) == ["first", "second"]
    for step in steps:
        assert step.parent is not None and step.parent.span_id == contexts[0].context.span_id
        assert step.context.trace_id == contexts[0].context.trace_id
    assert attrs(contexts[0])["blackops.workflow"] == "steps"
    assert attrs(contexts[0])["blackops.end"] == "workflow.completed"
    assert not any(SECRET in v for span in spans for v in values(span))


def test_importing_blackops_does_not_import_opentelemetry() -> None:
    probe = (
        "import sys, blackops\n"
        "from blackops import Application\n"
        "import blackops.observability.hub\n"
        "print([m for m in sys.modules if m.startswith(('opentelemetry', 'prometheus'))])\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
