"""OL-10: a hold or release is an operator's act on an operation's retention, not on its lifecycle:
it must never make the attempt that runs meanwhile lose (found by a defect hunt: a hold on
a running Deferred operation refused its owner's commit, the lease ran out and the
handler ran twice; an Inline run raised ``conflict`` and stayed ``running`` for ever).
And a hold must never be overtaken by a purge it was acknowledged before, nor a purged
operation's idempotency key take other params."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from blackops import Application, ExecutionContext
from blackops.testing import FakeClock
from domain.context import Actor
from domain.errors import Conflict
from domain.retention import Retention
from journal.operations import OperationJournal

DAY = 86_400
ADMIN = Actor("ops", "admin")


def types(app: Application, operation_id: str) -> list[str]:
    return [event.type for event in app.store.read_stream(operation_id)]


@pytest.fixture
def shop(store_url: str, clock: FakeClock) -> Any:
    app = Application(store_url, clock=clock)
    runs: list[int] = []

    @app.operation("order.place")
    def place(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        runs.append(params["n"])
        if params.get("hold_me"):  # an operator's hold lands while the handler runs
            app.hold(ctx.operation_id, reason="audit", actor=ADMIN)
            if params.get("release_me"):
                app.release(ctx.operation_id, reason="done", actor=ADMIN)
        return {"order": params["n"]}

    app.runs = runs  # type: ignore[attr-defined]
    try:
        yield app
    finally:
        app.close()


@pytest.mark.parametrize("release", [False, True])
def test_a_hold_on_a_running_deferred_operation_lets_its_owner_commit(
    shop: Application, release: bool
) -> None:
    operation_id = shop.submit("order.place", {"n": 1}, actor="a", tenant="t")
    engine = shop.engine("w1")
    [attempt] = engine.claim(5)
    ending = engine.execute(attempt)
    shop.hold(operation_id, reason="legal", actor=ADMIN)
    if release:
        shop.release(operation_id, reason="cleared", actor=ADMIN)
    assert engine.commit([ending]) == [ending]
    marks = ["operation.held", "operation.released"] if release else ["operation.held"]
    assert types(shop, operation_id) == [
        "operation.received", "operation.accepted", "attempt.started", *marks,
        "attempt.finalizing", "operation.completed",
    ]  # fmt: skip
    status = shop.status(operation_id)
    assert status["status"] == "completed" and ("hold" in status) is not release
    assert shop.outcome(operation_id) == {"order": 1}
    asyncio.run(shop.work_until_idle())
    assert shop.runs == [1]  # type: ignore[attr-defined]  # never run again


def test_a_hold_between_the_reservation_and_the_claim_leaves_the_claim_valid(
    shop: Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    operation_id = shop.submit("order.place", {"n": 2}, actor="a", tenant="t")
    engine = shop.engine("w1")
    reserve = engine.store.reserve_due_streams

    def then_hold(*args: Any, **kwargs: Any) -> Any:
        found = reserve(*args, **kwargs)
        shop.hold(operation_id, reason="legal", actor=ADMIN)
        return found

    monkeypatch.setattr(engine.store, "reserve_due_streams", then_hold)
    [attempt] = engine.claim(5)
    assert types(shop, operation_id)[-2:] == ["operation.held", "attempt.started"]
    monkeypatch.undo()
    assert engine.commit([engine.execute(attempt)])
    assert shop.status(operation_id)["status"] == "completed"


def test_a_superseded_owner_is_still_refused(shop: Application, clock: FakeClock) -> None:
    """Moving past a hold is not moving past another claimant (Part B, Leases)."""
    operation_id = shop.submit("order.place", {"n": 3}, actor="a", tenant="t")
    first = shop.engine("w1", lease_seconds=5)
    [stale] = first.claim(5)
    ending = first.execute(stale)
    clock.advance(6)
    shop.hold(operation_id, reason="legal", actor=ADMIN)
    [current] = shop.engine("w2", lease_seconds=5).claim(5)
    assert current.lease[1] == stale.lease[1] + 1
    assert first.commit([ending]) == []
    assert "operation.completed" not in types(shop, operation_id)


@pytest.mark.parametrize("release", [False, True])
def test_a_hold_during_an_inline_run_ends_it_normally(shop: Application, release: bool) -> None:
    result = shop.run(
        "order.place", {"n": 4, "hold_me": True, "release_me": release}, actor="a", tenant="t"
    )
    assert result.status == "completed" and result.outcome == {"order": 4}
    seen = types(shop, result.operation_id)
    assert seen[-2:] == ["attempt.finalizing", "operation.completed"]
    assert seen.count("operation.held") == 1
    assert ("hold" in shop.status(result.operation_id)) is not release


def test_a_hold_is_never_overtaken_by_an_outcome_purge(
    store_url: str, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The outcome purge reads the hold on the operation's stream and writes its tombstone
    on the outcome's: a hold acknowledged in between was then purged past (found by a
    defect hunt). Holds and purges now take one lock: the hold waits for the purge."""
    app = Application(store_url, clock=clock, retention=Retention(outcome_seconds=10))
    app.operation("order.place")(lambda ctx, params: {"ok": True})
    try:
        operation_id = app.submit("order.place", {}, actor="a", tenant="t")
        asyncio.run(app.work_until_idle())
        clock.advance(11)
        holder = threading.Thread(
            target=app.hold, args=(operation_id,), kwargs={"reason": "x", "actor": ADMIN}
        )
        load = OperationJournal.load

        def hold_meanwhile(journal: OperationJournal, wanted: str) -> Any:
            found = load(journal, wanted)
            if holder.ident is None:  # the purge's read of the hold: the hold starts now
                holder.start()
                time.sleep(0.5)  # the hold would commit now, were it not for the lock
            return found

        monkeypatch.setattr(OperationJournal, "load", hold_meanwhile)
        app.purge(actor="janitor")
        holder.join(30)
        assert not holder.is_alive()
        held = next(e for e in app.store.read_stream(operation_id) if e.type == "operation.held")
        [tombstone] = app.store.read_stream(f"outcome:{operation_id}")
        assert tombstone.type == "outcome.purged"
        assert held.position > tombstone.position  # acknowledged after the purge, not before
    finally:
        app.close()


def test_a_purged_operations_key_refuses_other_params(store_url: str, clock: FakeClock) -> None:
    """Found by a defect hunt: after a purge, the key with other params answered the old
    operation's id and status, and the new request was never run."""
    app = Application(store_url, clock=clock, retention=Retention(journal_seconds=60))
    ran: list[Any] = []
    app.operation("pay")(lambda ctx, params: ran.append(params["amount"]))
    try:
        first = app.submit("pay", {"amount": 5}, actor="a", tenant="t", idempotency_key="k1")
        asyncio.run(app.work_until_idle())
        clock.advance(61)
        assert [i.operation_id for i in app.purge(actor="janitor").items] == [first]
        again = app.submit("pay", {"amount": 5}, actor="a", tenant="t", idempotency_key="k1")
        assert again == first  # the same request: the same (purged) operation
        with pytest.raises(Conflict, match="purged"):
            app.submit("pay", {"amount": 700}, actor="a", tenant="t", idempotency_key="k1")
        assert ran == [5]
    finally:
        app.close()


def test_every_held_operation_of_a_turn_commits(shop: Application) -> None:
    """The rebase budget is per stream, not per group: an operator's bulk hold of a turn's
    operations held back the sixth, whose handler then ran twice (found by review)."""
    ids = [shop.submit("order.place", {"n": n}, actor="a", tenant="t") for n in range(8)]
    engine = shop.engine("w1")
    attempts = engine.claim(10)
    endings = [engine.execute(attempt) for attempt in attempts]
    for operation_id in ids:
        shop.hold(operation_id, reason="bulk", actor=ADMIN)
    assert len(engine.commit(endings)) == len(ids)
    assert {shop.status(i)["status"] for i in ids} == {"completed"}
    asyncio.run(shop.work_until_idle())
    assert sorted(shop.runs) == list(range(8))  # type: ignore[attr-defined]


def test_a_replay_while_a_purge_is_half_done_finds_its_tombstone(
    store_url: str, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the tombstone and the deletion (or after a purge that crashed there) the
    tombstone is not the stream's first event: the same request was refused as other
    params, told to use another key, and would have run twice (found by review)."""
    app = Application(store_url, clock=clock, retention=Retention(journal_seconds=60))
    app.operation("pay")(lambda ctx, params: None)
    try:
        first = app.submit("pay", {"amount": 5}, actor="a", tenant="t", idempotency_key="k1")
        asyncio.run(app.work_until_idle())
        clock.advance(61)
        monkeypatch.setattr(app.store, "delete_stream_events", lambda *args: None)
        app.purge(actor="janitor")  # the tombstone, and nothing deleted
        assert app.store.read_stream(first)[0].type == "operation.received"
        again = app.submit("pay", {"amount": 5}, actor="a", tenant="t", idempotency_key="k1")
        assert again == first
        with pytest.raises(Conflict, match="purged"):
            app.submit("pay", {"amount": 6}, actor="a", tenant="t", idempotency_key="k1")
    finally:
        app.close()


def test_a_hold_that_a_workers_commit_overtakes_is_decided_again(
    shop: Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's end landing between the hold's read and its append made the hold a
    `conflict` the operator had to retry (found by a defect hunt)."""
    operation_id = shop.submit("order.place", {"n": 9}, actor="a", tenant="t")
    engine = shop.engine("w1")
    [attempt] = engine.claim(5)
    ending = engine.execute(attempt)
    load = OperationJournal.load
    landed: list[bool] = []

    def then_the_end_lands(journal: OperationJournal, wanted: str) -> Any:
        found = load(journal, wanted)
        if not landed:
            landed.append(engine.commit([ending]) == [ending])
        return found

    monkeypatch.setattr(OperationJournal, "load", then_the_end_lands)
    held = shop.hold(operation_id, reason="audit", actor=ADMIN)
    assert landed == [True] and held["reason"] == "audit"
    assert types(shop, operation_id)[-1] == "operation.held"
    assert shop.status(operation_id)["status"] == "completed"
