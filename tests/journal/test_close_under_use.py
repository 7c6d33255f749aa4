"""Closing a store while other threads call into it (an application closed under a live
stream's tail, a worker's read): the close waits for the calls inside, later calls are
``backend_unavailable``, and the process lives. eventsourcing's pools close connections
in use too, and a SQLite connection closed under a running statement killed the process
with SIGSEGV (a CI run lost a test worker so)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from eventsourcing.persistence import Notification

from domain.errors import BackendUnavailable
from domain.events import NewEvent
from journal.store import Append, EventStore

_HAMMERED_CLOSES = """
import sys, threading, time
from domain.errors import BackendUnavailable
from journal.store import EventStore
for round in range(60):
    store = EventStore(sys.argv[1] + f"/j{round}.db")
    stop = threading.Event()
    def hammer():
        while not stop.is_set():
            try:
                store.last_position()
                store.read_after(0, 10)
            except BackendUnavailable:
                pass
    threads = [threading.Thread(target=hammer) for _ in range(2)]
    for thread in threads:
        thread.start()
    time.sleep(0.005)
    store.close()
    time.sleep(0.005)
    stop.set()
    for thread in threads:
        thread.join()
print("lived")
"""


def test_closing_a_sqlite_store_under_reading_threads_does_not_crash_the_process(
    tmp_path: Path,
) -> None:
    """Before the gate, this died of SIGSEGV within a few rounds."""
    done = subprocess.run(
        [sys.executable, "-c", _HAMMERED_CLOSES, f"sqlite:///{tmp_path}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.strip() == "lived"


def test_a_close_waits_for_a_call_inside_and_refuses_the_calls_after(store_url: str) -> None:
    store = EventStore(store_url)
    made = NewEvent(type="thing.made", at="2026-12-07T09:00:00.000000Z", context={}, data={})
    store.append(Append("s-1", 0, (made,)))
    inside, release = threading.Event(), threading.Event()
    closed_at: list[float] = []
    read_done_at: list[float] = []
    original = store._recorder.select_stream

    def held_select(stream: str, after_version: int = 0) -> list[Notification]:
        inside.set()
        release.wait(10)
        return original(stream, after_version)

    store._recorder.select_stream = held_select  # type: ignore[method-assign]
    reader_saw: list[int] = []

    def read() -> None:
        reader_saw.append(len(store.read_stream("s-1")))
        read_done_at.append(time.monotonic())

    reader = threading.Thread(target=read)
    reader.start()
    assert inside.wait(10)

    def close() -> None:
        store.close()
        closed_at.append(time.monotonic())

    closer = threading.Thread(target=close)
    closer.start()
    time.sleep(0.2)
    assert not closed_at, "the close did not wait for the read inside"
    with pytest.raises(BackendUnavailable, match="closed"):
        store.last_position()  # refused at once while the close waits
    release.set()
    reader.join(10)
    closer.join(10)
    assert reader_saw == [1]  # the read inside finished on an open connection
    assert closed_at and read_done_at
    with pytest.raises(BackendUnavailable, match="closed"):
        store.read_stream("s-1")
    assert store.closed
