"""One application's observer: its metrics, its fact log and its spans, fed by the commits
of its store and by its worker's signals (``observe(app.runtime)``, once per Runtime)."""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING

from blackops.observability.facts import Fact, facts
from blackops.observability.logs import EVENTS
from blackops.observability.signals import Signals
from journal.store import Append

if TYPE_CHECKING:
    from blackops.observability.metrics import Metrics
    from blackops.observability.tracing import SpanMaker
    from blackops.runtime import Runtime

_BY_RUNTIME: weakref.WeakKeyDictionary[Runtime, Observability] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()
#: Facts logged at INFO (the brief's list) or WARNING; the rest at DEBUG.
_LEVELS = {
    "attempt.started": logging.INFO,
    "operation.completed": logging.INFO,
    "operation.rejected": logging.INFO,
    "attempt.interrupted": logging.INFO,
    "retry.scheduled": logging.INFO,
    "context.started": logging.INFO,
    "context.stopped": logging.INFO,
    "attempt.failed": logging.WARNING,
    "attempt.claim_lost": logging.WARNING,
    "operation.failed": logging.WARNING,
    "operation.dead_lettered": logging.WARNING,
}


def observe(runtime: Runtime, *, metrics: bool = True) -> Observability:
    """The observer of ``runtime`` (made and attached on first call; the same after)."""
    with _LOCK:
        found = _BY_RUNTIME.get(runtime)
        if found is None:
            found = _BY_RUNTIME[runtime] = Observability(runtime, metrics=metrics)
        elif metrics and found.metrics is None:  # first made without (a tracing-only test)
            from blackops.observability.metrics import Metrics

            found.metrics = Metrics(runtime)
    found.attach()
    return found


class Observability(Signals):
    """Counts, logs and traces what this process commits and signals."""

    def __init__(self, runtime: Runtime, *, metrics: bool = True) -> None:
        from blackops.observability.tracing import tracer_for

        self.runtime = runtime
        self.metrics: Metrics | None = None
        if metrics:
            from blackops.observability.metrics import Metrics

            self.metrics = Metrics(runtime)
        self.spans: SpanMaker | None = tracer_for()
        self.log = logging.getLogger(EVENTS)
        self._lock = threading.Lock()

    def trace_with(self, provider: object) -> None:
        """Make spans on this OpenTelemetry tracer provider (not the global one)."""
        from blackops.observability.tracing import tracer_for

        with self._lock:
            self.spans = tracer_for(provider)

    def attach(self) -> None:
        """Observe the runtime's store (now or once opened: nothing is opened here) and
        its workers."""
        self.runtime.add_commit_observer(self.committed)
        self.runtime.signals = self

    # -- what the store tells ----------------------------------------------------------------

    def committed(self, appends: Sequence[Append], members: int, seconds: float) -> None:
        found = list(facts(appends))
        with self._lock:
            if self.metrics is not None:
                self.metrics.committed(found, members, seconds)
            if self.spans is not None:
                self.spans.committed(found)
        for fact in found:
            self._log(fact)

    def _log(self, fact: Fact) -> None:
        level = _LEVELS.get(fact.name, logging.DEBUG)
        if not self.log.isEnabledFor(level):
            return
        fields = {"event": fact.name, **fact.fields}
        if fact.traceparent:
            fields["trace_id"] = fact.traceparent.split("-")[1]
        # Logger.log would look for its caller in the stack (a third of a line's cost): it is
        # always this method, so the record names it and goes straight to the handlers.
        record = self.log.makeRecord(
            self.log.name, level, __file__, _LINE, fact.name, (), None, "_log", {"fields": fields}
        )
        self.log.handle(record)

    # -- what the worker tells (Signals) -------------------------------------------------------

    def leases_renewed(self, kind: str, count: int) -> None:
        if self.metrics is not None and count:
            self.metrics.renewals.labels(kind).inc(count)

    def lease_lost(self, kind: str, key: str, token: int, worker: str, why: str) -> None:
        if self.metrics is not None:
            self.metrics.abandoned.labels(kind, why).inc()
        name = "operation_id" if kind == "operation" else "instance_stream"
        fields = {"event": "lease.lost", "kind": kind, name: key, "fencing_token": token,
                  "worker": worker, "reason": why}  # fmt: skip
        self.log.warning("lease.lost", extra={"fields": fields})

    def executor_restarted(self, why: str) -> None:
        if self.metrics is not None:
            self.metrics.restarts.labels(why).inc()
        self.log.info("executor.restarted", extra={"fields": {"event": "executor.restarted",
                                                                  "reason": why}})  # fmt: skip


#: The line a fact's record names: `Observability._log`'s (found once, not per record).
_LINE = Observability._log.__code__.co_firstlineno
