"""The journal tail's thread ends when its application's store closes, waking the streams it
served (they read for themselves and meet ``backend_unavailable``): before, it polled the
closed store for as long as a stream stayed subscribed, and on SQLite a poll racing the
close crashed the process (a CI worker died of SIGSEGV so)."""

from __future__ import annotations

import asyncio
import threading

from blackops import Application
from blackops.http.stream import JournalTail, StreamSettings


def _tail_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "blackops-stream-tail"]


def test_the_tail_thread_ends_and_wakes_its_streams_when_the_store_closes(
    app: Application,
) -> None:
    before = set(_tail_threads())
    tail = JournalTail(app, StreamSettings(heartbeat_seconds=60, poll_seconds=0.02))

    async def subscribed_through_a_close() -> bool:
        with tail.subscribe(None) as waiter:
            for _ in range(200):  # the tail has set its window's floor
                if tail._floor is not None:
                    break
                await asyncio.sleep(0.01)
            assert tail._floor is not None
            ours = set(_tail_threads()) - before
            assert len(ours) == 1
            waiter.event.clear()
            await asyncio.to_thread(app.close)
            await asyncio.wait_for(waiter.event.wait(), 5)  # woken by the tail's end
            (thread,) = ours
            await asyncio.to_thread(thread.join, 5)
            return thread.is_alive()

    assert asyncio.run(subscribed_through_a_close()) is False
    assert tail._thread is None
