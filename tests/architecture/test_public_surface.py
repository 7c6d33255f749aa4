"""What users import stays what it is: ``blackops.__all__`` is pinned, every name resolves,
``import blackops`` loads nothing heavy, and the testing kit exports its two names."""

from __future__ import annotations

import subprocess
import sys

import pytest

import blackops
import blackops.testing
from blackops import errors

PUBLIC = [
    "Actor", "Application", "BackendUnavailable", "BlackOpsError", "Conflict",
    "DependencyConflict", "DocumentError", "EventQueueFull", "ExecutionContext", "Failure",
    "FencingError", "Forbidden", "InstanceExists", "InstanceTerminal", "InvalidRequest",
    "InvalidStepArgument", "NotFound", "Observer", "OperationRejected", "OperationResult",
    "OutcomeRecord", "Rejection", "ReplayReport", "ReplayStopped", "ResourceBusy", "Retention",
    "RetryPolicy", "Retryable", "StepFailed", "Supervision", "Unauthorized", "UnknownInstance",
    "WaitTimeout", "WorkflowBinding", "WorkflowEvent", "WorkflowInstance", "WorkflowStepError",
    "canonical_document", "replay",
]  # fmt: skip


def test_the_public_names_are_pinned() -> None:
    assert blackops.__all__ == PUBLIC
    for name in PUBLIC:
        assert getattr(blackops, name) is not None, name


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchThing"):
        blackops.NoSuchThing  # noqa: B018


def test_every_error_class_has_a_taxonomy_code() -> None:
    """Each exported error is a BlackOpsError whose codes are in the HTTP table (§3)."""
    for name in errors.__all__:
        value = getattr(errors, name)
        if isinstance(value, type):
            assert issubclass(value, blackops.BlackOpsError), name
            assert getattr(blackops, name) is value, name
    assert blackops.InstanceExists("x").code == "instance_exists"
    assert blackops.NotFound("x").http_status == 404


def test_importing_blackops_loads_nothing_heavy() -> None:
    """Names load on first use: ``import blackops`` alone imports no web framework, no
    database driver and not even the application."""
    probe = (
        "import sys, blackops\n"
        "heavy = [m for m in ('fastapi', 'uvicorn', 'psycopg', 'eventsourcing', "
        "'blackops.application', 'blackops.control') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_testing_kit_exports_its_names() -> None:
    assert blackops.testing.__all__ == [
        "FakeClock",
        "TestEnvironment",
        "recorded_histories",
        "replay_histories",
    ]
