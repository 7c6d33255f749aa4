"""``decide_step`` for a name the journal already holds (DW-STEP-2/3, decisions D7): a
completed name called as its kind is answered from its record, with no event; called as
another kind, completed or not, it is a step_definition_mismatch (D7; stops 33-35
answered a completed one from its record whatever it was called as)."""

from __future__ import annotations

from typing import Any

import pytest

from domain.workflow import InstanceState, StepRecord
from domain.workflow_rules import decide_step

NOW = 1_000_000_000
POLICY = {"maxAttempts": 1, "initialDelaySeconds": 0, "backoff": "constant", "maxDelaySeconds": 0}
#: A request of each kind for step "x" whose arguments would start new work if used.
REQUESTS: dict[str, tuple[Any, ...]] = {
    "do": ("do", "x", 1, True, {"new": True}, POLICY),
    "sleep": ("sleep", "x", 10),
    "wait": ("wait", "x", "go", 10),
}
TIMEOUT = {"name": "wait_timeout", "message": "no 'go' event within 10 s"}
FAILED = {"name": "step_failed", "message": "RuntimeError: boom"}
COMPLETED = [
    # (recorded kind, record fields, the answer when it is called as that kind)
    ("do", {"succeeded": True, "result": {"a": 1}}, ("ok", {"a": 1})),
    ("do", {"error": FAILED}, ("failed", FAILED["message"], "step_failed")),
    ("sleep", {"succeeded": True}, ("ok", None)),
    ("wait", {"succeeded": True, "result": {"p": 1}}, ("ok", {"p": 1})),
    ("wait", {"error": TIMEOUT}, ("failed", TIMEOUT["message"], "wait_timeout")),
]


def _state(record: StepRecord) -> InstanceState:
    state = InstanceState("s", exists=True, lifetime_ends_at=NOW * 10, status="running")
    state.steps[record.name] = record
    return state


@pytest.mark.parametrize(("recorded", "fields", "answer"), COMPLETED)
@pytest.mark.parametrize("called", ["do", "sleep", "wait"])
def test_a_completed_name_is_answered_from_its_record_as_its_kind_only(
    recorded: str, fields: dict[str, Any], answer: tuple[Any, ...], called: str
) -> None:
    record = StepRecord("x", recorded, completed=True, **fields)
    decision = decide_step(_state(record), REQUESTS[called], NOW)
    assert decision.events == [] and decision.suspension is None
    if called == recorded:
        assert decision.reply == answer
    else:
        assert decision.reply[:2] == ("stop", "step_definition_mismatch")
        assert f"was a {recorded} step, now called as {called}" in decision.reply[2]


@pytest.mark.parametrize(
    ("recorded", "called"),
    [(a, b) for a in ("do", "sleep", "wait") for b in ("do", "sleep", "wait") if a != b],
)
def test_an_unfinished_name_called_as_another_kind_is_a_mismatch(
    recorded: str, called: str
) -> None:
    configs: dict[str, dict[str, Any]] = {
        "do": {"retryPolicy": POLICY},
        "sleep": {"seconds": 5},
        "wait": {"type": "go", "timeoutSeconds": 5},
    }
    config = configs[recorded]
    # A do waiting out its retry delay, a pending sleep, a pending wait.
    record = StepRecord("x", recorded, config=config, failed_attempts=1, due_at=NOW + 5)
    decision = decide_step(_state(record), REQUESTS[called], NOW)
    assert decision.events == [] and decision.suspension is None
    assert decision.reply[:2] == ("stop", "step_definition_mismatch")
    assert f"was a {recorded} step, now called as {called}" in decision.reply[2]
