"""OpenTelemetry spans continued from the ``traceparent`` recorded on events (decisions M8).

Only when ``opentelemetry`` is installed (the ``otel`` extra) and a tracer provider is
configured (the SDK's, or any but the API's no-op default): otherwise :func:`tracer_for`
returns None and nothing is imported. Spans are made from the facts this process
commits, with the events' own times:

- ``blackops.operation``: accepted (or received) -> its terminal event; parent: the
  recorded traceparent;
- ``blackops.attempt``: attempt.started -> the attempt's end; parent: the operation's span
  when this process holds it, else the recorded traceparent;
- ``blackops.workflow.context``: context_started -> the context stopping;
- ``blackops.workflow.step``: one per step recorded, inside its context's span.

Attributes are the facts' identifiers (never params, payloads or outcomes). A span whose
end another process records is dropped here, never exported half-open.
"""

from __future__ import annotations

import importlib.util
from collections import OrderedDict
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from blackops.observability.facts import ATTEMPT_ENDS, OPERATION_ENDS, Fact

#: Open spans kept per kind; the oldest is dropped (unexported) past this.
MAX_OPEN = 10_000
_NAMES = {"operation": "blackops.operation", "attempt": "blackops.attempt",
          "context": "blackops.workflow.context", "step": "blackops.workflow.step"}  # fmt: skip


def tracer_for(provider: Any = None) -> SpanMaker | None:
    """A span maker on ``provider`` (default: the global one), or None when OpenTelemetry
    is absent or no provider is set."""
    if importlib.util.find_spec("opentelemetry") is None:
        return None
    from opentelemetry import trace

    provider = provider or trace.get_tracer_provider()
    if type(provider).__name__ in ("ProxyTracerProvider", "NoOpTracerProvider"):
        return None  # the API's default: nobody would receive a span
    return SpanMaker(provider.get_tracer("blackops"))


def _nanos(instant: str) -> int:
    moment = datetime.fromisoformat(instant.replace("Z", "+00:00"))
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000


class SpanMaker:
    """Turns committed facts into spans (one per process, behind ``Observability``)."""

    def __init__(self, tracer: Any) -> None:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.tracer = tracer
        self._propagator = TraceContextTextMapPropagator()
        self._open: dict[str, OrderedDict[str, Any]] = {k: OrderedDict() for k in _NAMES}
        self._last_at: OrderedDict[str, str] = OrderedDict()  # a context's latest fact

    def _parent(self, held: Any, traceparent: str | None) -> Any:
        """The context a new span starts in: ``held`` span, else the recorded traceparent
        (else none: a new trace)."""
        from opentelemetry import trace

        if held is not None:
            return trace.set_span_in_context(held)
        if traceparent:
            return self._propagator.extract({"traceparent": traceparent})
        return None

    def _start(self, kind: str, key: str, fact: Fact, parent: Any, at: str | None = None) -> Any:
        span = self.tracer.start_span(
            _NAMES[kind], context=parent, start_time=_nanos(at or fact.at),
            attributes=_attributes(fact),
        )  # fmt: skip
        opened = self._open[kind]
        opened[key] = span
        while len(opened) > MAX_OPEN:
            opened.popitem(last=False)  # never ended: never exported
        return span

    def _end(self, kind: str, key: str, fact: Fact) -> None:
        span = self._open[kind].pop(key, None)
        if span is None:
            return
        span.set_attribute("blackops.end", fact.topic)
        for name, value in _attributes(fact).items():
            span.set_attribute(name, value)
        span.end(end_time=_nanos(fact.at))

    def committed(self, facts: Sequence[Fact]) -> None:
        for fact in facts:
            if "operation_id" in fact.fields:
                self._operation(fact)
            else:
                self._workflow(fact)

    def _operation(self, fact: Fact) -> None:
        op = fact.stream
        if fact.name in ("operation.accepted", "operation.received"):
            if op not in self._open["operation"]:
                self._start("operation", op, fact, self._parent(None, fact.traceparent))
            return
        if fact.name == "attempt.claim_lost":
            self._end("attempt", op, fact)
        elif fact.name == "attempt.started":
            held = self._open["operation"].get(op)
            self._start("attempt", op, fact, self._parent(held, fact.traceparent))
        elif fact.topic in ATTEMPT_ENDS:
            self._end("attempt", op, fact)
        if fact.topic in OPERATION_ENDS:
            self._end("attempt", op, fact)
            self._end("operation", op, fact)

    def _workflow(self, fact: Fact) -> None:
        stream = fact.stream
        if fact.name == "context.started":
            self._start("context", stream, fact, self._parent(None, fact.traceparent))
        elif fact.name in ("step.completed", "step.retry_scheduled"):
            held = self._open["context"].get(stream)
            parent = self._parent(held, fact.traceparent)
            since = self._last_at.get(stream) if held is not None else None
            step = self._start("step", stream, fact, parent, at=since)
            del self._open["step"][stream]
            step.end(end_time=_nanos(fact.at))
        if fact.name == "context.stopped" or fact.name == "step.retry_scheduled":
            self._end("context", stream, fact)
            self._last_at.pop(stream, None)
        elif stream in self._open["context"]:
            self._last_at[stream] = fact.at
            while len(self._last_at) > MAX_OPEN:
                self._last_at.popitem(last=False)


def _attributes(fact: Fact) -> dict[str, Any]:
    return {f"blackops.{key}": value for key, value in fact.fields.items()}
