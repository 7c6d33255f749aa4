"""Finishing instance purges cut short reads only the tombstones since the last finished
run (journal/marks.py, decisions F52), on memory, SQLite and PostgreSQL: a crash between
a tombstone and its deletion is still finished by the next purge, and later purges do
not read that tombstone again. The mark itself never moves backwards and is durable."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from blackops import Application
from blackops.testing import FakeClock
from blackops.workflows.retention import FINISHED
from journal.instances import instance_stream
from journal.store import EventStore

ADMIN = {"id": "ops", "kind": "admin"}


class Waits:
    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> dict[str, Any]:
        return {"got": await step.wait_for_event("a", type="go", timeout_seconds=1000)}


def test_a_mark_starts_at_zero_only_moves_forward_and_outlives_the_store(
    store_url: str,
) -> None:
    with EventStore(store_url) as store:
        assert store.mark("sweep") == 0
        store.advance_mark("sweep", 7)
        store.advance_mark("sweep", 3)  # an older sweep finishing late
        store.advance_mark("other", 1)
        assert (store.mark("sweep"), store.mark("other")) == (7, 1)
    with EventStore(store_url) as reopened:
        assert reopened.mark("sweep") == 7


def test_a_purge_cut_short_is_finished_once_and_its_tombstone_not_read_again(
    any_store_url: str,
) -> None:
    clock = FakeClock()
    app = Application(any_store_url, clock=clock)
    binding = app.register_workflow(Waits)
    for name in ("one", "two"):
        asyncio.run(binding.create(id=name))
    asyncio.run(app.work_until_idle())
    for name in ("one", "two"):
        asyncio.run(asyncio.run(binding.get(name)).terminate())
    clock.advance(2_592_000)
    store = app.store
    original = store.delete_stream_events

    def crash(stream: str, upto_version: int) -> int:
        raise RuntimeError("crashed before deleting")

    store.delete_stream_events = crash  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        app.purge(actor=ADMIN)
    store.delete_stream_events = original  # type: ignore[method-assign]
    streams = [instance_stream(binding.uid, name) for name in ("one", "two")]
    cut = [s for s in streams if store.read_stream(s)[-1].type == "workflow.purged"]
    assert len(cut) == 1  # the first purge crashed: the other instance was not reached
    first, second = cut[0], next(s for s in streams if s != cut[0])
    assert len(store.read_stream(first)) > 1  # tombstone appended, history still there
    tombstone = store.read_stream(first)[-1]
    assert store.mark(FINISHED) < tombstone.position  # the run began before it: not finished

    reads: list[int] = []
    read_topics = store.read_topics

    def spy(topics: Any, page: int = 1000, after: int = 0) -> Any:
        found = read_topics(topics, page=page, after=after)
        if list(topics) == ["workflow.purged"]:
            reads.append(len(found))
        return found

    store.read_topics = spy  # type: ignore[method-assign]
    app.purge(actor=ADMIN)  # finishes the cut one, purges the other
    assert [e.type for e in store.read_stream(first)] == ["workflow.purged"]
    assert [e.type for e in store.read_stream(second)] == ["workflow.purged"]
    assert reads == [1] and store.mark(FINISHED) >= tombstone.position
    app.purge(actor=ADMIN)  # the other's tombstone came after the mark: read once, no more
    app.purge(actor=ADMIN)
    assert reads == [1, 1, 0]
    app.close()
