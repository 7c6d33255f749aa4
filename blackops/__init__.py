"""BlackOps: durable operations on an event-sourced journal (``import blackops``)."""

from blackops.application import Application
from blackops.results import Failure, OperationResult, Rejection
from blackops.workflow_api import (
    InvalidStepArgument,
    RetryPolicy,
    StepFailed,
    WaitTimeout,
    WorkflowEvent,
    WorkflowStepError,
)
from blackops.workflows import WorkflowBinding, WorkflowInstance
from domain.context import Actor, ExecutionContext
from domain.documents import DocumentError, canonical_document
from domain.errors import BlackOpsError
from domain.retention import Retention
from domain.supervision import OperationRejected, Retryable, Supervision

__all__ = [
    "Actor",
    "Application",
    "BlackOpsError",
    "DocumentError",
    "ExecutionContext",
    "Failure",
    "InvalidStepArgument",
    "OperationRejected",
    "OperationResult",
    "Rejection",
    "Retention",
    "RetryPolicy",
    "Retryable",
    "StepFailed",
    "Supervision",
    "WaitTimeout",
    "WorkflowBinding",
    "WorkflowEvent",
    "WorkflowInstance",
    "WorkflowStepError",
    "canonical_document",
]
