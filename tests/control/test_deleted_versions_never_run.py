"""A deleted Version never starts a context, and deleting one under verification ends that
verification as `version_deleted` (found by a defect hunt, stop 34; both stores).

A Deployment update completed and the Version it dropped was deleted, yet an instance created
right after ran the deleted Version: workers read the allocation at most ``ttl`` (0.25 s) old
and neither handler waited that out. A delete landing while the Version was verified made
the verification fail with a bare ``AssertionError``."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from blackops import Actor, Application

ME = Actor("ana", "cli")
FLOW = (
    "class Flow:\n    def __init__(self, env): self.env = env\n"
    "    async def run(self, event, step):\n        return await step.do('a', lambda: {'m': %r})\n"
)


def space(app: Application) -> Application:
    app.access.create_space("acme", app.access_context(ME, "acme"))
    return app


def test_no_context_starts_on_a_version_deleted_after_its_deployment_moved_on(
    store_url: str,
) -> None:
    async def scenario() -> dict[str, Any]:
        app = space(Application(store_url))
        control = app.control
        worker = control.create_worker("acme", "w", ME)["uid"]
        v1, v2 = (
            control.upload_version("acme", worker, {"modules": {"m": FLOW % m}, "main": "m"}, ME)[
                "version"
            ]
            for m in ("v1", "v2")
        )
        await app.work_until_idle()
        control.update_deployment("acme", worker, [{"version": v1, "weight": 100}], ME)
        await app.work_until_idle()
        spec = {"worker": {"resourceUid": worker}, "className": "Flow"}
        uid = control.create_workflow("acme", {"name": "f", "spec": spec}, ME)["resource"]["uid"]
        await app.work_until_idle()
        await app.workflow(uid).create(id="a")
        await app.work_until_idle()  # the allocation [v1] is read (and was cached)
        control.update_deployment("acme", worker, [{"version": v2, "weight": 100}], ME)
        await app.work_until_idle()
        deleted = control.delete_version("acme", v1, ME)
        await app.work_until_idle()
        assert app.status(deleted["operationId"])["status"] == "completed"
        later = await app.workflow(uid).create(id="b")
        await app.work_until_idle()
        status = await later.status()
        app.close()
        return status

    assert asyncio.run(scenario())["output"] == {"m": "v2"}  # was {'m': 'v1'}


def test_a_version_deleted_while_it_is_verified_ends_as_version_deleted(store_url: str) -> None:
    slow = "import time\ntime.sleep(2)\n" + FLOW % "x"
    app = space(Application(store_url))
    worker = app.control.create_worker("acme", "w", ME)["uid"]
    up = app.control.upload_version("acme", worker, {"modules": {"m": slow}, "main": "m"}, ME)
    verifying = threading.Thread(target=lambda: asyncio.run(app.work_until_idle()))
    verifying.start()
    time.sleep(0.7)  # the verifier is importing the module
    app.control.delete_version("acme", up["version"], ME)
    verifying.join()
    asyncio.run(app.work_until_idle())
    status = app.status(up["operationId"])
    app.close()
    assert status["status"] == "rejected", status  # was failed: AssertionError
    assert status["rejection"]["code"] == "version_deleted", status
