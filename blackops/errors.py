"""The error taxonomy as users catch it (python-contract §3): one class per kind, each with
a stable ``.code`` that HTTP bodies and CLI JSON carry too."""

from __future__ import annotations

from domain.documents import DocumentError
from domain.errors import (
    HTTP_STATUS,
    BackendUnavailable,
    BlackOpsError,
    Conflict,
    DependencyConflict,
    FencingError,
    Forbidden,
    InvalidRequest,
    NotFound,
    ResourceBusy,
    Unauthorized,
)
from domain.workflow import EventQueueFull, InstanceExists, InstanceTerminal, UnknownInstance

__all__ = [
    "HTTP_STATUS",
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
]
