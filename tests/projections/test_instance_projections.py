"""Instance projections (issue 6, DW-OBS-1 instance side, DW-RET-1): status by instance
and instanceCounts per Workflow resource, exact against the journal's own fold, rebuilt
from position 0 and from an Observed JSONL export with the same result."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from projection_checks import live_and_rebuilt_from_jsonl, rows

from blackops import Application, BlackOpsError, WaitTimeout
from blackops.testing import FakeClock
from domain.workflow import STATUSES
from projections.instances import InstanceCounts, InstanceStatus
from replay.verify import verify_store


class Shapes:
    """Ends in the status ``params["end"]`` asks for."""

    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> dict[str, Any] | None:
        end = event.params["end"]
        if end == "errored":
            raise ValueError("asked to fail")
        if end == "running":  # a do waiting out its retry delay (decisions D1)
            policy = {"maxAttempts": 2, "initialDelaySeconds": 600}
            await step.do("fail once", _fail, retry_policy=policy)
        if end in ("sleeping", "terminated"):
            await step.sleep("long", 3600)
        if end == "waiting":
            try:
                await step.wait_for_event("never", type="never", timeout_seconds=7200)
            except WaitTimeout:
                return None
        return {"end": end}


def _fail() -> dict[str, Any]:
    raise RuntimeError("once")


PLAN = ["queued", "running", "sleeping", "waiting", "complete", "errored", "terminated"]


def populate(app: Application, clock: FakeClock) -> dict[str, str]:
    """Two instances per status (one of which is later purged) and a second resource."""
    binding = app.register_workflow(Shapes)
    other = app.register_workflow(Shapes, uid="Other")
    expected: dict[str, str] = {}

    async def drive() -> None:
        old = await binding.create(id="old", params={"end": "complete"})
        await app.work_until_idle()
        assert (await old.status())["status"] == "complete"
        clock.advance(2_592_000)  # DW-RET-1: purged on the next pass
        await other.create(id="elsewhere", params={"end": "complete"})
        for end in PLAN:
            for n in range(2):
                await binding.create(id=f"{end}-{n}", params={"end": end})
                expected[f"{end}-{n}"] = end
        queued = [f"queued-{n}" for n in range(2)]
        # Only the queued ones must not start: run everything else first.
        for instance_id in queued:
            await (await binding.get(instance_id)).terminate()
            expected[instance_id] = "terminated"
        await app.work_until_idle()
        for n in range(2):
            await (await binding.get(f"terminated-{n}")).terminate()
        for n in range(2):
            await binding.create(id=f"late-{n}", params={"end": "complete"})
            expected[f"late-{n}"] = "queued"

    asyncio.run(drive())
    return expected


def test_instance_counts_and_statuses_equal_the_journal(any_store_url: str) -> None:
    """DW-OBS-1 (instanceCounts of all seven statuses), DW-RET-1 (purged: gone)."""
    clock = FakeClock()
    app = Application(any_store_url, clock=clock)
    try:
        expected = populate(app, clock)
        observed = app.instance_counts("Shapes")
        counts = observed["instanceCounts"]
        assert set(counts) == set(STATUSES)
        want = dict.fromkeys(STATUSES, 0)
        for status in expected.values():
            want[status] += 1
        assert counts == want
        assert observed["observedPosition"] == app.store.last_position()
        assert app.instance_counts("Other")["instanceCounts"]["complete"] == 1  # its own
        for instance_id, status in expected.items():
            folded = app.instances.status(app.workflow("Shapes").resource, instance_id)
            assert folded["status"] == status, instance_id
        listed = app.list_instances("Shapes", limit=5)
        seen = [item["id"] for item in listed["items"]]
        while listed["next"]:
            listed = app.list_instances("Shapes", limit=5, cursor=listed["next"])
            seen += [item["id"] for item in listed["items"]]
        assert sorted(seen) == sorted(expected)  # "old" was purged: not listed
        waiting = app.list_instances("Shapes", status="waiting")["items"]
        assert sorted(item["id"] for item in waiting) == ["waiting-0", "waiting-1"]
        for name in ("instance_status", "instance_counts"):
            runner = app.projections.runner(name)
            table = "blackops_" + runner.projection.name
            live = rows(runner, table)
            runner.rebuild()
            assert rows(runner, table) == live
    finally:
        app.close()


def test_instance_projections_rebuilt_from_jsonl_equal_live(store_url: str) -> None:
    """OL-11 for the instance projections: the JSONL export alone rebuilds them."""
    clock = FakeClock()
    app = Application(store_url, clock=clock)
    try:
        populate(app, clock)
        for projection in (InstanceStatus(), InstanceCounts()):
            live, rebuilt = live_and_rebuilt_from_jsonl(app, projection)
            assert rebuilt == live
    finally:
        app.close()


def test_purged_instances_still_verify_and_their_id_is_free_again(any_store_url: str) -> None:
    """DW-RET-1, OL-11: after the retention purge the journal still verifies (the
    tombstone accounts for the deleted events), get answers unknown_instance, and the id
    may be created again with an empty history."""
    clock = FakeClock()
    app = Application(any_store_url, clock=clock)
    try:
        binding = app.register_workflow(Shapes)

        async def drive() -> None:
            first = await binding.create(id="again", params={"end": "complete"})
            await app.work_until_idle()
            assert (await first.status())["status"] == "complete"
            clock.advance(2_592_000 - 1)
            await app.work_until_idle()
            assert (await first.status())["status"] == "complete"  # kept for 30 days
            clock.advance(1)
            await app.work_until_idle()

        asyncio.run(drive())
        with pytest.raises(BlackOpsError) as refused:
            asyncio.run(binding.get("again"))
        assert refused.value.code == "unknown_instance"
        report = verify_store(app.store)
        assert report.problems == [], report.problems
        again = asyncio.run(binding.create(id="again", params={"end": "complete"}))
        asyncio.run(app.work_until_idle())
        assert asyncio.run(again.status()) == {"status": "complete", "output": {"end": "complete"}}
    finally:
        app.close()


def test_app_purge_lists_and_purges_instances_past_retention(any_store_url: str) -> None:
    """DW-RET-1 through the batch purge (``app.purge`` / ``blackops purge``): a dry run
    lists the instance and changes nothing; the purge removes it, leaving others."""
    clock = FakeClock()
    app = Application(any_store_url, clock=clock)
    try:
        binding = app.register_workflow(Shapes)
        asyncio.run(binding.create(id="done", params={"end": "complete"}))
        asyncio.run(app.work_until_idle())
        clock.advance(2_592_000)
        asyncio.run(binding.create(id="young", params={"end": "complete"}))
        before = app.store.last_position()
        dry = app.purge(actor={"id": "ops", "kind": "admin"}, dry_run=True)
        assert [(i["workflow"], i["id"], i["status"]) for i in dry.instances] == [
            ("Shapes", "done", "complete")
        ]
        assert dry.to_dict()["instances"] == dry.instances
        assert app.store.last_position() == before  # a dry run changes nothing
        done = app.purge(actor={"id": "ops", "kind": "admin"})
        assert [i["id"] for i in done.instances] == ["done"]
        with pytest.raises(BlackOpsError) as refused:
            asyncio.run(binding.get("done"))
        assert refused.value.code == "unknown_instance"
        assert asyncio.run(asyncio.run(binding.get("young")).status()) == {"status": "queued"}
        assert app.purge(actor={"id": "ops", "kind": "admin"}).instances == []
    finally:
        app.close()


def test_any_instance_id_is_listed_on_every_store(any_store_url: str) -> None:
    """An instance id may hold every scalar value (decisions D4), U+0000 included, which a
    PostgreSQL text column refuses: schemathesis found a listing that answered 503 from
    then on, for every reader of the workflow, once such an instance existed."""
    odd = ["nul\x00inside", "\x00", 'quote"back\\slash', "emoji 🧾", "%2F/"]
    with Application(any_store_url, clock=FakeClock()) as app:
        binding = app.register_workflow(Shapes)

        async def create() -> None:
            for instance_id in odd:
                await binding.create(id=instance_id, params={"end": "complete"})

        asyncio.run(create())
        listed = app.list_instances(binding.uid, limit=1000)["items"]
        assert sorted(item["id"] for item in listed) == sorted(odd)
        assert {item["status"] for item in listed} == {"queued"}
        asyncio.run(app.work_until_idle())
        complete = app.list_instances(binding.uid, status="complete", limit=1000)["items"]
        assert sorted(item["id"] for item in complete) == sorted(odd)
