"""The journal contract, once for every backend: versions, positions, fencing, reading."""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from eventsourcing.persistence import IntegrityError, StoredEvent

from domain.errors import BackendUnavailable, FencingError, InvalidRequest
from domain.events import NewEvent
from journal.codec import encode_state
from journal.locator import resolve_store
from journal.store import Append, EventStore

AT = "2026-11-30T09:00:00.000000Z"


def ev(n: int, kind: str = "test.happened") -> NewEvent:
    return NewEvent(
        type=kind, at=AT, context={"actor": {"id": "t"}}, data={"n": n, "é": [1.5, None]}
    )


@pytest.fixture
def store(any_store_url: str) -> Iterator[EventStore]:
    with EventStore(any_store_url) as s:
        yield s


def test_versions_start_at_one_and_positions_strictly_increase(store: EventStore) -> None:
    a = store.append(Append("a", 0, [ev(1), ev(2)]))
    b = store.append(Append("b", 0, [ev(3)]))
    c = store.append(Append("a", 2, [ev(4)]))
    positions = a[0] + b[0] + c[0]
    assert positions == sorted(positions) and len(set(positions)) == 4
    stream_a = store.read_stream("a")
    assert [e.version for e in stream_a] == [1, 2, 3]
    assert [e.data["n"] for e in stream_a] == [1, 2, 4]
    assert [e.position for e in stream_a] == a[0] + c[0]
    assert store.last_position() == positions[-1]


def test_stale_append_is_a_fencing_error_and_writes_nothing(store: EventStore) -> None:
    store.append(Append("s", 0, [ev(1)]))
    last = store.last_position()
    with pytest.raises(FencingError) as caught:
        store.append(Append("s", 0, [ev(99)]))
    assert caught.value.code == "conflict" and caught.value.stream == "s"
    assert store.last_position() == last
    assert [e.data["n"] for e in store.read_stream("s")] == [1]


def test_group_append_is_atomic_across_streams(store: EventStore) -> None:
    store.append(Append("x", 0, [ev(1)]))
    with pytest.raises(FencingError):
        store.append(Append("y", 0, [ev(2)]), Append("x", 0, [ev(3)]))
    assert store.read_stream("y") == []
    result = store.append(Append("y", 0, [ev(2)]), Append("x", 1, [ev(3), ev(4)]))
    assert [len(r) for r in result] == [1, 2]


def test_replaying_our_own_commit_is_idempotent(store: EventStore) -> None:
    """A commit whose acknowledgement was lost comes back as IntegrityError on retry: an
    append byte-identical to what is stored succeeds with the stored positions."""
    first = store.append(Append("r", 0, [ev(1), ev(2)]))
    again = store.append(Append("r", 0, [ev(1), ev(2)]))
    assert again == first
    with pytest.raises(FencingError):
        store.append(Append("r", 0, [ev(1), ev(7)]))


def test_events_are_stored_as_rfc8785_canonical_bytes(store: EventStore) -> None:
    event = ev(5)
    store.append(Append("c", 0, [event]))
    raw = store._recorder.select_stream("c")[0].state
    body: dict[str, Any] = {"at": event.at, "context": event.context, "data": event.data}
    assert raw == rfc8785.dumps(body) == encode_state(event)


def test_read_after_pages_in_position_order(store: EventStore) -> None:
    for i in range(25):
        store.append(Append(f"p{i % 3}", i // 3, [ev(i)]))
    page = store.read_after(0, limit=10)
    assert len(page) == 10
    rest = store.read_after(page[-1].position, limit=100)
    every = page + rest
    assert [e.data["n"] for e in every] == list(range(25))
    assert [e.position for e in every] == sorted(e.position for e in every)
    assert [e.data["n"] for e in store.iter_after(0, page=4)] == list(range(25))
    assert store.read_after(every[-1].position) == []


def test_bad_reads_are_refused(store: EventStore) -> None:
    with pytest.raises(InvalidRequest):
        store.read_after(-1)
    with pytest.raises(InvalidRequest):
        store.read_after(0, limit=0)
    with pytest.raises(InvalidRequest):
        store.read_stream("")
    assert store.read_stream("never-written") == []


def test_racing_writers_at_one_version_exactly_one_wins(store: EventStore) -> None:
    """OL-8 groundwork: fencing by aggregate version under real thread concurrency."""
    store.append(Append("race", 0, [ev(0)]))
    outcomes: list[str] = []
    barrier = threading.Barrier(8)

    def write(n: int) -> None:
        barrier.wait()
        try:
            store.append(Append("race", 1, [ev(n)]))
            outcomes.append("won")
        except FencingError:
            outcomes.append("fenced")

    threads = [threading.Thread(target=write, args=(n,)) for n in range(1, 9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count("won") == 1 and outcomes.count("fenced") == 7
    assert len(store.read_stream("race")) == 2


def _racer(
    url: str, n: int, start: multiprocessing.synchronize.Event, out: multiprocessing.Queue[str]
) -> None:
    with EventStore(url) as s:
        start.wait()
        try:
            s.append(Append("proc-race", 0, [ev(n)]))
            out.put("won")
        except FencingError:
            out.put("fenced")


def test_racing_processes_exactly_one_wins(store_url: str) -> None:
    """OL-8 groundwork: four OS processes append version 1 of one stream at once."""
    url = store_url
    EventStore(url).close()  # create tables before the race
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_racer, args=(url, n, start, out)) for n in range(4)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(60)
    results = sorted(out.get(timeout=5) for _ in procs)
    assert results == ["fenced", "fenced", "fenced", "won"]
    with EventStore(url) as s:
        assert len(s.read_stream("proc-race")) == 1


def test_recorder_primary_key_is_the_fence(store: EventStore) -> None:
    """The refusal comes from the store's own constraint, not from a read-then-write check."""
    store.append(Append("pk", 0, [ev(1)]))
    with pytest.raises(IntegrityError):
        store._recorder.insert_events([StoredEvent("pk", 1, "test.happened", encode_state(ev(2)))])


def test_unreachable_postgres_is_backend_unavailable() -> None:
    url = "postgresql://postgres@127.0.0.1:1/test?connect_timeout=1"
    with pytest.raises(BackendUnavailable) as caught:
        EventStore(url)
    assert caught.value.code == "backend_unavailable"


def test_store_urls_are_parsed_strictly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BLACKOPS_STORE", raising=False)
    assert resolve_store(None).settings["SQLITE_DBNAME"] == ".blackops/journal.sqlite3"
    monkeypatch.setenv("BLACKOPS_STORE", f"sqlite:///{tmp_path}/env.db")
    assert resolve_store(None).settings["SQLITE_DBNAME"] == f"{tmp_path}/env.db"
    pg = resolve_store("postgresql://u:secret@db.example:6543/prod?schema=ops")
    assert pg.settings["POSTGRES_PORT"] == "6543" and pg.settings["POSTGRES_SCHEMA"] == "ops"
    assert "secret" not in pg.display
    for bad in (
        "mysql://x/y",
        "sqlite://",
        "sqlite:///",
        "postgresql://h/db?schema=Bad-Name",
        "postgresql:///db",
    ):
        with pytest.raises(InvalidRequest):
            resolve_store(bad)


def test_memory_stores_are_private() -> None:
    with EventStore("memory://") as one, EventStore("memory://") as two:
        one.append(Append("m", 0, [ev(1)]))
        assert two.read_stream("m") == []


def test_an_append_from_the_future_leaves_no_gap(store: EventStore) -> None:
    """expected_version beyond the stream's end is refused inside the transaction."""
    store.append(Append("g", 0, [ev(1)]))
    last = store.last_position()
    for expected in (2, 5):
        with pytest.raises(FencingError):
            store.append(Append("g", expected, [ev(9)]))
    with pytest.raises(FencingError):
        store.append(Append("fresh", 3, [ev(9)]))
    with pytest.raises(FencingError):  # one good stream and one gap: neither is written
        store.append(Append("g", 1, [ev(2)]), Append("h", 4, [ev(3)]))
    assert store.last_position() == last
    assert [e.version for e in store.read_stream("g")] == [1]
    assert store.read_stream("fresh") == [] and store.read_stream("h") == []
    with pytest.raises(InvalidRequest):
        store.append(Append("g", -1, [ev(0)]))


def test_a_group_conflict_names_the_stream_that_collided(store: EventStore) -> None:
    store.append(Append("x", 0, [ev(1)]))
    with pytest.raises(FencingError) as caught:
        store.append(Append("y", 0, [ev(2)]), Append("x", 0, [ev(3)]))
    assert caught.value.stream == "x"


def test_reading_unknown_streams_does_not_grow_the_memory_index() -> None:
    with EventStore("memory://") as memory:
        for n in range(50):
            assert memory.read_stream(f"nobody-{n}") == []
        assert len(memory._recorder._stored_events_index) == 0  # type: ignore[attr-defined]
