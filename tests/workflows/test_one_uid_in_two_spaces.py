"""A code-registered uid in two Spaces of one store (two applications, one registration
each): each Space sees, counts and runs only its own instances, and another Space's
instance is `unknown_instance` (DW-INST-3) through a registration (found by a defect hunt: a
globex reader listed, counted and read acme's instance of the same uid)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import spaces  # type: ignore[import-not-found, unused-ignore]
from fastapi.testclient import TestClient

from blackops import Application
from blackops.http.app import create_http_app
from blackops.testing import FakeClock
from domain.errors import BlackOpsError


class Pause:
    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> Any:
        await step.wait_for_event("go", type="go", timeout_seconds=3600)
        return None


@pytest.fixture
def apps(store_url: str, clock: FakeClock) -> Iterator[tuple[Application, Application]]:
    acme, globex = Application(store_url, clock=clock), Application(store_url, clock=clock)
    acme.register_workflow(Pause, space="acme")
    globex.register_workflow(Pause, space="globex")
    spaces(acme, "acme", "globex")
    try:
        yield acme, globex
    finally:
        acme.close()
        globex.close()


def test_each_space_reads_only_its_own_instances(apps: tuple[Application, Application]) -> None:
    acme, globex = apps
    asyncio.run(acme.workflow("Pause").create(id="order-1", params={"space": "acme"}))
    asyncio.run(globex.workflow("Pause").create(id="g-1", params={"space": "globex"}))
    assert [i["id"] for i in acme.list_instances("Pause")["items"]] == ["order-1"]
    assert [i["id"] for i in globex.list_instances("Pause")["items"]] == ["g-1"]
    assert acme.instance_counts("Pause")["instanceCounts"]["queued"] == 1
    assert globex.instance_counts("Pause")["instanceCounts"]["queued"] == 1
    acme_resource = acme.workflow("Pause").resource
    globex_resource = globex.workflow("Pause").resource
    with pytest.raises(BlackOpsError) as unknown:
        globex.instances.status(globex_resource, "order-1")
    assert unknown.value.code == "unknown_instance"
    assert acme.instances.status(acme_resource, "order-1")["status"] == "queued"
    served = TestClient(create_http_app(globex, "SYS"))
    auth = {"Authorization": "Bearer SYS"}
    base = "/v1/spaces/globex/workflows/Pause"
    listed = served.get(f"{base}/instances", headers=auth).json()
    assert [i["id"] for i in listed["items"]] == ["g-1"]
    counts = served.get(f"{base}/instance-counts", headers=auth).json()["instanceCounts"]
    assert sum(counts.values()) == 1
    assert served.get(f"{base}/instances/order-1", headers=auth).status_code == 404


def test_each_spaces_worker_runs_only_its_own_instances(
    apps: tuple[Application, Application], clock: FakeClock
) -> None:
    """globex's registration is globex's code and env: acme's instance never runs on it."""
    acme, globex = apps
    asyncio.run(acme.workflow("Pause").create(id="order-1", params={"space": "acme"}))
    resource = acme.workflow("Pause").resource
    asyncio.run(globex.work_until_idle())  # globex's worker: acme's instance is not its own
    assert acme.instances.status(resource, "order-1")["status"] == "queued"
    clock.advance(6)  # past the reservation globex's worker held on it
    asyncio.run(acme.work_until_idle())
    assert acme.instances.status(resource, "order-1")["status"] == "waiting"


def test_a_replay_check_reads_only_its_registrations_space(
    apps: tuple[Application, Application],
) -> None:
    """`recorded_histories` of a registered uid took the other Space's histories too (its
    code replayed over another tenant's instances: found by review)."""
    from blackops.testing import recorded_histories

    acme, globex = apps
    asyncio.run(acme.workflow("Pause").create(id="a-1", params={"space": "acme"}))
    asyncio.run(globex.workflow("Pause").create(id="g-1", params={"space": "globex"}))
    histories = recorded_histories(acme, "Pause")
    assert [h.events[0].context["tenant"] for h in histories] == ["acme"]
    with pytest.raises(BlackOpsError):
        recorded_histories(acme, "Pause", instances=["g-1"])


class Quick:
    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> Any:
        return {"done": True}


def test_an_id_purged_in_one_space_and_created_in_another_is_listed_there(
    store_url: str, clock: FakeClock
) -> None:
    """The listing applied a purge and the id's new `workflow.created` (W2: the id is free
    again) in one batch as an update of the old row, whose Space it kept: acme listed
    globex's instance and globex did not (found by a defect hunt)."""
    acme, globex = Application(store_url, clock=clock), Application(store_url, clock=clock)
    try:
        acme.register_workflow(Quick, space="acme")
        globex.register_workflow(Quick, space="globex")
        spaces(acme, "acme", "globex")
        asyncio.run(acme.workflow("Quick").create(id="shared-id"))
        asyncio.run(acme.work_until_idle())
        assert [i["status"] for i in acme.list_instances("Quick")["items"]] == ["complete"]
        clock.advance(31 * 86400)
        assert acme.purge(actor="root").instances
        asyncio.run(globex.workflow("Quick").create(id="shared-id"))
        assert acme.list_instances("Quick")["items"] == []
        assert [i["id"] for i in globex.list_instances("Quick")["items"]] == ["shared-id"]
        live = globex.list_instances("Quick")["items"]
        acme.projections.runner("instance_status").rebuild()
        assert globex.list_instances("Quick")["items"] == live  # as a rebuild has it
    finally:
        acme.close()
        globex.close()
