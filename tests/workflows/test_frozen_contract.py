"""DW-FROZEN: nothing beyond the contract is added to what workflow code and callers see:
the same seven statuses, five failure reasons, three steps, and instance inputs."""

from __future__ import annotations

import inspect
from typing import Any

from blackops import Application, WorkflowInstance
from blackops.workflows.binding import WorkflowBinding
from blackops.workflows.context import ContextPlan, Step
from domain.workflow import REASONS, STATUSES

SPEC_STATUSES = ("queued", "running", "sleeping", "waiting", "complete", "errored", "terminated")
SPEC_REASONS = (
    "run_threw",
    "step_failed",
    "step_limit_exceeded",
    "lifetime_exceeded",
    "step_definition_mismatch",
)


def public(obj: Any) -> set[str]:
    return {name for name in dir(obj) if not name.startswith("_")}


def test_dw_frozen_statuses_and_reasons_are_exactly_the_contracts() -> None:
    """DW-FROZEN, DW-INST-4, DW-INST-5."""
    assert STATUSES == SPEC_STATUSES
    assert REASONS == SPEC_REASONS


def test_dw_frozen_step_has_exactly_three_operations() -> None:
    """DW-FROZEN, DW-STEP-1: ``step`` offers do, sleep and wait_for_event, nothing else."""

    class Host:
        def request(self, message: tuple[Any, ...]) -> tuple[Any, ...]:
            raise AssertionError("not called")

    step = Step(ContextPlan("s", "w", "v", "i", None, {}), Host())
    assert public(step) == {"do", "sleep", "wait_for_event"}


def test_dw_frozen_instance_inputs_are_the_contracts() -> None:
    """DW-FROZEN: create takes id and params, send_event type and payload, keywords only;
    an instance offers id, status, send_event and terminate."""
    create = inspect.signature(WorkflowBinding.create).parameters
    assert [n for n in create if n != "self"] == ["id", "params"]
    assert all(create[n].kind is inspect.Parameter.KEYWORD_ONLY for n in ("id", "params"))
    send = inspect.signature(WorkflowInstance.send_event).parameters
    assert [n for n in send if n != "self"] == ["type", "payload"]
    assert public(WorkflowInstance) == {"id", "status", "send_event", "terminate"}
    assert {"create", "get"} <= public(WorkflowBinding)


def test_dw_frozen_unknown_inputs_are_refused(tmp_path: Any) -> None:
    """DW-FROZEN: an input the contract does not have is a TypeError, never ignored."""
    import asyncio

    import pytest

    class Noop:
        def __init__(self, env: Any) -> None:
            self.env = env

        def run(self, event: Any, step: Any) -> None:
            return None

    app = Application("memory://")
    binding = app.register_workflow(Noop)
    with pytest.raises(TypeError):
        asyncio.run(binding.create(id="x", priority=1))  # type: ignore[call-arg]
    instance = asyncio.run(binding.create(id="x"))
    with pytest.raises(TypeError):
        asyncio.run(instance.send_event(type="t", payload=None, urgent=True))  # type: ignore[call-arg]
