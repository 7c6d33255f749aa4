"""Streams of the control-plane aggregates and how to read them back."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from domain.events import NewEvent
from domain.resources import (
    DeploymentState,
    NameState,
    Topic,
    VersionState,
    WorkerState,
    WorkflowResourceState,
)
from journal.store import Append, EventStore

#: One stream lists the Workflow resources that are open (claims look only at these).
CATALOG = "catalog-workflows"


def name_stream(space: str, kind: str, name: str) -> str:
    digest = hashlib.sha256("\x1f".join((space, kind, name)).encode()).hexdigest()
    return f"name-{digest[:40]}"


def worker_stream(uid: str) -> str:
    return f"worker-{uid}"


def version_stream(version_id: str) -> str:
    return "version-" + version_id.removeprefix("sha256:")


def deployment_stream(worker_uid: str) -> str:
    return f"deployment-{worker_uid}"


def workflow_stream(uid: str) -> str:
    return f"wfres-{uid}"


def _fold(state: Any, events: Sequence[Any], with_at: bool = False) -> Any:
    for event in events:
        if with_at:
            state.apply(event.type, event.data, event.at)
        else:
            state.apply(event.type, event.data)
    return state


def load_name(store: EventStore, stream: str) -> NameState:
    return _fold(NameState(), store.read_stream(stream))  # type: ignore[no-any-return]


def load_worker(store: EventStore, uid: str) -> WorkerState:
    return _fold(WorkerState(uid), store.read_stream(worker_stream(uid)), True)  # type: ignore[no-any-return]


def load_version(store: EventStore, version_id: str) -> VersionState:
    return _fold(VersionState(version_id), store.read_stream(version_stream(version_id)))  # type: ignore[no-any-return]


def load_deployment(store: EventStore, worker_uid: str) -> DeploymentState:
    events = store.read_stream(deployment_stream(worker_uid))
    return _fold(DeploymentState(worker_uid), events)  # type: ignore[no-any-return]


def load_workflow(store: EventStore, uid: str) -> WorkflowResourceState:
    events = store.read_stream(workflow_stream(uid))
    return _fold(WorkflowResourceState(uid), events, True)  # type: ignore[no-any-return]


def catalog_change(store: EventStore, event: NewEvent) -> Append:
    """``event`` appended to the catalog at its current version (a concurrent change
    makes the whole transaction fail and be decided again)."""
    current = store.read_stream(CATALOG)
    return Append(CATALOG, current[-1].version if current else 0, [event])


def catalog(store: EventStore, after_version: int = 0) -> tuple[int, list[tuple[str, str]]]:
    """Catalog changes after ``after_version``: (new version, [(added|removed, uid)])."""
    events = store.read_stream(CATALOG, after_version)
    changes = [
        ("added" if e.type == Topic.CATALOG_ADDED else "removed", str(e.data["uid"]))
        for e in events
    ]
    return (events[-1].version if events else after_version), changes
