"""The console's pure parts: an instance's step history from its events, and the gate that
skips the browser tests locally but fails them under CI=true."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import console_world
import pytest

from blackops.console.pages import _why
from blackops.console.views import step_history


@dataclass
class Event:
    position: int
    type: str
    at: str
    data: dict[str, Any] = field(default_factory=dict)


def test_a_retried_do_step_its_delay_and_a_consumed_event() -> None:
    retry = {"name": "charge", "kind": "do", "attempt": 1, "message": "Retryable: later",
             "due_at": "2026-01-01T00:00:02.500000Z", "config": {}}  # fmt: skip
    charged = {"name": "charge", "kind": "do", "failed_attempts": 1, "outcome": "succeeded",
               "result": {"ok": True}}  # fmt: skip
    waiting = {"name": "decision", "kind": "wait", "due_at": "2026-01-01T01:00:04Z"}
    events = [
        Event(1, "workflow.created", "2026-01-01T00:00:00Z"),
        Event(2, "workflow.step_retry_scheduled", "2026-01-01T00:00:01Z", retry),
        Event(3, "workflow.step_completed", "2026-01-01T00:00:03Z", charged),
        Event(4, "workflow.step_suspended", "2026-01-01T00:00:04Z", waiting),
    ]
    steps, _ = step_history(events)
    charge, decision = steps
    assert (charge.kind, charge.status, charge.attempts) == ("do", "succeeded", 2)
    assert [(r["attempt"], r["delay"]) for r in charge.retries] == [(1, 1.5)]
    assert (decision.kind, decision.status) == ("wait_for_event", "waiting")
    assert decision.due_at == "2026-01-01T01:00:04Z"
    consumed = {"name": "decision", "kind": "wait", "event": 3, "outcome": "succeeded"}
    events.append(Event(5, "workflow.step_completed", "2026-01-01T00:00:05Z", consumed))
    decision = step_history(events)[0][1]
    assert (decision.status, decision.event_consumed) == ("succeeded", 3)


def test_a_step_pending_when_the_instance_ended_waits_for_nothing() -> None:
    """A terminated instance's pending wait was shown "waiting · until ..." for ever
    (found by a defect hunt, stop 36)."""
    waiting = {"name": "decision", "kind": "wait", "due_at": "2026-01-01T01:00:04Z"}
    events = [
        Event(1, "workflow.step_suspended", "2026-01-01T00:00:04Z", waiting),
        Event(2, "workflow.terminated", "2026-01-01T00:00:05Z"),
    ]
    (decision,), _ = step_history(events)
    assert decision.status == "unfinished"
    assert decision.due_at is None


def test_a_do_step_that_failed_for_good_counts_each_try_once() -> None:
    """maxAttempts 2, failed both times: the engine counts the final try in the failed
    step's ``failed_attempts`` (DW-DO-4), so the page says 2, not 3."""
    retry = {"name": "charge", "kind": "do", "attempt": 1, "message": "boom 1",
             "due_at": "2026-01-01T00:00:02Z", "config": {}}  # fmt: skip
    failed = {"name": "charge", "kind": "do", "outcome": "failed", "failed_attempts": 2,
              "error": {"name": "step_failed", "message": "boom 2"}}  # fmt: skip
    events = [
        Event(1, "workflow.step_retry_scheduled", "2026-01-01T00:00:01Z", retry),
        Event(2, "workflow.step_completed", "2026-01-01T00:00:03Z", failed),
    ]
    (charge,), _ = step_history(events)
    assert (charge.status, charge.attempts) == ("failed", 2)


def test_why_a_waiting_instance_waits_after_it_accepted_another_event() -> None:
    """The last event of a waiting instance may be an event it accepted but did not match:
    "why" still names the wait and its deadline."""
    waiting = {"name": "approval", "kind": "wait", "due_at": "2026-01-01T01:00:00Z"}
    events = [
        Event(1, "workflow.created", "2026-01-01T00:00:00Z"),
        Event(2, "workflow.step_suspended", "2026-01-01T00:00:01Z", waiting),
        Event(3, "workflow.event_accepted", "2026-01-01T00:00:02Z", {"type": "other"}),
    ]
    why = _why({"status": "waiting"}, events)
    assert why == "wait_for_event step 'approval' until 2026-01-01T01:00:00Z"


@pytest.mark.parametrize("aside", ["workflow.event_accepted", "workflow.termination_requested"])
def test_why_a_retrying_instance_waits_after_an_event_aside(aside: str) -> None:
    """The same for a running instance whose step retries (found by review)."""
    retry = {"name": "charge", "due_at": "2026-01-01T00:05:00Z"}
    events = [
        Event(1, "workflow.created", "2026-01-01T00:00:00Z"),
        Event(2, "workflow.step_retry_scheduled", "2026-01-01T00:00:01Z", retry),
        Event(3, aside, "2026-01-01T00:00:02Z", {"type": "other"}),
    ]
    assert _why({"status": "running"}, events) == "step 'charge' retries at 2026-01-01T00:05:00Z"
    started = Event(4, "workflow.context_started", "2026-01-01T00:05:01Z", {})
    assert _why({"status": "running"}, [*events, started]).startswith("last event: ")


@pytest.mark.parametrize("in_ci", [False, True])
def test_a_missing_browser_skips_locally_and_fails_under_ci(
    monkeypatch: pytest.MonkeyPatch, in_ci: bool
) -> None:
    monkeypatch.setattr(console_world, "CHROMIUM", "/nonexistent/chromium")
    monkeypatch.setattr(console_world, "IN_CI", in_ci)
    expected = pytest.fail.Exception if in_ci else pytest.skip.Exception
    with pytest.raises(expected, match="Chromium"):
        console_world.need_browser()


def checkpoint_reads(store: Any, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many checkpoint events each read of that topic from ``store`` returns, from now."""
    from blackops.audit.checkpoints import CHECKPOINT

    reads: list[int] = []
    real = store.read_topics

    def counted(topics: Any, page: int = 1000, after: int = 0) -> Any:
        found = real(topics, page, after)
        if CHECKPOINT in topics:
            reads.append(len(found))
        return found

    monkeypatch.setattr(store, "read_topics", counted)
    return reads


def test_the_checkpoint_history_reads_only_new_checkpoints(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each load of the journal page reads the checkpoints journaled since the last load (not
    all of them), and still shows the newest first, each signed and consistent."""
    from blackops import Application
    from blackops.audit.checkpoints import CheckpointService
    from blackops.console.views import checkpoint_history
    from blackops.testing import FakeClock
    from replay.notes import SigningKey

    app = Application(store_url, clock=FakeClock())
    app.operation("t.ok")(lambda ctx, params: {})
    try:
        service = CheckpointService(app.store, SigningKey.generate("console.test/log"), app.clock)
        reads = checkpoint_reads(app.store, monkeypatch)
        sizes = []
        for n in range(5):
            app.run("t.ok", {}, actor="a", tenant="default")
            service.sign(force=True)
            reads.clear()
            rows = checkpoint_history(service, limit=3)
            sizes.append([row.size for row in rows])
            assert all(row.signature_ok and row.matches_tree for row in rows)
            assert all(row.consistent for row in rows[:-1]) and len(rows) == min(n + 1, 3)
            assert sum(reads) == 1, reads  # the one journaled since the last load
        assert sizes[-1] == sorted(sizes[-1], reverse=True) and sizes[-1][0] > sizes[-2][0]
    finally:
        app.close()


def test_a_checkpoint_of_the_empty_journal_is_shown_and_proves_nothing(store_url: str) -> None:
    """A signer started on an empty journal signs a size-0 checkpoint first; the history
    asked for a consistency proof from it, which the tree refuses, and the journal page
    answered 500 until 51 newer checkpoints pushed it out (found by a defect hunt, stop 35).
    A size-0 checkpoint matches when its root is the empty tree's; nothing is proven from it."""
    from blackops import Application
    from blackops.audit.checkpoints import CheckpointService
    from blackops.console.views import checkpoint_history
    from blackops.testing import FakeClock
    from replay.notes import SigningKey

    app = Application(store_url, clock=FakeClock())
    app.operation("t.ok")(lambda ctx, params: {})
    try:
        service = CheckpointService(app.store, SigningKey.generate("console.test/log"), app.clock)
        service.sign(force=True)  # the journal is empty
        for _ in range(2):
            app.run("t.ok", {}, actor="a", tenant="default")
            service.sign(force=True)
        newest, middle, empty = checkpoint_history(service)
        assert empty.size == 0 and empty.matches_tree and empty.signature_ok
        assert middle.consistent is None  # from the empty tree: nothing to prove
        assert newest.consistent is True and newest.matches_tree
    finally:
        app.close()


def test_every_server_on_one_journal_shows_the_same_history_reading_only_new_ones(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Decisions U19: two servers on one journal (each its own store and checkpoint service;
    the second holds no key and trusts the keys the checkpoints name) show the same history
    whoever signed, each load reading only what was journaled since its last; a server
    started later (a restart) shows the same rows."""
    from blackops import Application
    from blackops.audit.checkpoints import CheckpointService
    from blackops.console.views import checkpoint_history, verifier_keys
    from blackops.testing import FakeClock
    from replay.notes import SigningKey

    key = SigningKey.generate("console.test/log")
    first, second = (Application(store_url, clock=FakeClock()) for _ in range(2))
    first.operation("t.ok")(lambda ctx, params: {})
    signing = CheckpointService(first.store, key, first.clock)
    reader = CheckpointService(second.store, None, second.clock)
    other_signer = CheckpointService(second.store, key, second.clock)  # a third process
    reads = checkpoint_reads(second.store, monkeypatch)

    def shown(service: CheckpointService) -> list[tuple[int, int, bool, bool | None]]:
        rows = checkpoint_history(service, limit=3)
        return [(r.position, r.size, r.signature_ok and r.matches_tree, r.consistent)
                for r in rows]  # fmt: skip

    try:
        for n in range(5):
            first.run("t.ok", {}, actor="a", tenant="default")
            (signing if n % 2 else other_signer).sign(force=True)
            reads.clear()
            seen = shown(reader)
            assert sum(reads) == 1, reads  # the one journaled since, verifier keys included
            assert seen == shown(signing) and len(seen) == min(n + 1, 3)
            assert all(ok for _, _, ok, _ in seen) and all(c for *_, c in seen[:-1])
        assert verifier_keys(reader) == [key.verifier()]
        restarted = Application(store_url, clock=FakeClock())
        try:
            assert shown(CheckpointService(restarted.store, None, restarted.clock)) == seen
        finally:
            restarted.close()
    finally:
        first.close()
        second.close()
