"""Deferred operations on SQLite and PostgreSQL: OL-1, OL-3, OL-4, OL-5, OL-6, OL-7, OL-8,
OL-9, OL-12.

Attempts run through ``work_until_idle`` or the DeferredEngine directly, on the fake
clock, so leases, retries and backoffs take no real time. Worker processes, signals
and server restarts are in tests/faults/test_worker_kills_and_stalls.py.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel

from blackops import Application, ExecutionContext, OperationRejected, Retryable, Supervision
from blackops.operations.attempts import MAX_CLAIM_LOSSES
from blackops.operations.deferred import Attempt, Ending
from blackops.testing import FakeClock
from domain.clock import format_instant
from domain.errors import BackendUnavailable, BlackOpsError, NotFound
from journal.group_commit import commit_group
from journal.operations import pending_append
from journal.work_index import moment_micros

DEFERRED_SUCCESS = [
    "operation.received",
    "operation.accepted",
    "attempt.started",
    "attempt.finalizing",
    "operation.completed",
]
RETRY = ["attempt.started", "attempt.failed", "attempt.supervising", "attempt.retry_scheduled"]


def types_of(app: Application, operation_id: str) -> list[str]:
    return [e["type"] for e in app.events(operation_id)]


def work(app: Application) -> None:
    asyncio.run(app.work_until_idle())


def submit(app: Application, type: str, params: dict[str, Any] | None = None, **kw: Any) -> str:
    return app.submit(type, params or {}, actor="ana", tenant="acme", **kw)


def test_ol1_ol4_deferred_success_passes_through_accepted(app: Application) -> None:
    """OL-1/OL-4: Received -> Accepted (durable, before submit returns) -> Running ->
    Finalizing -> Completed; nothing runs until a worker claims it."""
    ran: list[str] = []

    @app.operation("greeting.say")
    def say(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        ran.append(ctx.operation_id)
        return {"hello": params["name"]}

    operation_id = submit(app, "greeting.say", {"name": "ana"})
    assert app.status(operation_id)["status"] == "accepted"
    assert app.status(operation_id)["mode"] == "deferred"
    assert types_of(app, operation_id) == ["operation.received", "operation.accepted"]
    assert ran == []  # OL-4: submit never runs the handler
    work(app)
    assert ran == [operation_id]
    assert types_of(app, operation_id) == DEFERRED_SUCCESS
    assert app.status(operation_id)["status"] == "completed"
    assert app.outcome(operation_id) == {"hello": "ana"}


def test_ol4_acceptance_is_durable_before_submit_returns(store_url: str, clock: FakeClock) -> None:
    """OL-4: a second Application (as another process would) reads it accepted."""
    first = Application(store_url, clock=clock)
    first.operation("t.noop")(lambda ctx, params: None)
    second = Application(store_url, clock=clock)
    try:
        second.store  # connected before the submit  # noqa: B018
        operation_id = submit(first, "t.noop")
        # Read through the other connection while the first stays open: committed.
        assert second.status(operation_id)["status"] == "accepted"
    finally:
        second.close()
        first.close()


def test_ol12_execution_context_on_every_deferred_event(app: Application) -> None:
    """OL-12: every event carries ids, actor, tenant, attempt, worker and fencing token."""
    seen: list[ExecutionContext] = []

    @app.operation("ctx.probe")
    def probe(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        seen.append(ctx)

    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    operation_id = app.submit(
        "ctx.probe",
        {},
        actor="ana",
        tenant="acme",
        traceparent=traceparent,
        correlation_id="order-7",
        causation_id="cause-1",
    )
    work(app)
    events = app.events(operation_id)
    for event in events:
        context = event["context"]
        assert context["operation_id"] == operation_id
        assert context["actor"] == {"id": "ana", "kind": "principal"}
        assert context["tenant"] == "acme"
        assert context["correlation_id"] == "order-7"
        assert context["causation_id"] == "cause-1"
        assert context["traceparent"] == traceparent
    accepted, started = events[1], events[2]
    assert accepted["context"]["attempt"] == 0 and accepted["context"]["worker"] is None
    assert started["context"]["attempt"] == 1
    assert started["context"]["worker"] == started["data"]["worker"]
    assert started["context"]["fencing_token"] == started["data"]["fencing_token"] == 1
    for event in events[2:]:
        assert event["context"]["fencing_token"] == 1
        assert event["context"]["worker"] == started["data"]["worker"]
    assert [c.attempt for c in seen] == [1]
    assert seen[0].fencing_token == 1 and seen[0].worker == started["data"]["worker"]


def test_idempotency_key_returns_the_same_operation_and_records_nothing(app: Application) -> None:
    """Same key (tenant + type + key) -> same id, no new event; other params -> conflict."""
    app.operation("t.noop")(lambda ctx, params: None)
    app.operation("t.other")(lambda ctx, params: None)
    first = submit(app, "t.noop", {"n": 1}, idempotency_key="order-42")
    position = app.store.last_position()
    assert submit(app, "t.noop", {"n": 1}, idempotency_key="order-42") == first
    assert app.store.last_position() == position
    with pytest.raises(BlackOpsError) as refused:
        submit(app, "t.noop", {"n": 2}, idempotency_key="order-42")
    assert refused.value.code == "conflict"
    assert app.store.last_position() == position
    # The scope is tenant + type + key (decisions O5): these are new operations.
    other_type = submit(app, "t.other", {"n": 1}, idempotency_key="order-42")
    other_tenant = app.submit(
        "t.noop", {"n": 1}, actor="ana", tenant="zeta", idempotency_key="order-42"
    )
    assert len({first, other_type, other_tenant}) == 3
    assert app.events(first)[0]["data"]["idempotency_key"] == "order-42"
    # Still the same after it completed.
    work(app)
    assert submit(app, "t.noop", {"n": 1}, idempotency_key="order-42") == first


@pytest.mark.parametrize("key", ["", "x" * 256, "has space", "tab\tkey", "é", 7])
def test_bad_idempotency_keys_are_refused_before_any_side_effect(
    app: Application, key: Any
) -> None:
    app.operation("t.noop")(lambda ctx, params: None)
    with pytest.raises(BlackOpsError) as refused:
        submit(app, "t.noop", idempotency_key=key)
    assert refused.value.code == "invalid_request"
    assert app.store.last_position() == 0


class Order(BaseModel):
    amount: int


def test_submit_validates_everything_before_any_side_effect(app: Application) -> None:
    """Bad type, tenant, actor, params document, or params failing the model: nothing
    recorded (decisions O3, P20)."""

    @app.operation("order.place")
    def place(ctx: ExecutionContext, params: Order) -> None:
        return None

    cases: list[tuple[dict[str, Any], str]] = [
        ({"type": "nope.unknown"}, "not_found"),
        ({"type": "Bad Type"}, "invalid_request"),
        ({"tenant": "bad tenant"}, "invalid_request"),
        ({"actor": ""}, "invalid_request"),
        ({"params": {"amount": {1, 2}}}, "invalid_params"),
        ({"params": {"amount": "many"}}, "invalid_params"),
        ({"params": {"k": 2**53}}, "invalid_params"),
    ]
    for change, code in cases:
        call: dict[str, Any] = {"type": "order.place", "params": {"amount": 1}}
        call.update(change)
        with pytest.raises(BlackOpsError) as refused:  # noqa: PT012
            app.submit(
                call["type"],
                call["params"],
                actor=call.get("actor", "ana"),
                tenant=call.get("tenant", "acme"),
            )
            pytest.fail(f"accepted {change}")
        assert refused.value.code == code, change
    assert app.store.last_position() == 0


def test_ol7_retry_with_a_five_minute_backoff_takes_no_real_time(
    app: Application, clock: FakeClock
) -> None:
    """OL-7: attempt.failed, supervising, retry_scheduled at now + delay (fake clock);
    the next attempt re-claims the same operation once the clock reaches it."""
    attempts: list[int] = []

    @app.operation(
        "pay.charge",
        supervision=Supervision(max_attempts=3, backoff="constant", initial_delay_seconds=300),
    )
    def charge(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            raise Retryable("gateway timed out")
        return {"charged": True}

    operation_id = submit(app, "pay.charge")
    start = clock.now()
    work(app)
    assert attempts == [1]
    status = app.status(operation_id)
    assert status["status"] == "retry_scheduled"
    assert status["retryDueAt"] == format_instant(start + timedelta(seconds=300))
    scheduled = app.events(operation_id)[-1]
    assert scheduled["type"] == "attempt.retry_scheduled"
    assert scheduled["data"] == {
        "attempt": 1,
        "delay_seconds": 300.0,
        "due_at": format_instant(start + timedelta(seconds=300)),
    }
    clock.advance(299.999)
    work(app)
    assert attempts == [1]  # not due yet
    clock.advance(0.001)
    work(app)
    assert attempts == [1, 2]
    assert types_of(app, operation_id) == [
        "operation.received",
        "operation.accepted",
        *RETRY,
        "attempt.started",
        "attempt.finalizing",
        "operation.completed",
    ]
    failed = app.events(operation_id)[3]
    assert failed["data"]["error"]["message"] == "Retryable: gateway timed out"
    assert app.events(operation_id)[-1]["context"]["fencing_token"] == 2


def test_ol7_exponential_delays_and_exhaustion_to_dead_letter(
    app: Application, clock: FakeClock
) -> None:
    """OL-7/OL-3: delays follow the policy; beyond the limit -> Supervising -> Dead Letter."""

    @app.operation(
        "mail.send",
        supervision=Supervision(
            max_attempts=4,
            backoff="exponential",
            initial_delay_seconds=2,
            max_delay_seconds=5,
            exhausted="dead_letter",
        ),
    )
    def send(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        raise Retryable(f"smtp busy {ctx.attempt}")

    operation_id = submit(app, "mail.send")
    delays = []
    for _ in range(4):
        work(app)
        last = app.events(operation_id)[-1]
        if last["type"] == "attempt.retry_scheduled":
            delays.append(last["data"]["delay_seconds"])
            clock.advance(last["data"]["delay_seconds"])
    assert delays == [2.0, 4.0, 5.0]
    events = app.events(operation_id)
    assert [e["type"] for e in events[-3:]] == [
        "attempt.failed",
        "attempt.supervising",
        "operation.dead_lettered",
    ]
    assert events[-2]["data"]["decision"] == "dead_letter"
    assert events[-1]["data"]["reason"] == "exhausted"
    status = app.status(operation_id)
    assert status["status"] == "dead_letter" and status["attempt"] == 4
    assert status["failure"]["message"] == "Retryable: smtp busy 4"


def test_ol8_a_non_retryable_exception_fails_at_once_even_with_dead_letter_policy(
    app: Application,
) -> None:
    """OL-8: an ordinary exception is never a rejection; it goes Supervising -> Failed."""

    @app.operation("t.broken", supervision=Supervision(max_attempts=5, exhausted="dead_letter"))
    def broken(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        raise KeyError("missing")

    operation_id = submit(app, "t.broken")
    work(app)
    assert types_of(app, operation_id)[-3:] == [
        "attempt.failed",
        "attempt.supervising",
        "operation.failed",
    ]
    assert app.events(operation_id)[-1]["data"]["reason"] == "not_retryable"
    assert app.status(operation_id)["status"] == "failed"
    assert app.status(operation_id)["attempt"] == 1


def test_retry_on_lists_more_retryable_types(app: Application) -> None:
    @app.operation(
        "t.flaky",
        supervision=Supervision(max_attempts=2, retry_on=(TimeoutError,)),
    )
    def flaky(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, int]:
        if ctx.attempt == 1:
            raise TimeoutError("slow")
        return {"attempt": ctx.attempt}

    operation_id = submit(app, "t.flaky")
    work(app)
    assert app.outcome(operation_id) == {"attempt": 2}


def test_ol6_a_rejection_inside_the_handler_is_terminal(app: Application) -> None:
    """OL-6/OL-5: Running -> Rejected, with category and code; never retried."""
    calls: list[int] = []

    @app.operation("t.reject", supervision=Supervision(max_attempts=5))
    def reject(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        calls.append(ctx.attempt)
        raise OperationRejected("business_rule", "credit_limit", "over the limit")

    operation_id = submit(app, "t.reject")
    work(app)
    work(app)
    assert calls == [1]
    assert types_of(app, operation_id)[-1] == "operation.rejected"
    status = app.status(operation_id)
    assert status["status"] == "rejected"
    assert status["rejection"] == {
        "category": "business_rule",
        "code": "credit_limit",
        "message": "over the limit",
    }


class Receipt(BaseModel):
    schema_version: ClassVar[int] = 3
    number: str
    total: int


def test_ol9_a_typed_outcome_round_trips_to_the_same_model(app: Application) -> None:
    """OL-9: Deferred Completed stores canonical data with type name and schema version."""

    @app.operation("invoice.issue")
    def issue(ctx: ExecutionContext, params: dict[str, Any]) -> Receipt:
        return Receipt(number="INV-1", total=params["total"])

    operation_id = submit(app, "invoice.issue", {"total": 120})
    work(app)
    record = app.outcome_record(operation_id)
    assert record.type_name == f"{Receipt.__module__}.Receipt"
    assert record.schema_version == 3
    assert record.document == {"number": "INV-1", "total": 120}
    assert record.to_model() == Receipt(number="INV-1", total=120)
    assert Receipt.model_validate(app.outcome(operation_id)) == Receipt(number="INV-1", total=120)
    completed = app.events(operation_id)[-1]["data"]
    assert completed["outcome_recorded"] is True
    assert completed["outcome_digest"] == record.digest
    assert completed["outcome_schema_version"] == 3
    # The record is its own stream, written in the same commit as operation.completed.
    stream = app.store.read_stream(f"outcome:{operation_id}")
    assert [e.type for e in stream] == ["outcome.recorded"]
    assert stream[0].position == app.events(operation_id)[-1]["position"] + 1


def test_ol9_no_outcome_record_for_any_other_state(app: Application, clock: FakeClock) -> None:
    """OL-9: Rejected, Failed, Retry Scheduled, Dead Letter, Claim Lost, Inline, Accepted:
    ``not_found`` with the reason, and no outcome stream exists."""

    @app.operation("t.ok")
    def ok(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, bool]:
        return {"ok": True}

    @app.operation("t.reject")
    def reject(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        raise OperationRejected("validation", "bad", "no")

    @app.operation("t.fail")
    def fail(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        raise ValueError("boom")

    @app.operation("t.retry", supervision=Supervision(max_attempts=2, initial_delay_seconds=60))
    def retry(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        raise Retryable("later")

    @app.operation("t.dead", supervision=Supervision(exhausted="dead_letter"))
    def dead(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        raise Retryable("never")

    ids = {"claim_lost": submit(app, "t.ok")}
    [lost] = app.engine("w-doomed", lease_seconds=10).claim(1)  # then never ends
    assert lost.operation.id == ids["claim_lost"]
    ids.update({name: submit(app, name) for name in ("t.reject", "t.fail", "t.retry", "t.dead")})
    ids["inline"] = app.run("t.ok", {}, actor="ana", tenant="acme").operation_id
    ids["accepted"] = submit(app, "t.ok")
    with pytest.raises(NotFound, match="has not run yet"):
        app.outcome(ids["accepted"])
    with pytest.raises(NotFound, match="still running"):
        app.outcome(ids["claim_lost"])
    work(app)  # everything but the held claim runs now
    assert app.status(ids["t.retry"])["status"] == "retry_scheduled"
    expected = {
        "t.reject": "rejected",
        "t.fail": "failed",
        "t.dead": "dead letter",
        "t.retry": "waiting for a retry",
        "inline": "Inline",
        "claim_lost": "still running",
    }
    for name, why in expected.items():
        with pytest.raises(NotFound) as missing:
            app.outcome(ids[name])
        assert missing.value.code == "not_found" and why in missing.value.message, name
        assert app.store.read_stream(f"outcome:{ids[name]}") == []
    # The lost attempt never records one; the attempt after the claim loss does.
    clock.advance(10)
    work(app)
    events = app.events(ids["claim_lost"])
    assert [e["type"] for e in events].count("attempt.claim_lost") == 1
    [record] = app.store.read_stream(f"outcome:{ids['claim_lost']}")
    assert record.context["attempt"] == 2 and record.context["fencing_token"] == 2


def test_claim_lost_leaves_no_outcome_and_is_not_counted_against_the_budget(
    app: Application, clock: FakeClock
) -> None:
    """OL-8: a claim loss is never a rejection nor a failed attempt; the new claimant
    records attempt.claim_lost and a higher fencing token; the stale holder is fenced."""

    @app.operation("t.once", supervision=Supervision(max_attempts=1))
    def once(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, int]:
        return {"token": ctx.fencing_token or 0}

    operation_id = submit(app, "t.once")
    stale_engine = app.engine("worker-a", lease_seconds=30)
    [stale] = stale_engine.claim(10)
    stale_ending = stale_engine.execute(stale)  # finished, but not committed in time
    clock.advance(30)  # lease over: due again in the index
    fresh_engine = app.engine("worker-b", lease_seconds=30)
    [fresh] = fresh_engine.claim(10)
    assert fresh.ctx.fencing_token == 2 and fresh.ctx.attempt == 2
    assert stale_engine.commit([stale_ending]) == []  # refused by the journal: fenced
    assert fresh_engine.commit([fresh_engine.execute(fresh)]) != []
    events = app.events(operation_id)
    assert [e["type"] for e in events] == [
        "operation.received",
        "operation.accepted",
        "attempt.started",
        "attempt.claim_lost",
        "attempt.supervising",
        "attempt.retry_scheduled",
        "attempt.started",
        "attempt.finalizing",
        "operation.completed",
    ]
    lost = events[3]
    assert lost["data"]["attempt"] == 1 and lost["data"]["fencing_token"] == 1
    assert lost["data"]["worker"] == "worker-a"
    assert events[4]["data"]["reason"] == "claim_lost"
    assert app.outcome(operation_id) == {"token": 2}
    assert sum(e["type"] == "operation.completed" for e in events) == 1


def test_two_claimants_racing_exactly_one_attempt_per_token(
    app: Application, clock: FakeClock
) -> None:
    """OL-8: both read the same version and record a claim; the journal commits one."""
    app.operation("t.noop")(lambda ctx, params: None)
    operation_id = submit(app, "t.noop")
    now, until = clock.now(), clock.now() + timedelta(seconds=30)
    claims = []
    for name in ("w-1", "w-2"):
        engine = app.engine(name)
        operation = engine.journal.load(operation_id)  # both at the same version
        attempt = engine._claim_one(operation, now, until)
        assert isinstance(attempt, Attempt) and attempt.ctx.fencing_token == 1
        claims.append((engine, [pending_append(operation)], attempt))
    won = [a for engine, appends, a in claims for a in commit_group(engine.store, [(appends, a)])]
    assert [a.ctx.worker for a in won] == ["w-1"]
    started = [e for e in app.events(operation_id) if e["type"] == "attempt.started"]
    assert [(e["data"]["fencing_token"], e["data"]["worker"]) for e in started] == [(1, "w-1")]


def test_heartbeats_renew_a_lease_and_report_a_lost_one(app: Application, clock: FakeClock) -> None:
    """Leases are renewed outside the journal; a worker learns when it lost one."""
    app.operation("t.noop")(lambda ctx, params: None)
    operation_id = submit(app, "t.noop")
    holder = app.engine("holder", lease_seconds=30)
    [attempt] = holder.claim(1)
    position = app.store.last_position()
    clock.advance(20)
    assert holder.renew([attempt]) == []  # renewed until now + 30
    assert app.store.last_position() == position  # heartbeats stay out of the journal (O4)
    clock.advance(20)  # past the claim's own expiry, within the renewed lease
    assert app.engine("rival").claim(1) == []
    clock.advance(11)  # now past the renewed lease too
    [taken] = app.engine("rival").claim(1)
    assert taken.operation.id == operation_id
    assert holder.renew([attempt]) == [attempt] and attempt.abandoned
    assert holder.commit([holder.execute(attempt)]) == []  # abandoned: never written


def test_too_many_lost_claims_end_the_operation(app: Application, clock: FakeClock) -> None:
    """An operation that keeps killing its workers ends by its policy, not for ever."""

    @app.operation("t.poison", supervision=Supervision(exhausted="dead_letter"))
    def poison(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        return None

    operation_id = submit(app, "t.poison")
    for n in range(MAX_CLAIM_LOSSES + 1):
        claimed = app.engine(f"doomed-{n}", lease_seconds=5).claim(1)
        if not claimed:
            break
        clock.advance(5)
    events = app.events(operation_id)
    assert sum(e["type"] == "attempt.claim_lost" for e in events) == MAX_CLAIM_LOSSES
    assert events[-1]["type"] == "operation.dead_lettered"
    assert events[-1]["data"]["reason"] == "claim_lost"
    assert app.status(operation_id)["status"] == "dead_letter"


def test_an_interrupt_inside_a_deferred_handler_reschedules_then_propagates(
    app: Application,
) -> None:
    """OL-8: an interrupt is neither a rejection nor a failure: interrupted, rescheduled."""
    calls: list[int] = []

    @app.operation("t.interrupted")
    def interrupted(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, int]:
        calls.append(ctx.attempt)
        if ctx.attempt == 1:
            raise KeyboardInterrupt
        return {"attempt": ctx.attempt}

    operation_id = submit(app, "t.interrupted")
    with pytest.raises(KeyboardInterrupt):
        work(app)
    assert types_of(app, operation_id)[-4:] == [
        "attempt.started",
        "attempt.interrupted",
        "attempt.supervising",
        "attempt.retry_scheduled",
    ]
    assert app.events(operation_id)[-2]["data"]["reason"] == "interrupted"
    assert app.status(operation_id)["status"] == "retry_scheduled"
    work(app)  # due at once: another attempt, and it does not spend the budget (1 attempt)
    assert app.outcome(operation_id) == {"attempt": 2}


@pytest.mark.parametrize("raised", [SystemExit, asyncio.CancelledError])
def test_a_running_workers_handler_that_exits_fails_under_its_policy(
    store_url: str, raised: type[BaseException]
) -> None:
    """OL-7 / OL-8: on a started worker's handler thread no signal arrives, so a
    BaseException is the handler's own (``sys.exit()``, a cancellation): a failure its
    Supervision Policy decides. It was taken for a worker interrupt, rescheduled at once
    without spending the budget: retried ~170 times a second, for ever (found by a spec
    review, stop 37)."""
    from in_time import wait_until

    app = Application(store_url)
    calls: list[int] = []

    @app.operation("t.exits", supervision=Supervision(max_attempts=2, exhausted="dead_letter"))
    def exits(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        calls.append(ctx.attempt)
        raise raised()

    operation_id = submit(app, "t.exits")
    worker = app.worker(poll_seconds=0.05).start()
    try:
        wait_until(lambda: app.status(operation_id)["status"] == "failed", 30, "failed")
    finally:
        worker.stop(5)
    events = types_of(app, operation_id)
    assert "attempt.interrupted" not in events and events.count("attempt.failed") == 1
    assert calls == [1]  # not retryable (not in retry_on): failed at once, not dead-lettered
    assert app.events(operation_id)[-2]["data"]["reason"] == "not_retryable"
    app.close()


def test_an_inline_run_interrupted_while_it_waits_to_retry_ends_failed(store_url: str) -> None:
    """P17: an interrupted Inline run is never left behind, also when the interrupt comes
    while it waits out its retry delay: it stayed ``retry_scheduled`` for good, with no
    due-work row for anyone to run it (found by a spec review, stop 37)."""

    class Interrupting(FakeClock):
        def sleep(self, seconds: float) -> None:
            raise KeyboardInterrupt

    app = Application(store_url, clock=Interrupting())

    @app.operation("t.flaky", supervision=Supervision(max_attempts=3, initial_delay_seconds=5))
    def flaky(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        raise Retryable("not yet")

    with pytest.raises(KeyboardInterrupt):
        app.run("t.flaky", {}, actor="ana", tenant="acme")
    [operation_id] = [item["operationId"] for item in app.list_operations()["items"]]
    assert app.status(operation_id)["status"] == "failed"
    assert types_of(app, operation_id)[-5:] == [
        "attempt.retry_scheduled",
        "attempt.started",
        "attempt.interrupted",
        "attempt.supervising",
        "operation.failed",
    ]
    assert app.events(operation_id)[-1]["data"]["reason"] == "interrupted"
    app.close()


def test_redrive_submits_a_linked_new_operation_and_leaves_the_dead_one_alone(
    app: Application,
) -> None:
    """Dead Letter is terminal (OL-5); redrive makes a new operation with redrive_of."""
    healthy = {"on": False}

    @app.operation("t.fragile", supervision=Supervision(exhausted="dead_letter"))
    def fragile(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        if not healthy["on"]:
            raise Retryable("downstream is down")
        return {"done": params["n"]}

    dead = app.submit("t.fragile", {"n": 5}, actor="ana", tenant="acme", correlation_id="c-9")
    work(app)
    assert app.status(dead)["status"] == "dead_letter"
    dead_events = app.events(dead)
    with pytest.raises(BlackOpsError) as refused:
        app.redrive(submit(app, "t.fragile"), actor="ops")  # accepted, not dead
    assert refused.value.code == "conflict"
    healthy["on"] = True
    new = app.redrive(dead, actor="ops")
    assert new != dead
    assert app.redrive(dead, actor="ops") == new  # idempotent (decisions P22)
    received = app.events(new)[0]
    assert received["data"]["redrive_of"] == dead
    assert received["data"]["params"] == {"n": 5}
    assert received["context"]["causation_id"] == dead
    assert received["context"]["correlation_id"] == "c-9"
    assert received["context"]["actor"]["id"] == "ops"
    work(app)
    assert app.outcome(new) == {"done": 5}
    assert app.events(dead) == dead_events  # the dead one received no new event


def test_ol5_terminal_operations_are_never_claimed_again(
    app: Application, clock: FakeClock
) -> None:
    """OL-5: after Completed nothing runs and nothing is recorded, however long we wait."""
    calls: list[int] = []

    @app.operation("t.count")
    def count(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        calls.append(1)

    operation_id = submit(app, "t.count")
    work(app)
    position = app.store.last_position()
    clock.advance(86_400)
    work(app)
    assert calls == [1] and app.store.last_position() == position
    assert app.store.work_rows() == []
    assert types_of(app, operation_id) == DEFERRED_SUCCESS


def test_the_due_work_index_is_a_rebuildable_projection(app: Application, clock: FakeClock) -> None:
    """The index equals a rebuild from position 0, and tracks the journal's position."""

    @app.operation("t.slow", supervision=Supervision(max_attempts=3, initial_delay_seconds=60))
    def slow(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        if params["fail"]:
            raise Retryable("again")

    for n in range(6):
        submit(app, "t.slow", {"fail": n % 2 == 0})
    app.run("t.slow", {"fail": False}, actor="ana", tenant="acme")  # Inline: no row
    app.engine("holder").claim(1)  # one claimed and held
    work(app)
    live = app.store.work_rows()
    assert app.store.work_position() == app.store.last_position()
    assert len(live) == 3  # two waiting for a retry, one held by "holder"
    assert {r.worker for r in live} == {None, "holder"}
    retry_due = moment_micros(clock.now() + timedelta(seconds=60))
    assert sorted(r.due_at for r in live if r.worker is None) == [retry_due] * 2
    assert app.store.rebuild_work_index() == app.store.last_position()
    assert app.store.work_rows() == live


def test_an_operation_type_without_a_handler_here_is_left_for_other_workers(
    store_url: str, clock: FakeClock
) -> None:
    """A worker claims only the types its application registers."""
    producer = Application(store_url, clock=clock)
    producer.operation("a.job")(lambda ctx, params: None)
    producer.operation("b.job")(lambda ctx, params: None)
    a_id, b_id = submit(producer, "a.job"), submit(producer, "b.job")
    only_a = Application(store_url, clock=clock)
    only_a.operation("a.job")(lambda ctx, params: {"by": "a"})
    try:
        work(only_a)
        assert producer.status(a_id)["status"] == "completed"
        assert producer.status(b_id)["status"] == "accepted"
    finally:
        only_a.close()
        producer.close()


def test_interrupting_a_batch_hands_the_other_claims_back(app: Application) -> None:
    ending_types: list[str] = []
    app.operation("t.noop")(lambda ctx, params: None)
    ids = [submit(app, "t.noop") for _ in range(3)]
    engine = app.engine("w")
    attempts = engine.claim(10)
    assert len(attempts) == 3
    committed = engine.commit([Ending(a, interrupt="worker_shutdown") for a in attempts])
    assert len(committed) == 3
    for operation_id in ids:
        ending_types.append(types_of(app, operation_id)[-3])
        assert app.status(operation_id)["status"] == "retry_scheduled"
        assert app.events(operation_id)[-3]["data"]["cause"] == "worker_shutdown"
    assert ending_types == ["attempt.interrupted"] * 3
    work(app)
    assert all(app.status(i)["status"] == "completed" for i in ids)


def test_ol12_operations_submitted_from_a_handler_inherit_correlation_and_tenant(
    app: Application,
) -> None:
    """OL-12 (Part B): a child inherits correlation and tenant and records causation,
    from sync and async handlers, Deferred and Inline alike."""
    children: dict[str, str] = {}

    @app.operation("order.place")
    def place(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, str]:
        children["deferred"] = app.submit("mail.send", {}, actor="system", tenant=ctx.tenant)
        children["inline"] = app.run(
            "mail.send", {}, actor="system", tenant=ctx.tenant
        ).operation_id
        with pytest.raises(BlackOpsError) as crossing:
            app.submit("mail.send", {}, actor="system", tenant="other-tenant")
        children["crossing"] = crossing.value.code
        return {}

    @app.operation("order.async")
    async def place_async(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        children["from_async"] = app.submit("mail.send", {}, actor="system", tenant=ctx.tenant)

    app.operation("mail.send")(lambda ctx, params: None)
    parent = app.submit("order.place", {}, actor="ana", tenant="acme", correlation_id="order-7")
    async_parent = submit(app, "order.async")
    work(app)
    assert children["crossing"] == "invalid_request"
    for name, expected_parent, correlation in (
        ("deferred", parent, "order-7"),
        ("inline", parent, "order-7"),
        ("from_async", async_parent, async_parent),
    ):
        context = app.events(children[name])[0]["context"]
        assert context["causation_id"] == expected_parent, name
        assert context["correlation_id"] == correlation, name
        assert context["tenant"] == "acme", name
    # Outside a handler nothing is inherited.
    alone = submit(app, "mail.send")
    assert app.events(alone)[0]["context"]["causation_id"] is None


def test_status_shows_who_holds_the_attempt_and_the_redrive_link(app: Application) -> None:
    """The status view names the worker and fencing token of the current attempt (OL-8)."""

    @app.operation("t.dead", supervision=Supervision(exhausted="dead_letter"))
    def dead(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        raise Retryable("no")

    operation_id = submit(app, "t.dead")
    assert "worker" not in app.status(operation_id)
    [attempt] = app.engine("w-7").claim(1)
    status = app.status(operation_id)
    assert status["status"] == "running"
    assert (status["worker"], status["fencingToken"]) == ("w-7", 1)
    app.engine("w-7").commit([app.engine("w-7").execute(attempt)])
    new = app.redrive(operation_id, actor="ops")
    assert app.status(new)["redriveOf"] == operation_id
    assert "redriveOf" not in app.status(operation_id)


class Overflowing(BaseModel):
    schema_version: ClassVar[int] = 2**60
    ok: bool


def test_a_poisonous_outcome_fails_its_attempt_and_wedges_nothing(app: Application) -> None:
    """An outcome whose schema version cannot be journaled fails that attempt
    (``outcome_invalid``); every other operation still runs (review finding)."""

    @app.operation("t.poison")
    def poison(ctx: ExecutionContext, params: dict[str, Any]) -> Overflowing:
        return Overflowing(ok=True)

    app.operation("t.fine")(lambda ctx, params: {"fine": True})
    bad = submit(app, "t.poison")
    good = [submit(app, "t.fine") for _ in range(5)]
    work(app)
    assert app.status(bad)["status"] == "failed"
    assert app.status(bad)["failure"]["type"] == "outcome_invalid"
    assert all(app.status(g)["status"] == "completed" for g in good)


def test_an_item_the_journal_refuses_is_dropped_not_the_whole_group(
    app: Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A non-fencing refusal splits the group: the rest commits, the refused attempt is
    abandoned (its lease then ends like a crashed worker's)."""
    app.operation("t.noop")(lambda ctx, params: {"n": 1})
    ids = [submit(app, "t.noop") for _ in range(3)]
    engine = app.engine("w")
    attempts = engine.claim(10)
    endings = [engine.execute(a) for a in attempts]
    store, real_append = app.store, app.store.append

    def refuse_one(*appends: Any) -> Any:
        if any(a.stream == ids[1] for a in appends):
            raise BlackOpsError("invalid_request", "injected refusal")
        return real_append(*appends)

    monkeypatch.setattr(store, "append", refuse_one)
    committed = engine.commit(endings)
    assert sorted(e.attempt.operation.id for e in committed) == sorted([ids[0], ids[2]])
    refused = next(e for e in endings if e.attempt.operation.id == ids[1])
    assert refused.attempt.abandoned
    assert [app.status(i)["status"] for i in ids] == ["completed", "running", "completed"]


def test_a_failed_turn_leaves_reservations_due_again_soon_not_after_a_lease(
    app: Application, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reservation whose claim never commits holds the rows for seconds, not a lease."""
    app.operation("t.noop")(lambda ctx, params: None)
    operation_id = submit(app, "t.noop")
    engine = app.engine("w", lease_seconds=300)
    store, real_append = app.store, app.store.append

    def unavailable(*appends: Any) -> Any:
        monkeypatch.setattr(store, "append", real_append)  # down for one call only
        raise BackendUnavailable("injected")

    monkeypatch.setattr(store, "append", unavailable)
    with pytest.raises(BackendUnavailable):
        engine.claim(1)
    assert app.status(operation_id)["status"] == "accepted"
    clock.advance(4.9)
    assert engine.claim(1) == []  # still reserved
    clock.advance(0.1)
    [attempt] = engine.claim(1)
    assert attempt.operation.id == operation_id


@pytest.mark.parametrize("worker_id", ["", "has space", "x" * 201, 123, "\ud800", "a\nb"])
def test_worker_ids_are_checked_before_the_store_is_touched(worker_id: Any) -> None:
    app = Application("memory://")
    app.operation("t.noop")(lambda ctx, params: None)
    for make in (lambda: app.engine(worker_id), lambda: app.worker(worker_id=worker_id)):
        with pytest.raises(BlackOpsError) as refused:
            make()
        assert refused.value.code == "invalid_request"
    assert not app.runtime.store_opened  # never opened


def test_worker_timings_are_checked() -> None:
    app = Application("memory://")
    app.operation("t.noop")(lambda ctx, params: None)
    for options in (
        {"lease_seconds": 5, "heartbeat_seconds": 3},
        {"lease_seconds": 0.5},
        {"concurrency": 0},
        {"prefetch": -1},
        {"grace_seconds": -1},
    ):
        with pytest.raises(BlackOpsError) as refused:
            app.worker(**options)
        assert refused.value.code == "invalid_request", options
    assert not app.runtime.store_opened
