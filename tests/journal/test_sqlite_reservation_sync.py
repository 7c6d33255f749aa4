"""SQLite: a due-work reservation commits without waiting for the disk, every journal
append still waits for it (decisions F51). The level is read on the very connection and
transaction that does the work."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from domain.events import NewEvent
from journal.store import Append, EventStore
from journal.work_index import micros

AT = "2026-11-30T09:00:00.000000Z"
CONTEXT = {"operation_id": "op-1", "operation_type": "t", "tenant": "acme"}


def received(stream: str) -> Append:
    data = {"operation_type": "t", "mode": "deferred", "tenant": "acme", "params": {}}
    return Append(
        stream,
        0,
        [
            NewEvent("operation.received", AT, {**CONTEXT, "operation_id": stream}, data),
            NewEvent("operation.accepted", AT, {**CONTEXT, "operation_id": stream}, {}),
        ],
    )


def test_a_reservation_commits_at_normal_and_every_append_at_the_level_before(
    tmp_path: Path,
) -> None:
    store = EventStore(f"sqlite:///{tmp_path}/j.sqlite3")
    recorder: Any = store._recorder
    levels: list[tuple[str, int]] = []

    def spy(name: str, original: Any) -> Any:
        def call(cursor: Any, *args: Any) -> Any:
            cursor.execute("PRAGMA synchronous")
            levels.append((name, int(cursor.fetchone()[0])))
            return original(cursor, *args)

        return call

    recorder.work.reserve = spy("reserve", recorder.work.reserve)
    recorder.work.apply = spy("append", recorder.work.apply)
    try:
        store.append(received("op-1"), received("op-2"))
        now = micros("2026-11-30T10:00:00.000000Z")
        assert sorted(store.reserve_due(now, now + 1, "w", ["t"], 10)) == ["op-1", "op-2"]
        assert store.reserve_due(now, now + 1, "w", ["t"], 10) == []  # held: not due again
        store.append(received("op-3"))
    finally:
        store.close()
    assert levels == [("append", 2), ("reserve", 1), ("reserve", 1), ("append", 2)]
