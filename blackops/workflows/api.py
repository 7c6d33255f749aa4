"""What workflow code sees: host errors, invalid-argument errors and uncatchable stops.

python-contract §1: ``StepFailed`` / ``WaitTimeout`` derive from ``WorkflowStepError``
(an ``Exception``) and carry a read-only ``.name``. Whether one is *genuine* is decided
by object identity inside the host (DW-HERR-1), never by its name or class: an app
may construct its own ``StepFailed``, and it is just another exception.

The stops the app must not be able to catch away (step_definition_mismatch, the
limits, fencing, suspension) derive from ``BaseException``; the host records their
outcome even if the app catches them (DW-STEP-2, DW-STEP-5).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from domain.workflow import InvalidStepArgument, RetryPolicy

__all__ = [
    "InvalidStepArgument",
    "RetryPolicy",
    "StepFailed",
    "WaitTimeout",
    "WorkflowEvent",
    "WorkflowStepError",
]


class WorkflowStepError(Exception):
    """A step's host error; ``.name`` is its exact snake_case name and cannot be set."""

    _NAME = ""

    @property
    def name(self) -> str:
        # The class's, never an instance attribute's: `error._NAME = ...` relabelled one
        # error (found by a spec review, stop 36).
        return type(self)._NAME


class StepFailed(WorkflowStepError):
    _NAME = "step_failed"


class WaitTimeout(WorkflowStepError):
    _NAME = "wait_timeout"


class ContextStop(BaseException):
    """Ends an execution context; not an ``Exception``, so ``except Exception`` misses it.

    ``reason`` is a failure reason (``step_definition_mismatch``,
    ``step_limit_exceeded``, ``lifetime_exceeded``) or ``suspend`` / ``fenced``.
    """

    def __init__(self, reason: str, message: str = "") -> None:
        super().__init__(reason, message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True, slots=True)
class WorkflowEvent:
    """``run``'s first argument: ``event.instance_id`` and ``event.params``."""

    instance_id: str
    params: dict[str, Any] | None = None
