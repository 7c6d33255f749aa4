"""Workflow instance streams: where an instance's journal lives and how it is read.

An instance id is 1-256 Unicode scalar values (DW-INST-1), which a stream id cannot
carry, so the stream id is derived from ``(workflow uid, instance id)`` by SHA-256:
the same pair always names the same stream, and the journal's unique
``(stream, version)`` constraint decides between creates racing on any number of
processes (DW-INST-2). The instance id itself is in ``workflow.created``.
"""

from __future__ import annotations

import hashlib

from domain.workflow import InstanceState, fold
from journal.store import EventStore

PREFIX = "wf-"


def instance_stream(workflow: str, instance_id: str) -> str:
    digest = hashlib.sha256(f"{workflow}\x1f{instance_id}".encode("utf-8", "surrogatepass"))
    return PREFIX + digest.hexdigest()[:40]


def load_instance(store: EventStore, stream: str) -> InstanceState:
    return fold(stream, store.read_stream(stream))


def refresh(store: EventStore, state: InstanceState) -> InstanceState:
    """Fold what was appended to ``state``'s stream since it was read (in place)."""
    return fold(state.stream, store.read_stream(state.stream, state.version), state)
