"""Two Versions of the same module names in one executor process of a real worker.

DW-REPLAY-2 with isolation (decisions R18): a worker with a single executor process
runs contexts of two Versions of ``flows`` + ``helpers``; every context runs its own
Version's code, in that one process, and no bundle module ever appears under its bare
name in ``sys.modules``.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from resource_helpers import (
    deploy,
    new_worker,
    ready_workflow,
    sync,
    upload,
    work,
)

from blackops import Application
from journal.instances import instance_stream

#: Real processes and servers against real leases: run on their own, after the rest.
pytestmark = pytest.mark.faults

FLOWS = """\
import os
import sys

import helpers


class Flow:
    def __init__(self, env):
        self.env = env

    async def run(self, event, step):
        def look():
            return {
                "pid": os.getpid(),
                "mark": helpers.MARK,
                "bare": "helpers" in sys.modules or "flows" in sys.modules,
            }

        first = await step.do("look", look)
        again = await step.do("again", look)
        return {"first": first, "again": again}
"""


def bundle(mark: str) -> dict[str, Any]:
    return {"modules": {"flows": FLOWS, "helpers": f"MARK = {mark!r}\n"}, "main": "flows"}


def test_dw_replay_2_two_versions_side_by_side_in_one_executor_process(store_url: str) -> None:
    """DW-REPLAY-2: at 50/50 a worker with ONE executor process runs contexts of both
    Versions; each context sees only its own Version's ``helpers`` (its mark), all of
    them ran in the same process, and no bundle module is registered under a bare name."""
    app = Application(store_url)
    try:
        worker = new_worker(app)
        one = upload(app, worker, bundle("one"))
        two = upload(app, worker, bundle("two"))
        work(app)  # verifies both
        deploy(app, worker, [(one, 50), (two, 50)])
        uid = ready_workflow(app, worker)
        binding = app.workflow(uid)
        ids = [f"i{n}" for n in range(16)]
        for instance_id in ids:
            sync(binding.create(id=instance_id))
        runner = app.worker(workflow_processes=1).start()
        try:
            deadline = time.monotonic() + 60
            statuses: dict[str, Any] = {}
            while time.monotonic() < deadline:
                statuses = {i: sync(sync(binding.get(i)).status()) for i in ids}
                if all(s["status"] == "complete" for s in statuses.values()):
                    break
                time.sleep(0.1)
        finally:
            runner.stop()
        assert all(s["status"] == "complete" for s in statuses.values()), statuses
        marks = {one: "one", two: "two"}
        pids = set()
        picked = set()
        for instance_id in ids:
            events = app.store.read_stream(instance_stream(uid, instance_id))
            (version,) = [e.data["version"] for e in events if e.type.endswith("context_started")]
            picked.add(version)
            output = statuses[instance_id]["output"]
            for seen in (output["first"], output["again"]):
                assert seen["mark"] == marks[version]  # its own Version's helpers
                assert seen["bare"] is False  # never registered under a bare name
                pids.add(seen["pid"])
        assert picked == {one, two}  # both Versions ran ...
        assert len(pids) == 1  # ... in one and the same executor process
    finally:
        app.close()
