"""An instance that outlives its Workflow's DELETE only because its creator died between
its append and its own post-commit check is removed by the retention purge (DW-DEL-2)."""

from __future__ import annotations

from resource_helpers import (
    ACTOR,
    SPACE,
    deployed_worker,
    instance_rows,
    ready_workflow,
    work,
)

from blackops import Application
from journal.instances import instance_stream, load_instance


def test_dw_del_2_an_orphan_left_by_a_dead_creator_is_purged_by_retention(
    app: Application,
) -> None:
    """DW-DEL-2: after the DELETE completed, an instance appended with the gate bypassed
    (its caller died before the check) is invisible, never claimed, and
    ``purge`` stops and purges it; its tombstone names it only by digest."""
    deployed = deployed_worker(app)
    uid = ready_workflow(app, deployed.worker)
    resource = app.workflow(uid).resource
    deleted = app.control.delete_workflow(SPACE, uid, ACTOR, "del")
    work(app)
    assert app.status(deleted["operationId"])["status"] == "completed"

    instances = app.instances
    gate, instances.gate = instances.gate, None  # the creator that never checked again
    try:
        instances.create(resource, "orphan", None, ACTOR)
    finally:
        instances.gate = gate
    stream = instance_stream(uid, "orphan")
    assert instance_rows(app, uid) == [stream]
    work(app)  # off the catalog: no worker claims it
    assert load_instance(app.store, stream).contexts == 0

    report = app.purge(actor={"id": "ops", "kind": "cli"})
    assert [i["id"] for i in report.instances] == ["orphan"]
    assert instance_rows(app, uid) == []
    events = app.store.read_stream(stream)
    assert [e.type for e in events] == ["workflow.purged"]
    assert events[0].data["instance_id"].startswith("sha256:")
    assert "orphan" not in str(events[0].data) + str(events[0].context)
