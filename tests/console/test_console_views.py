"""The console's pure parts: an instance's step history from its events, and the gate that
skips the browser tests locally but fails them under CI=true."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import console_world
import pytest

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


@pytest.mark.parametrize("in_ci", [False, True])
def test_a_missing_browser_skips_locally_and_fails_under_ci(
    monkeypatch: pytest.MonkeyPatch, in_ci: bool
) -> None:
    monkeypatch.setattr(console_world, "CHROMIUM", "/nonexistent/chromium")
    monkeypatch.setattr(console_world, "IN_CI", in_ci)
    expected = pytest.fail.Exception if in_ci else pytest.skip.Exception
    with pytest.raises(expected, match="Chromium"):
        console_world.need_browser()
