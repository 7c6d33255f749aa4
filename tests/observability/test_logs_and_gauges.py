"""Structured log lines from what an application commits (fields, formats, no params), the
worker's signals, and the gauges read at scrape time (backlog, oldest age, instances by
status, projections), on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from blackops import Application
from blackops.observability.hub import Observability, observe
from blackops.observability.logs import EVENTS, configure
from blackops.testing import FakeClock

SECRET = "s3cret-in-params"


class Flow:
    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> dict[str, Any]:
        await step.do("remember", lambda: {"copy": event.params["secret"]})
        await step.sleep("pause", 60)
        return {"secret": event.params["secret"]}


@pytest.fixture
def logged() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    root = logging.getLogger()
    before = (list(root.handlers), root.level)
    configure("json", "debug", stream)
    try:
        yield stream
    finally:
        root.handlers[:], root.level = before


def samples(app: Application) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    metrics = observe(app.runtime).metrics
    assert metrics is not None
    found = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def test_json_lines_name_each_fact_and_never_the_params(
    store_url: str, clock: FakeClock, logged: io.StringIO
) -> None:
    with Application(store_url, clock=clock) as app:
        observe(app.runtime)

        @app.operation("t.fail")
        def fail(ctx: Any, params: dict[str, Any]) -> None:
            raise ValueError(f"bad {params['secret']}")

        app.register_workflow(Flow, uid="flow")
        op = app.submit("t.fail", {"secret": SECRET}, actor="t", tenant="acme")

        async def run() -> str:
            instance = await app.workflow("flow").create(id="i-1", params={"secret": SECRET})
            await app.work_until_idle()
            return instance.id

        instance = asyncio.run(run())
    text = logged.getvalue()
    assert SECRET not in text
    lines = [json.loads(line) for line in text.splitlines()]
    facts = [line for line in lines if line["logger"] == EVENTS]
    of_op = [line["event"] for line in facts if line.get("operation_id") == op]
    assert of_op == ["operation.received", "operation.accepted", "attempt.started",
                     "attempt.failed", "operation.failed"]  # fmt: skip
    failed = next(line for line in facts if line["event"] == "attempt.failed")
    assert failed["level"] == "warning" and failed["error_type"] == "ValueError"
    assert failed["attempt"] == 1 and failed["fencing_token"] == 1 and failed["tenant"] == "acme"
    of_instance = [line for line in facts if line.get("instance_id") == instance]
    events = [line["event"] for line in of_instance]
    assert events == ["instance.created", "context.started", "step.completed", "context.stopped"]
    started = of_instance[1]
    assert started["workflow"] == "flow" and started["context"] == 1
    assert started["fencing_token"] == 1 and started["worker"]
    assert of_instance[2]["step"] == "remember"
    assert of_instance[3]["kind"] == "sleep" and of_instance[3]["wake_at"]


def test_text_on_a_terminal_json_otherwise() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    root = logging.getLogger()
    before = (list(root.handlers), root.level)
    try:
        for stream, is_json in ((Terminal(), False), (io.StringIO(), True)):
            configure("auto", "info", stream)
            logging.getLogger(EVENTS).info("attempt.started", extra={"fields": {"attempt": 2}})
            line = stream.getvalue().strip()
            if is_json:
                assert json.loads(line)["attempt"] == 2
            else:
                assert line.endswith("INFO    attempt.started  attempt=2"), line
        with pytest.raises(ValueError, match="log format"):
            configure("xml")
    finally:
        root.handlers[:], root.level = before


def test_signals_count_and_log_lease_losses(clock: FakeClock, caplog: Any) -> None:
    with Application("memory://", clock=clock) as app:
        observer = observe(app.runtime)
        assert app.runtime.signals is observer
        observer.leases_renewed("operation", 3)
        observer.lease_lost("operation", "op-1", 4, "w-1", "not_renewed")
        observer.executor_restarted("recycled")
        found = samples(app)
    assert found[("blackops_lease_renewals_total", frozenset({("kind", "operation")}))] == 3
    key = frozenset({("kind", "operation"), ("reason", "not_renewed")})
    assert found[("blackops_lease_abandonments_total", key)] == 1
    assert found[("blackops_executor_restarts_total", frozenset({("reason", "recycled")}))] == 1
    (record,) = [r for r in caplog.records if r.getMessage() == "lease.lost"]
    assert record.fields["operation_id"] == "op-1" and record.fields["fencing_token"] == 4


def test_gauges_read_at_scrape_time(store_url: str, clock: FakeClock) -> None:
    with Application(store_url, clock=clock) as app:
        app.operation("t.echo")(lambda ctx, params: params)
        app.register_workflow(Flow, uid="flow")
        observe(app.runtime)
        empty = samples(app)
        assert empty[("blackops_due_work_backlog", frozenset({("kind", "operation")}))] == 0
        app.submit("t.echo", {}, actor="t", tenant="acme")
        app.submit("t.echo", {}, actor="t", tenant="globex")
        clock.advance(30)
        waiting = samples(app)
        operation = frozenset({("kind", "operation")})
        assert waiting[("blackops_due_work_backlog", operation)] == 2
        assert waiting[("blackops_due_work_oldest_age_seconds", operation)] == 30
        accepted = frozenset({("type", "t.echo"), ("status", "accepted")})
        assert waiting[("blackops_operations", accepted)] == 2  # both tenants, summed

        async def run() -> None:
            await app.workflow("flow").create(id="i-1", params={"secret": SECRET})
            await app.work_until_idle()

        asyncio.run(run())
        done = samples(app)
        assert done[("blackops_due_work_backlog", operation)] == 0
        completed = frozenset({("type", "t.echo"), ("status", "completed")})
        assert done[("blackops_operations", completed)] == 2
        sleeping = frozenset({("workflow", "flow"), ("status", "sleeping")})
        assert done[("blackops_workflow_instances", sleeping)] == 1
        head = done[("blackops_journal_head_position", frozenset())]
        assert head == app.store.last_position()
        counts = frozenset({("projection", "operation_counts")})
        assert done[("blackops_projection_position", counts)] == head
        assert done[("blackops_projection_lag", counts)] == 0
        clock.advance(61)
        woken = samples(app)
        assert woken[("blackops_due_work_backlog", frozenset({("kind", "workflow")}))] == 1
        assert (
            woken[("blackops_due_work_oldest_age_seconds", frozenset({("kind", "workflow")}))] == 1
        )


def test_a_scrape_never_counts_fewer_attempts_than_its_gauges_imply(
    store_url: str, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operation that is claimed and completes while a scrape is being rendered: the
    scrape reads the gauges (the store) before the counters, so an operation it shows
    completed has its attempt counted as started in the same body (decisions M15)."""
    from blackops.observability.metrics import StateCollector

    with Application(store_url, clock=clock) as app:
        app.operation("t.echo")(lambda ctx, params: params)
        observe(app.runtime)
        app.submit("t.echo", {}, actor="t", tenant="acme")
        reading = StateCollector._operations

        def work_then_read(collector: StateCollector) -> Iterator[Any]:
            asyncio.run(app.work_until_idle())  # the worker, between two reads of a scrape
            return reading(collector)

        monkeypatch.setattr(StateCollector, "_operations", work_then_read)
        body = samples(app)
        completed = frozenset({("type", "t.echo"), ("status", "completed")})
        assert body[("blackops_operations", completed)] == 1
        started = ("blackops_attempts_started_total", frozenset({("type", "t.echo")}))
        assert body.get(started, 0) == 1


def test_a_facts_record_names_where_it_was_logged(clock: FakeClock, caplog: Any) -> None:
    """The hub builds fact records itself (no stack walk): they still name their origin,
    their level and their fields for any handler, as Logger.log's did."""
    caplog.set_level(logging.INFO, logger=EVENTS)
    with Application("memory://", clock=clock) as app:
        observe(app.runtime)
        app.operation("t.noop")(lambda ctx, params: None)
        op = app.submit("t.noop", {}, actor="a", tenant="t")
        asyncio.run(app.work_until_idle())
    (record,) = [r for r in caplog.records if r.getMessage() == "operation.completed"]
    assert record.name == EVENTS and record.levelno == logging.INFO
    assert (record.funcName, record.filename) == ("_log", "hub.py")
    assert record.lineno == Observability._log.__code__.co_firstlineno
    assert record.fields["operation_id"] == op and record.fields["event"] == "operation.completed"
