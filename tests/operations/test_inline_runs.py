"""Inline operations on SQLite and PostgreSQL: OL-1, OL-3..OL-6, OL-8, OL-9, OL-12."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel

from blackops import (
    Application,
    BlackOpsError,
    DocumentError,
    ExecutionContext,
    OperationRejected,
    Retryable,
    Supervision,
    canonical_document,
)
from blackops.testing import FakeClock
from domain.clock import format_instant
from domain.errors import FencingError, NotFound
from domain.events import NewEvent
from domain.lifecycle import EventType
from domain.operation import LifecycleViolation
from journal.operations import OperationJournal

SUCCESS = ["operation.received", "attempt.started", "attempt.finalizing", "operation.completed"]


def types_of(app: Application, operation_id: str) -> list[str]:
    return [e["type"] for e in app.events(operation_id)]


def test_ol1_ol4_inline_success_skips_accepted(app: Application) -> None:
    """OL-1/OL-4: Received -> Running -> Finalizing -> Completed, no Accepted, in-process."""
    ran_in: list[str] = []

    @app.operation("greeting.say")
    def say(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        ran_in.append(ctx.operation_id)
        return {"hello": params["name"]}

    result = app.run("greeting.say", {"name": "ana"}, actor="ana", tenant="acme")
    assert result.status == "completed" and result.outcome == {"hello": "ana"}
    assert result.rejection is None and result.failure is None
    assert ran_in == [result.operation_id]
    assert types_of(app, result.operation_id) == SUCCESS
    assert app.status(result.operation_id)["status"] == "completed"
    assert app.status(result.operation_id)["mode"] == "inline"


def test_ol12_execution_context_on_every_event(app: Application, clock: FakeClock) -> None:
    """OL-12: ids, actor, tenant and attempt of each transition come from the context."""
    seen: list[ExecutionContext] = []

    @app.operation("ctx.probe")
    def probe(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        seen.append(ctx)

    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    result = app.run(
        "ctx.probe",
        {},
        actor={"id": "ana", "kind": "user"},
        tenant="acme",
        traceparent=traceparent,
        causation_id="req-7",
    )
    ctx = seen[0]
    assert (ctx.operation_id, ctx.tenant, ctx.attempt) == (result.operation_id, "acme", 1)
    assert ctx.actor.id == "ana" and ctx.actor.kind == "user"
    assert ctx.correlation_id == result.operation_id and ctx.causation_id == "req-7"
    events = app.events(result.operation_id)
    for event in events:
        context = event["context"]
        assert context["operation_id"] == result.operation_id
        assert context["actor"] == {"id": "ana", "kind": "user"}
        assert context["tenant"] == "acme"
        assert context["correlation_id"] == result.operation_id
        assert context["causation_id"] == "req-7"
        assert context["traceparent"] == traceparent
        assert event["at"] == format_instant(clock.now())
    assert [e["context"]["attempt"] for e in events] == [0, 1, 1, 1]
    assert [e["version"] for e in events] == [1, 2, 3, 4]


def test_ol12_a_child_operation_continues_its_parents_trace(app: Application) -> None:
    """An operation run or submitted from a handler is that operation's child: its
    correlation, its causation and its traceparent (the same trace; it started a new one:
    found by a defect hunt, stop 40). A traceparent given to the child stays its own."""
    seen: dict[str, ExecutionContext] = {}
    own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

    @app.operation("t.child")
    def child(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        seen[params["as"]] = ctx

    @app.operation("t.parent")
    def parent(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        seen["parent"] = ctx
        app.run("t.child", {"as": "inherits"}, actor="a", tenant=ctx.tenant)
        app.run("t.child", {"as": "own"}, actor="a", tenant=ctx.tenant, traceparent=own)

    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    app.run("t.parent", {}, actor="a", tenant="acme", traceparent=traceparent)
    first, mine = seen["inherits"], seen["own"]
    assert first.causation_id == seen["parent"].operation_id
    assert first.correlation_id == seen["parent"].correlation_id
    assert first.traceparent == traceparent and mine.traceparent == own
    recorded = app.events(first.operation_id)[0]["context"]["traceparent"]
    assert recorded == traceparent


def test_every_timestamp_comes_from_the_injected_clock(store_url: str) -> None:
    """Principle 5: every `at` and every `due_at` is the injected clock's time."""
    clock = FakeClock(FakeClock().now() - timedelta(days=400))
    app = Application(store_url, clock=clock)
    try:

        @app.operation(
            "slow.step", supervision=Supervision(max_attempts=2, initial_delay_seconds=300)
        )
        def slow(ctx: ExecutionContext, params: dict[str, Any]) -> None:
            if ctx.attempt == 1:
                raise Retryable("later")

        start = clock.now()
        result = app.run("slow.step", {}, actor="t", tenant="acme")
        first, later = format_instant(start), format_instant(start + timedelta(seconds=300))
        events = app.events(result.operation_id)
        # Attempt 1 and its failure at the start; attempt 2 after the fake 300 s wait.
        assert [e["at"] for e in events] == [first] * 5 + [later] * 3
        scheduled = next(e for e in events if e["type"] == "attempt.retry_scheduled")
        assert scheduled["data"]["due_at"] == later
    finally:
        app.close()


@pytest.mark.parametrize(
    "category", ["validation", "authorization", "not_found", "conflict", "business_rule"]
)
def test_ol6_rejection_categories_are_terminal_rejections(app: Application, category: str) -> None:
    """OL-6: OperationRejected -> Rejected with a stable category/code; Running -> Rejected."""

    @app.operation("order.place")
    def place(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        raise OperationRejected(category, "order_refused", "no, because")

    result = app.run("order.place", {}, actor="t", tenant="acme")
    assert result.status == "rejected" and result.outcome is None and result.failure is None
    assert result.rejection is not None
    assert (result.rejection.category, result.rejection.code) == (category, "order_refused")
    assert types_of(app, result.operation_id) == [
        "operation.received",
        "attempt.started",
        "operation.rejected",
    ]
    status = app.status(result.operation_id)
    assert status["status"] == "rejected"
    assert status["rejection"] == {
        "category": category,
        "code": "order_refused",
        "message": "no, because",
    }


def test_ol6_unknown_rejection_category_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="category"):
        OperationRejected("teapot", "x", "y")
    with pytest.raises(ValueError, match="code"):
        OperationRejected("validation", "", "y")


@pytest.mark.parametrize(
    ("code", "recorded"),
    [("INSUFFICIENT_FUNDS", "insufficient_funds"), ("Not A Code", "not_a_code"),
     ("9 lives", "r_9_lives"), ("x" * 80, "x" * 64), ("ok.code-1", "ok.code-1")],
)  # fmt: skip
def test_ol6_a_rejection_with_any_code_is_a_rejection(
    app: Application, code: str, recorded: str
) -> None:
    """A code the journal does not record as written is recorded in its spelling: refused,
    it turned the rejection into a ValueError, a failure (found by a spec review, stop 36)."""

    @app.operation("t.refuse")
    def refuse(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        raise OperationRejected("business_rule", code, "no funds")

    result = app.run("t.refuse", {}, actor="t", tenant="acme")
    assert result.status == "rejected", result
    status = app.status(result.operation_id)
    assert status["rejection"] == {
        "category": "business_rule", "code": recorded, "message": "no funds"
    }  # fmt: skip


class Order(BaseModel):
    sku: str
    quantity: int


class Receipt(BaseModel):
    schema_version: ClassVar[int] = 3
    sku: str
    total: int


def test_received_to_rejected_when_params_fail_the_declared_model(app: Application) -> None:
    """OL-3 "Received -> Rejected": a valid document that fails the pydantic input model."""
    calls: list[Order] = []

    @app.operation("order.typed")
    def typed(ctx: ExecutionContext, params: Order) -> Receipt:
        calls.append(params)
        return Receipt(sku=params.sku, total=params.quantity * 3)

    bad = app.run(
        "order.typed",
        {"sku": "A", "quantity": "lots", "secret": "s3cr3t"},
        actor="t",
        tenant="acme",
    )
    assert bad.status == "rejected" and calls == []
    assert bad.rejection is not None and bad.rejection.category == "validation"
    assert "quantity" in bad.rejection.message and "lots" not in bad.rejection.message
    assert types_of(app, bad.operation_id) == ["operation.received", "operation.rejected"]

    good = app.run("order.typed", {"sku": "A", "quantity": 2}, actor="t", tenant="acme")
    assert calls == [Order(sku="A", quantity=2)]
    assert good.outcome == {"sku": "A", "total": 6}
    assert Receipt.model_validate(good.outcome) == Receipt(sku="A", total=6)
    completed = app.events(good.operation_id)[-1]["data"]
    assert completed["outcome_type"].endswith("test_inline_runs.Receipt")
    assert completed["outcome_schema_version"] == 3


def test_ol8_ordinary_exception_goes_through_supervising_to_failed(app: Application) -> None:
    """OL-8: an ordinary exception is never a rejection; OL-3 final failure path."""

    @app.operation("job.crash")
    def crash(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        raise KeyError("missing")

    result = app.run("job.crash", {}, actor="t", tenant="acme")
    assert result.status == "failed" and result.rejection is None
    assert result.failure is not None and "KeyError" in result.failure.message
    assert types_of(app, result.operation_id) == [
        "operation.received",
        "attempt.started",
        "attempt.failed",
        "attempt.supervising",
        "operation.failed",
    ]
    supervising = app.events(result.operation_id)[3]["data"]
    assert supervising["decision"] == "fail" and supervising["reason"] == "not_retryable"
    assert app.status(result.operation_id)["failure"]["type"] == "KeyError"


def test_ol7_inline_retries_in_process_with_the_policy_delays(
    app: Application, clock: FakeClock
) -> None:
    """OL-3 retry path in-process (decision P5): delays on the injected clock."""
    attempts: list[tuple[int, str]] = []
    policy = Supervision(
        max_attempts=4, backoff="exponential", initial_delay_seconds=300, max_delay_seconds=900
    )

    @app.operation("pay.charge", supervision=policy)
    def charge(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        attempts.append((ctx.attempt, format_instant(clock.now())))
        if ctx.attempt < 4:
            raise Retryable("gateway timeout")
        return {"charged": True}

    start = clock.now()
    result = app.run("pay.charge", {}, actor="t", tenant="acme")
    assert result.status == "completed" and result.attempt == 4
    # 300, 600, then capped at 900: waited on the fake clock, not in real time.
    offsets = [0, 300, 900, 1800]
    assert attempts == [
        (i + 1, format_instant(start + timedelta(seconds=s))) for i, s in enumerate(offsets)
    ]
    retry = ["attempt.failed", "attempt.supervising", "attempt.retry_scheduled", "attempt.started"]
    assert types_of(app, result.operation_id) == [
        "operation.received",
        "attempt.started",
        *retry * 3,
        "attempt.finalizing",
        "operation.completed",
    ]
    scheduled = [
        e["data"] for e in app.events(result.operation_id) if e["type"] == "attempt.retry_scheduled"
    ]
    assert [s["delay_seconds"] for s in scheduled] == [300, 600, 900]


class GatewayDown(Exception):
    pass


def test_ol7_exhaustion_fails_inline_even_when_policy_says_dead_letter(app: Application) -> None:
    """Dead Letter is Deferred quarantine only (OL-3); Inline exhaustion is Failed."""
    policy = Supervision(max_attempts=2, retry_on=(GatewayDown,), exhausted="dead_letter")

    @app.operation("pay.refund", supervision=policy)
    def refund(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        raise GatewayDown("still down")

    result = app.run("pay.refund", {}, actor="t", tenant="acme")
    assert result.status == "failed" and result.attempt == 2
    events = app.events(result.operation_id)
    assert events[-1]["type"] == "operation.failed"
    assert events[-2]["data"] == {"attempt": 2, "decision": "fail", "reason": "exhausted"}
    assert "operation.dead_lettered" not in [e["type"] for e in events]


def test_ol9_inline_never_creates_an_outcome_record(app: Application) -> None:
    """OL-9: the outcome goes back to the caller only; the store holds no copy of it."""
    marker = "outcome-marker-7f3a9c"

    @app.operation("report.make")
    def make(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        return {"report": marker}

    result = app.run("report.make", {}, actor="t", tenant="acme")
    assert result.outcome == {"report": marker}
    everything = list(app.store.iter_after(0))
    assert {e.stream for e in everything} == {result.operation_id}
    assert all(marker not in repr(e.data) for e in everything)
    raw = app.store._recorder.select_notifications(None, 1000)
    assert all(marker.encode() not in n.state for n in raw)
    completed = everything[-1].data
    assert completed["outcome_recorded"] is False
    assert completed["outcome_digest"].startswith("sha256:")


def test_bad_input_is_refused_before_any_side_effect(app: Application) -> None:
    """Decision O3 / DW-DOC-5: nothing is recorded for invalid input."""
    calls: list[int] = []

    @app.operation("noop.run")
    def noop(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        calls.append(1)

    before = app.store.last_position()
    with pytest.raises(DocumentError) as e1:
        app.run("noop.run", {"x": float("nan")}, actor="t", tenant="acme")
    with pytest.raises(DocumentError) as e2:
        app.run("noop.run", {"x": 2**53}, actor="t", tenant="acme")
    with pytest.raises(DocumentError) as e3:
        app.run("noop.run", {f"k{i}": i for i in range(1025)}, actor="t", tenant="acme")
    with pytest.raises(NotFound):
        app.run("noop.unknown", {}, actor="t", tenant="acme")
    with pytest.raises(BlackOpsError) as e4:
        app.run("noop.run", {}, actor="t", tenant="no spaces allowed")
    with pytest.raises(BlackOpsError) as e5:
        app.run("noop.run", {}, actor="", tenant="acme")
    with pytest.raises(BlackOpsError) as e6:
        app.run("noop.run", {}, actor="t", tenant="acme", traceparent="not-a-trace")
    assert [e.value.code for e in (e1, e2, e3)] == [
        "invalid_params",
        "invalid_params",
        "document_too_large",
    ]
    assert {e.value.code for e in (e4, e5, e6)} == {"invalid_request"}
    assert calls == []
    assert app.store.last_position() == before


def test_a_non_document_outcome_fails_the_attempt(app: Application) -> None:
    @app.operation("bad.outcome")
    def bad(ctx: ExecutionContext, params: dict[str, Any]) -> Any:
        return {"when": {1, 2}}

    result = app.run("bad.outcome", {}, actor="t", tenant="acme")
    assert result.status == "failed" and result.failure is not None
    assert result.failure.error_type == "outcome_invalid"
    assert "not a document" in result.failure.message


def test_async_handlers_run_from_sync_and_from_a_running_loop(app: Application) -> None:
    @app.operation("async.echo")
    async def echo(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"echo": params["v"]}

    assert app.run("async.echo", {"v": 1}, actor="t", tenant="acme").outcome == {"echo": 1}

    async def from_async_code() -> Any:
        return app.run("async.echo", {"v": 2}, actor="t", tenant="acme").outcome

    assert asyncio.run(from_async_code()) == {"echo": 2}


def test_ol5_terminal_operations_accept_no_further_lifecycle_event(app: Application) -> None:
    """OL-5 against the real journal: the aggregate refuses the event before any write, and
    an illegal event written behind its back is detected when the operation is read."""
    from journal.store import Append

    @app.operation("done.once")
    def once(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        return None

    result = app.run("done.once", {}, actor="t", tenant="acme")
    journal = OperationJournal(app.store)
    operation = journal.load(result.operation_id)
    with pytest.raises(LifecycleViolation):
        operation.record(
            EventType.ATTEMPT_STARTED, "2026-11-30T09:00:00.000000Z", {}, {"attempt": 2}
        )
    assert journal.save(operation) == [[]]  # nothing was pending, nothing is written
    assert types_of(app, result.operation_id) == SUCCESS

    late = NewEvent("attempt.started", "2026-11-30T09:00:00.000000Z", {}, {"attempt": 2})
    app.store.append(Append(result.operation_id, 4, [late]))
    with pytest.raises(LifecycleViolation):
        app.status(result.operation_id)


def test_two_writers_of_one_operation_the_stale_one_is_fenced(app: Application) -> None:
    """Principle 2: a writer that loaded an older version cannot commit."""

    @app.operation("fence.me")
    def fence(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        raise OperationRejected("conflict", "stop", "")

    result = app.run("fence.me", {}, actor="t", tenant="acme")
    journal = OperationJournal(app.store)
    first, second = journal.load(result.operation_id), journal.load(result.operation_id)
    first.record(EventType.HELD, "2026-11-30T09:00:00.000000Z", {}, {"reason": "audit"})
    journal.save(first)
    second.record(EventType.HELD, "2026-11-30T09:00:01.000000Z", {}, {"reason": "other"})
    with pytest.raises(FencingError):
        journal.save(second)
    assert [e["data"].get("reason") for e in app.events(result.operation_id)][-1] == "audit"


def test_status_and_events_of_unknown_operations_are_not_found(app: Application) -> None:
    for bad in ("0190f6c1-0000-7000-8000-000000000000", "../../etc", ""):
        with pytest.raises(NotFound) as caught:
            app.status(bad)
        assert caught.value.code == "not_found"
        with pytest.raises(NotFound):
            app.events(bad)


def test_handlers_are_registered_once_with_valid_names(app: Application) -> None:
    with pytest.raises(BlackOpsError):
        app.operation("Not.Valid")
    with pytest.raises(TypeError):
        app.operation("ok.type")(lambda: None)

    @app.operation("ok.type")
    def ok(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        return None

    with pytest.raises(ValueError, match="already registered"):
        app.operation("ok.type")(ok)
    assert app.operation_types == ["ok.type"]


def test_a_full_size_params_document_is_journaled_whole(app: Application) -> None:
    """DW-DOC-1 boundary end to end: 1,048,576 canonical bytes of params run and are stored
    (the journal envelope around them is larger); one byte more is refused, nothing written."""
    from domain.documents import MAX_BYTES, canonical_document

    @app.operation("big.echo")
    def echo(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        return {"size": len(params["blob"])}

    exact = {"blob": "x" * (MAX_BYTES - 11)}
    assert len(canonical_document(exact)) == MAX_BYTES
    result = app.run("big.echo", exact, actor="t", tenant="acme")
    assert result.status == "completed"
    assert app.events(result.operation_id)[0]["data"]["params"] == exact

    before = app.store.last_position()
    with pytest.raises(DocumentError) as caught:
        app.run("big.echo", {"blob": "x" * (MAX_BYTES - 10)}, actor="t", tenant="acme")
    assert caught.value.code == "document_too_large"
    assert app.store.last_position() == before


class StatusReadingClock(FakeClock):
    """Reads the operation's public status while the runner waits out a retry delay."""

    def __init__(self, app_ref: list[Application], ids: list[str], seen: list[str]) -> None:
        super().__init__(FakeClock().now())
        self.app_ref, self.ids, self.seen = app_ref, ids, seen

    def sleep(self, seconds: float) -> None:
        self.seen.append(self.app_ref[0].status(self.ids[-1])["status"])
        super().sleep(seconds)


def test_ol2_public_status_while_it_runs_and_while_a_retry_waits(store_url: str) -> None:
    """OL-2: mid-attempt the Status API says `running`; during the retry delay it says
    `retry_scheduled`; Finalizing and Supervising never show."""
    seen: list[str] = []
    ids: list[str] = []
    app_ref: list[Application] = []
    app = Application(store_url, clock=StatusReadingClock(app_ref, ids, seen))
    app_ref.append(app)
    try:
        _look_twice(app, ids, seen)
    finally:
        app.close()


def _look_twice(app: Application, ids: list[str], seen: list[str]) -> None:
    @app.operation("self.look", supervision=Supervision(max_attempts=2, initial_delay_seconds=5))
    def look(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        ids.append(ctx.operation_id)
        status = app.status(ctx.operation_id)
        seen.append(f"{status['status']}@{status['attempt']}")
        if ctx.attempt == 1:
            raise Retryable("once more")

    result = app.run("self.look", {}, actor="t", tenant="acme")
    assert seen == ["running@1", "retry_scheduled", "running@2"]
    assert app.status(result.operation_id)["status"] == "completed"


def test_handler_text_that_is_not_unicode_is_still_recorded(app: Application) -> None:
    """A handler's rejection or exception text with a lone surrogate, or an exception whose
    __str__ raises, still ends the operation (OL-5): nothing is left Running."""

    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    @app.operation("text.reject")
    def reject(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        raise OperationRejected("validation", "bad_text", "bad \ud800 text")

    @app.operation("text.raise")
    def crash(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        raise ValueError("x\udcff")

    @app.operation("text.unprintable")
    def unprintable(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        raise Unprintable

    rejected = app.run("text.reject", {}, actor="t", tenant="acme")
    assert rejected.status == "rejected"
    assert app.status(rejected.operation_id)["rejection"]["message"] == "bad \\ud800 text"
    failed = app.run("text.raise", {}, actor="t", tenant="acme")
    assert app.status(failed.operation_id)["status"] == "failed"
    assert failed.failure is not None and failed.failure.message == "ValueError: x\\udcff"
    silent = app.run("text.unprintable", {}, actor="t", tenant="acme")
    assert app.status(silent.operation_id)["status"] == "failed"


def test_an_interrupt_inside_the_handler_fails_the_operation_then_propagates(
    app: Application,
) -> None:
    """Decision P17: SystemExit / KeyboardInterrupt mid-attempt is recorded as
    attempt.interrupted and a failure with reason `interrupted` (never a rejection, OL-8),
    and the interrupt still reaches the caller."""
    ids: list[str] = []

    @app.operation("stop.now")
    def stop(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        ids.append(ctx.operation_id)
        raise SystemExit(3)

    with pytest.raises(SystemExit):
        app.run("stop.now", {}, actor="t", tenant="acme")
    assert types_of(app, ids[0])[-3:] == [
        "attempt.interrupted",
        "attempt.supervising",
        "operation.failed",
    ]
    status = app.status(ids[0])
    assert status["status"] == "failed" and status["failure"]["type"] == "interrupted"


def test_every_attempt_gets_the_params_as_they_were_asked(app: Application) -> None:
    """A handler that mutates its params cannot change what a retry sees or the journal."""
    seen: list[dict[str, Any]] = []

    @app.operation("mutate.params", supervision=Supervision(max_attempts=2))
    def mutate(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        seen.append(dict(params))
        params["amount"] *= 2
        if ctx.attempt == 1:
            raise Retryable("again")
        return {"amount": params["amount"]}

    result = app.run("mutate.params", {"amount": 10}, actor="t", tenant="acme")
    assert seen == [{"amount": 10}, {"amount": 10}]
    assert result.outcome == {"amount": 20}
    assert app.events(result.operation_id)[0]["data"]["params"] == {"amount": 10}


def test_a_pydantic_error_inside_a_handler_is_recorded_without_its_inputs(
    app: Application,
) -> None:
    """Decision D18: the failure names fields, never the input values."""

    @app.operation("inner.validate")
    def inner(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        Order.model_validate({"sku": "A", "quantity": params["secret"]})

    result = app.run("inner.validate", {"secret": "hunter2"}, actor="t", tenant="acme")
    assert result.failure is not None and "quantity" in result.failure.message
    assert "hunter2" not in repr(app.events(result.operation_id)[2:])


def test_names_with_a_trailing_newline_are_refused(app: Application) -> None:
    """Decision P12 exactly: `$` in a pattern would let a final newline through."""

    @app.operation("ok.run")
    def ok(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        return None

    before = app.store.last_position()
    with pytest.raises(BlackOpsError):
        app.operation("ok.other\n")
    for kwargs in (
        {"tenant": "acme\n"},
        {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\n"},
        {"causation_id": "req-1\n"},
        {"actor": "bad \ud800 actor"},
    ):
        arguments: dict[str, Any] = {"actor": "t", "tenant": "acme", **kwargs}
        with pytest.raises(BlackOpsError) as caught:
            app.run("ok.run", {}, **arguments)
        assert caught.value.code == "invalid_request"
    with pytest.raises(NotFound):
        app.status("0190f6c1-0000-7000-8000-000000000000\n")
    assert app.store.last_position() == before


def test_every_depth_that_canonical_document_accepts_can_be_read_back(app: Application) -> None:
    """DW-DOC-2 end to end at the depth limit (decisions P45): the journal reads what it
    wrote; one level more is refused before anything is recorded."""
    from domain.documents import MAX_DEPTH, DocumentError

    @app.operation("deep.echo")
    def echo(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        return params

    deep: Any = []
    for _ in range(MAX_DEPTH - 2):  # with the root and the innermost list: MAX_DEPTH levels
        deep = [deep]
    result = app.run("deep.echo", {"deep": deep}, actor="t", tenant="acme")
    assert result.status == "completed"
    assert app.status(result.operation_id)["status"] == "completed"
    stored = app.events(result.operation_id)[0]["data"]["params"]
    assert canonical_document(stored) == canonical_document({"deep": deep})
    assert len(list(app.store.iter_after(0))) == 4
    with pytest.raises(DocumentError) as caught:
        app.run("deep.echo", {"deep": [deep]}, actor="t", tenant="acme")
    assert caught.value.code == "invalid_params"
    assert len(list(app.store.iter_after(0))) == 4


def test_concurrent_inline_runs_each_get_their_own_consistent_journal(app: Application) -> None:
    """The HTTP server runs app.run on a thread pool: 16 threads x 10 runs, one store."""
    from concurrent.futures import ThreadPoolExecutor

    @app.operation("count.up")
    def count(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        return {"n": params["n"]}

    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(
            pool.map(lambda n: app.run("count.up", {"n": n}, actor="t", tenant="acme"), range(160))
        )
    assert [r.outcome for r in results] == [{"n": n} for n in range(160)]
    everything = list(app.store.iter_after(0))
    positions = [e.position for e in everything]
    assert positions == sorted(set(positions)) and len(everything) == 160 * 4
    for result in results:
        assert types_of(app, result.operation_id) == SUCCESS


def test_an_unreachable_store_is_backend_unavailable_everywhere(tmp_path: Any) -> None:
    """DW-TERM-2's code for operations too: 503 over HTTP, exit 1 with the code on the CLI."""
    import json
    import subprocess
    import sys

    from fastapi.testclient import TestClient

    from blackops.http.app import create_http_app

    down = "postgresql://postgres@127.0.0.1:1/test?connect_timeout=1"
    app = Application(down)

    @app.operation("any.thing")
    def thing(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        return None

    with pytest.raises(BlackOpsError) as caught:
        app.run("any.thing", {}, actor="t", tenant="acme")
    assert caught.value.code == "backend_unavailable"
    with TestClient(create_http_app(app, "tok")) as client:
        response = client.post(
            "/v1/spaces/acme/operations/any.thing", headers={"Authorization": "Bearer tok"}
        )
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "backend_unavailable"
    done = subprocess.run(
        [sys.executable, "-m", "blackops", "op", "status", "x-1", "--json", "--store", down],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1
    assert json.loads(done.stdout)["error"]["code"] == "backend_unavailable"
