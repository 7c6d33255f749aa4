"""BlackOps: durable operations and workflows on an event-sourced journal (``import blackops``).

Names load on first use (PEP 562), so ``import blackops`` and the CLI start fast; the
list below is the public surface, pinned by a test.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from blackops.application import Application
    from blackops.errors import (
        BackendUnavailable,
        BlackOpsError,
        Conflict,
        DependencyConflict,
        DocumentError,
        EventQueueFull,
        FencingError,
        Forbidden,
        InstanceExists,
        InstanceTerminal,
        InvalidRequest,
        NotFound,
        ResourceBusy,
        Unauthorized,
        UnknownInstance,
    )
    from blackops.operations.outcomes import OutcomeRecord
    from blackops.operations.results import Failure, OperationResult, Rejection
    from blackops.workflows.api import (
        InvalidStepArgument,
        RetryPolicy,
        StepFailed,
        WaitTimeout,
        WorkflowEvent,
        WorkflowStepError,
    )
    from blackops.workflows.binding import WorkflowBinding, WorkflowInstance
    from domain.context import Actor, ExecutionContext
    from domain.documents import canonical_document
    from domain.retention import Retention
    from domain.supervision import OperationRejected, Retryable, Supervision
    from replay.replayer import Observer, ReplayReport, ReplayStopped, replay

_WHERE = {
    "Application": "blackops.application",
    "Failure": "blackops.operations.results",
    "OperationResult": "blackops.operations.results",
    "Rejection": "blackops.operations.results",
    "OutcomeRecord": "blackops.operations.outcomes",
    "InvalidStepArgument": "blackops.workflows.api",
    "RetryPolicy": "blackops.workflows.api",
    "StepFailed": "blackops.workflows.api",
    "WaitTimeout": "blackops.workflows.api",
    "WorkflowEvent": "blackops.workflows.api",
    "WorkflowStepError": "blackops.workflows.api",
    "WorkflowBinding": "blackops.workflows.binding",
    "WorkflowInstance": "blackops.workflows.binding",
    "Actor": "domain.context",
    "ExecutionContext": "domain.context",
    "canonical_document": "domain.documents",
    "Retention": "domain.retention",
    "OperationRejected": "domain.supervision",
    "Retryable": "domain.supervision",
    "Supervision": "domain.supervision",
    # Observer replay (python-contract §5, ``blackops replay``).
    "Observer": "replay.replayer",
    "ReplayReport": "replay.replayer",
    "ReplayStopped": "replay.replayer",
    "replay": "replay.replayer",
    # The error taxonomy (python-contract §3).
    **dict.fromkeys(
        (
            "BackendUnavailable",
            "BlackOpsError",
            "Conflict",
            "DependencyConflict",
            "DocumentError",
            "EventQueueFull",
            "FencingError",
            "Forbidden",
            "InstanceExists",
            "InstanceTerminal",
            "InvalidRequest",
            "NotFound",
            "ResourceBusy",
            "Unauthorized",
            "UnknownInstance",
        ),
        "blackops.errors",
    ),
}

__all__ = [
    "Actor",
    "Application",
    "BackendUnavailable",
    "BlackOpsError",
    "Conflict",
    "DependencyConflict",
    "DocumentError",
    "EventQueueFull",
    "ExecutionContext",
    "Failure",
    "FencingError",
    "Forbidden",
    "InstanceExists",
    "InstanceTerminal",
    "InvalidRequest",
    "InvalidStepArgument",
    "NotFound",
    "Observer",
    "OperationRejected",
    "OperationResult",
    "OutcomeRecord",
    "Rejection",
    "ReplayReport",
    "ReplayStopped",
    "ResourceBusy",
    "Retention",
    "RetryPolicy",
    "Retryable",
    "StepFailed",
    "Supervision",
    "Unauthorized",
    "UnknownInstance",
    "WaitTimeout",
    "WorkflowBinding",
    "WorkflowEvent",
    "WorkflowInstance",
    "WorkflowStepError",
    "canonical_document",
    "replay",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'blackops' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
