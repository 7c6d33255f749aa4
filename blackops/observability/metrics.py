"""The Prometheus metrics of one application (a ``CollectorRegistry`` of its own, never the
global one: several applications and tests in one process do not collide, decisions M3).

Counters and histograms are moved by what this process commits and signals; gauges that
a projection or the due-work index knows are read when Prometheus scrapes (a collector),
so a figure is never older than the scrape and nothing is scanned in the journal.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from blackops.observability.facts import Fact
from journal.work_index import moment_micros

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from blackops.runtime import Runtime

log = logging.getLogger("blackops.metrics")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: Members per transaction: 1 alone, up to the queue's cap under load.
GROUP_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)
COMMIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: Which fact moves which attempt counter (label ``type``: the operation type).
_ATTEMPT_COUNTERS = {
    "attempt.started": "started",
    "attempt.failed": "failed",
    "retry.scheduled": "retried",
    "attempt.claim_lost": "claim_lost",
}


class Metrics:
    """Every metric of one application; ``render()`` is the scrape's body."""

    def __init__(self, runtime: Runtime) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # Collected in registration order: the gauges read the store first, then the counters
        # (decisions M15). A commit is counted before its writer goes on, so whatever the
        # gauges show (a completed operation) is already in the counters read after them;
        # the other way round a scrape could show an operation completed by an attempt it
        # has not counted as started yet.
        r.register(StateCollector(runtime))
        self.attempts = {
            key: Counter(f"blackops_attempts_{key}", help_text, ["type"], registry=r)
            for key, help_text in (
                ("started", "Attempts started (claimed) by this process"),
                ("failed", "Attempts that ended with a handler error, recorded by this process"),
                ("retried", "Retries scheduled by this process"),
                ("claim_lost", "Claims found lost (lease ran out) and recorded by this process"),
            )
        }
        self.dead_letters = Counter(
            "blackops_operations_dead_lettered", "Operations dead-lettered by this process",
            ["type"], registry=r,
        )  # fmt: skip
        self.contexts = Counter(
            "blackops_workflow_contexts_started", "Workflow contexts started by this process",
            ["workflow"], registry=r,
        )  # fmt: skip
        self.renewals = Counter(
            "blackops_lease_renewals", "Leases extended by heartbeats", ["kind"], registry=r
        )
        self.abandoned = Counter(
            "blackops_lease_abandonments",
            "Leases lost or given up (the attempt or context is never committed by us)",
            ["kind", "reason"],
            registry=r,
        )
        self.restarts = Counter(
            "blackops_executor_restarts", "Workflow executor processes replaced", ["reason"],
            registry=r,
        )  # fmt: skip
        self.group_size = Histogram(
            "blackops_commit_group_size", "Appends committed per journal transaction",
            buckets=GROUP_BUCKETS, registry=r,
        )  # fmt: skip
        self.commit_seconds = Histogram(
            "blackops_commit_seconds", "Time one journal transaction took to commit",
            buckets=COMMIT_BUCKETS, registry=r,
        )  # fmt: skip
        self.http = Histogram(
            "blackops_http_request_duration_seconds",
            "HTTP requests by route template (never the raw path), method and status",
            ["route", "method", "status"],
            buckets=HTTP_BUCKETS,
            registry=r,
        )

    def committed(self, facts: Sequence[Fact], members: int, seconds: float) -> None:
        self.group_size.observe(members)
        self.commit_seconds.observe(seconds)
        for fact in facts:
            key = _ATTEMPT_COUNTERS.get(fact.name)
            if key is not None:
                self.attempts[key].labels(fact.type).inc()
            elif fact.name == "operation.dead_lettered":
                self.dead_letters.labels(fact.type).inc()
            elif fact.name == "context.started":
                self.contexts.labels(fact.type).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


class StateCollector(Collector):
    """Gauges read at scrape time: operations and instances by status (the projections'
    counts), projection positions and lag, the journal head, the due-work backlog."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def describe(self) -> Iterator[Metric]:
        return iter(())  # collected only on a scrape: describing must not touch the store

    def collect(self) -> Iterator[Metric]:
        for part in (self._operations, self._instances, self._projections, self._due):
            try:
                yield from part()
            except Exception as error:  # a store that cannot answer: the rest still scrapes
                log.warning("metrics: %s not collected: %s", part.__name__.strip("_"), error)

    def _operations(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "blackops_operations", "Operations by type and status (the operation_counts "
            "projection, summed over tenants)", labels=["type", "status"],
        )  # fmt: skip
        totals: dict[tuple[str, str], int] = {}
        for per_type in self.runtime.projections.counts().values():
            for kind, statuses in per_type.items():
                for status, count in statuses.items():
                    totals[(kind, status)] = totals.get((kind, status), 0) + count
        for (kind, status), count in sorted(totals.items()):
            family.add_metric([kind, status], count)
        yield family

    def _instances(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "blackops_workflow_instances", "Workflow instances by Workflow and status "
            "(running, sleeping, waiting, ...: the instance_counts projection)",
            labels=["workflow", "status"],
        )  # fmt: skip
        counts = self.runtime.projections.instance_counts_by_workflow()
        for workflow, statuses in sorted(counts.items()):
            for status, count in sorted(statuses.items()):
                family.add_metric([workflow, status], count)
        yield family

    def _projections(self) -> Iterator[Metric]:
        head = GaugeMetricFamily("blackops_journal_head_position", "The journal's last position")
        position = GaugeMetricFamily(
            "blackops_projection_position", "Journal position a projection has applied",
            labels=["projection"],
        )  # fmt: skip
        lag = GaugeMetricFamily(
            "blackops_projection_lag", "Events a projection is behind the journal head",
            labels=["projection"],
        )  # fmt: skip
        head.add_metric([], self.runtime.store.last_position())
        for status in self.runtime.projections.status():
            position.add_metric([status["name"]], status["position"])
            lag.add_metric([status["name"]], status["lag"])
        yield from (head, position, lag)

    def _due(self) -> Iterator[Metric]:
        now = moment_micros(self.runtime.clock.now())
        summary = self.runtime.store.due_work_summary(now)
        backlog = GaugeMetricFamily(
            "blackops_due_work_backlog", "Due-work rows claimable now (operations, instances)",
            labels=["kind"],
        )  # fmt: skip
        age = GaugeMetricFamily(
            "blackops_due_work_oldest_age_seconds",
            "How long the oldest claimable row has been due (0: nothing due)",
            labels=["kind"],
        )
        for kind in ("operation", "workflow"):
            count, earliest = summary.get(kind, (0, now))
            backlog.add_metric([kind], count)
            age.add_metric([kind], max(0, now - earliest) / 1_000_000)
        yield from (backlog, age)
