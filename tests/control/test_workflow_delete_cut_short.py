"""A Workflow DELETE whose purge of an instance was cut short between the tombstone and the
deletion of the history (the worker died there) does not complete until that history is
gone (DW-DEL-2, DW-DEL-3: found by a defect hunt, stop 39)."""

from __future__ import annotations

from typing import Any

import pytest
from resource_helpers import ACTOR, SPACE, deployed_worker, op_status, ready_workflow, work

from blackops import Application
from blackops.testing import FakeClock
from domain.errors import BackendUnavailable
from journal.instances import instance_stream
from journal.store import EventStore


def test_dw_del_2_a_purge_cut_short_is_finished_before_the_delete_completes(
    app: Application, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first deletion of an instance's history fails after its tombstone committed
    (as a worker killed there leaves it); the retried DELETE deletes that history before
    it records ``workflow.deleted``: no event of the UID's instances holds their params."""
    deployed = deployed_worker(app)
    uid = ready_workflow(app, deployed.worker)
    resource = app.workflow(uid).resource
    ids = [app.instances.create(resource, f"i-{n}", {"secret": f"S-{n}"}, ACTOR) for n in range(3)]
    work(app)
    streams = [instance_stream(uid, i) for i in ids]

    original = EventStore.delete_stream_events
    cut: list[str] = []

    def dies_once(store: EventStore, stream: str, version: int) -> int:
        if stream in streams and not cut:
            cut.append(stream)  # the tombstone is committed; the history is not deleted
            raise BackendUnavailable("the worker died between the tombstone and the deletion")
        return original(store, stream, version)

    monkeypatch.setattr(EventStore, "delete_stream_events", dies_once)
    deleted = app.control.delete_workflow(SPACE, uid, ACTOR, "del")
    operation = deleted["operationId"]
    for _ in range(5):
        work(app)
        if op_status(app, operation) == "completed":
            break
        clock.advance(60)  # the retry's backoff
    assert cut, "the cut was never reached"
    assert op_status(app, operation) == "completed"
    for stream in streams:
        kinds = [e.type for e in app.store.read_stream(stream)]
        assert kinds == ["workflow.purged"], (stream, kinds)
    left: list[Any] = [e for e in app.store.iter_after(0) if "S-" in str(e.data)]
    assert left == []
