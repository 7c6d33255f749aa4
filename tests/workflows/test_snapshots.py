"""Instance snapshots (journal/instance_snapshots.py, decisions F7) on SQLite and PostgreSQL.

A snapshot only makes a claim cheaper: whatever its row holds (intact, corrupt, stale,
another stream's, another format, bound to an event that is gone), the instance folded at
a claim is exactly the full fold of its journal, and the run ends exactly as without it.
A purge leaves no snapshot behind.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import psycopg
import pytest
from workflow_cases import create, send, status, work

from blackops import Application
from blackops.testing import FakeClock
from domain.documents import canonical_json
from domain.json_text import load_canonical
from domain.workflow import InstanceState
from journal import instance_snapshots
from journal.instances import instance_stream, load_instance
from journal.snapshot_sql import StoredSnapshot
from journal.store import EventStore

FIRST = instance_snapshots.SNAPSHOT_EVERY + 16  # steps before the wait: a snapshot is written
SECOND = 20  # after it: too few for another one


def value(i: int) -> dict[str, Any]:
    """Values whose journal reading is not their Python spelling (2.0**60, -0.0, 1e300)."""
    return {"i": i, "f": 2.0**60 if i % 7 == 0 else -0.0, "big": 1e300, "s": "é\u2028𝄞"}


class Long:
    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> dict[str, Any]:
        total = 0
        for i in range(FIRST):
            total += (await step.do(f"s{i}", partial(value, i)))["i"]
        got = await step.wait_for_event("go", type="go", timeout_seconds=3600)
        for i in range(FIRST, FIRST + SECOND):
            total += (await step.do(f"s{i}", partial(value, i)))["i"]
        await step.sleep("nap", 60)
        return {"total": total, "got": got, "last": value(FIRST + SECOND - 1)}


EXPECTED_TOTAL = sum(range(FIRST + SECOND))


@pytest.fixture
def long_app(app: Application) -> Application:
    app.register_workflow(Long)
    return app


def _sql(store: EventStore, text: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """Run ``text`` (``%s`` placeholders, ``SNAPSHOTS`` for the table) on the store."""
    recorder: Any = store._recorder  # the table is a recorder's; no public door reads it raw
    tables = recorder.snapshots
    query = text.replace("SNAPSHOTS", tables.table)
    if tables.sqlite:
        query = query.replace("%s", "?")
    with recorder.datastore.transaction(commit=True) as cursor:
        cursor.execute(query, args)
        rows = cursor.fetchall() if query.lstrip().startswith("SELECT") else []
    return [tuple(r.values()) if isinstance(r, dict) else tuple(r) for r in rows]


def snapshot_row(store: EventStore, stream: str) -> tuple[int, int, str, bytes] | None:
    rows = _sql(
        store, "SELECT version, position, digest, body FROM SNAPSHOTS WHERE stream = %s", (stream,)
    )
    if not rows:
        return None
    version, position, digest, body = rows[0]
    return int(version), int(position), str(digest), bytes(body)


def set_row(store: EventStore, stream: str, version: int, position: int, body: bytes) -> None:
    digest = hashlib.sha256(body).hexdigest()
    _sql(
        store,
        "UPDATE SNAPSHOTS SET version = %s, position = %s, digest = %s, body = %s "
        "WHERE stream = %s",
        (version, position, digest, body, stream),
    )


def claimed_state(store: EventStore, stream: str) -> tuple[InstanceState, int]:
    """What a claim folds for ``stream`` (its tail read as the engine reads it)."""
    recorder: Any = store._recorder
    tail = recorder.select_tails([stream])[stream]
    events = store.read_stream(stream, tail.events[0].originator_version - 1)
    state, _, since = instance_snapshots.fold_tail(store, stream, tail.snapshot, events)
    return state, since


def waiting_instance(app: Application, name: str) -> tuple[Any, str]:
    binding = app.workflow("Long")
    instance = create(binding, name)
    work(app)
    assert status(instance) == {"status": "waiting"}
    return instance, instance_stream(binding.resource.uid, name)


class Snapshotted(NamedTuple):
    """An instance of ``Long`` waiting for its event, and the snapshot row written for it."""

    store: EventStore
    instance: Any
    stream: str
    row: tuple[int, int, str, bytes]


@pytest.fixture
def snapshotted(long_app: Application) -> Snapshotted:
    instance, stream = waiting_instance(long_app, "waiting")
    row = snapshot_row(long_app.store, stream)
    assert row is not None
    return Snapshotted(long_app.store, instance, stream, row)


def finish(app: Application, clock: FakeClock, instance: Any) -> dict[str, Any]:
    send(instance, "go", {"n": 1})
    work(app)
    clock.advance(61)
    work(app)
    return status(instance)


EXPECTED = {
    "status": "complete",
    "output": {
        "total": EXPECTED_TOTAL,
        "got": {"n": 1},
        "last": load_canonical(canonical_json(value(FIRST + SECOND - 1))),
    },
}


def test_a_long_history_resumes_from_its_snapshot_as_from_the_full_fold(
    long_app: Application, clock: FakeClock, snapshotted: Snapshotted
) -> None:
    store, instance, stream, (version, position, _, _) = snapshotted
    stored = store.read_stream(stream)
    assert (version, position) == (stored[-1].version, stored[-1].position)  # the suspension
    state, since = claimed_state(store, stream)
    assert since == version
    # repr, not ==: 2.0**60 read back from the journal must be that float, not an int.
    assert repr(state) == repr(load_instance(store, stream))
    # An event after the snapshot: the claim folds the snapshot and what follows it.
    send(instance, "go", {"n": 1})
    state, since = claimed_state(store, stream)
    assert since == version and state.version == version + 1
    assert repr(state) == repr(load_instance(store, stream))
    work(long_app)
    clock.advance(61)
    work(long_app)
    assert status(instance) == EXPECTED


def test_a_snapshot_holds_each_distinct_step_config_once(snapshotted: Snapshotted) -> None:
    """The body lists every distinct config once (steps name it by index); decoded, the
    steps share those dicts, and the state is the full fold's all the same."""
    store, _, stream, (version, position, digest, body) = snapshotted
    document = load_canonical(body)
    full = load_instance(store, stream)
    distinct = {canonical_json(record.config) for record in full.steps.values()}
    assert len(full.steps) > len(distinct)  # the case this layout is for
    assert sorted(canonical_json(c) for c in document["configs"]) == sorted(distinct)
    assert all(type(values[6]) is int for values in document["steps"])
    state = instance_snapshots.decode(stream, StoredSnapshot(version, position, digest, body))
    assert state is not None and repr(state) == repr(full)
    assert len({id(record.config) for record in state.steps.values()}) == len(distinct)


def _corrupt(body: bytes) -> bytes:
    return body.replace(b'"s0"', b'"sX"')


def _reformat(body: bytes) -> bytes:
    document = load_canonical(body)
    document["format"] = instance_snapshots.FORMAT + 1
    return canonical_json(document)


def _another_result(body: bytes) -> bytes:
    document = load_canonical(body)
    document["steps"][0][4] = {"i": 10**6}  # a result the journal never held
    document["version"] -= 1  # taken, it says, at another version than its row's
    return canonical_json(document)


def _config_out_of_range(body: bytes) -> bytes:
    document = load_canonical(body)
    document["steps"][0][6] = len(document["configs"])  # names a config the body lacks
    return canonical_json(document)


def _another_stream(body: bytes) -> bytes:
    document = load_canonical(body)
    document["stream"] = "wf-" + "0" * 40
    return canonical_json(document)


#: (what is done to the row, how): each must leave the claim folding the whole journal.
TAMPERING: dict[str, Callable[[tuple[int, int, str, bytes]], tuple[int, int, bytes, bool]]] = {
    "digest mismatch": lambda r: (r[0], r[1], r[3], True),
    "a format this code does not read": lambda r: (r[0], r[1], _reformat(r[3]), False),
    "its body names another version": lambda r: (r[0], r[1], _another_result(r[3]), False),
    "another stream's state": lambda r: (r[0], r[1], _another_stream(r[3]), False),
    "a step naming a config it lacks": lambda r: (r[0], r[1], _config_out_of_range(r[3]), False),
    "bound to another position": lambda r: (r[0], r[1] + 10**6, r[3], False),
    "a version the stream never had": lambda r: (r[0] + 50, r[1], r[3], False),
    "an earlier version than it saw": lambda r: (r[0] - 3, r[1], r[3], False),
}


@pytest.mark.parametrize("how", TAMPERING)
def test_a_tampered_snapshot_cannot_change_the_claim_or_the_run(
    long_app: Application, clock: FakeClock, snapshotted: Snapshotted, how: str
) -> None:
    store, instance, stream, row = snapshotted
    version, position, body, corrupt_digest = TAMPERING[how](row)
    set_row(store, stream, version, position, body)
    if corrupt_digest:
        _sql(store, "UPDATE SNAPSHOTS SET body = %s WHERE stream = %s", (_corrupt(body), stream))
    state, since = claimed_state(store, stream)
    assert since == 0  # not trusted
    assert repr(state) == repr(load_instance(store, stream))
    assert finish(long_app, clock, instance) == EXPECTED


def test_the_engine_claim_path_ignores_a_tampered_snapshot(
    long_app: Application, snapshotted: Snapshotted
) -> None:
    """Through reserve_due_tails (one statement on PostgreSQL) rather than select_tails."""
    store, instance, stream, row = snapshotted
    set_row(store, stream, row[0], row[1], _another_result(row[3]).replace(b"1000000", b"7"))
    send(instance, "go", {"n": 1})
    engine = long_app.workflow_engine("snapshot-test")
    helds, _ = engine.claim(5)
    assert [h.state.stream for h in helds] == [stream]
    assert helds[0].snapshot_version == 0
    full = load_instance(store, stream)
    held_state = helds[0].state
    assert held_state.version == full.version and held_state.steps == full.steps


def test_a_purge_deletes_the_snapshot(
    long_app: Application, clock: FakeClock, snapshotted: Snapshotted
) -> None:
    store, instance, stream, _ = snapshotted
    assert finish(long_app, clock, instance) == EXPECTED
    clock.advance(31 * 86_400)
    work(long_app)  # retention: the worker purges the terminal instance (DW-RET-1)
    assert load_instance(store, stream).purged
    assert snapshot_row(store, stream) is None


def test_a_snapshot_written_while_a_purge_deletes_its_event_does_not_outlive_it(
    long_app: Application, store_url: str
) -> None:
    """PostgreSQL, READ COMMITTED: the snapshot write waits for the purge's transaction (FOR
    KEY SHARE on the event it binds to), then finds the event gone and writes nothing. SQLite
    serialises writers, so there the write after the purge finds no event either."""
    store = long_app.store
    _, stream = waiting_instance(long_app, "racing")
    state = load_instance(store, stream)
    _sql(store, "DELETE FROM SNAPSHOTS WHERE stream = %s", (stream,))
    if not store_url.startswith("postgresql"):
        waiting_instance(long_app, "later")  # SQLite never deletes its newest row
        store.delete_stream_events(stream, state.version)  # the purge, then the write
        instance_snapshots.write(store, state)
        assert snapshot_row(store, stream) is None
        return
    recorder: Any = store._recorder
    base, _, _ = store_url.partition("?schema=")
    purge = psycopg.connect(base)
    try:
        # The statements of a purge's delete, in a transaction not yet committed.
        purge.execute(
            f"DELETE FROM {recorder._events} WHERE originator_id = %s AND originator_version <= %s",
            (stream, state.version),
        )
        purge.execute(f"DELETE FROM {recorder.snapshots.table} WHERE stream = %s", (stream,))
        writer = threading.Thread(target=instance_snapshots.write, args=(store, state))
        writer.start()
        writer.join(0.5)
        assert writer.is_alive(), "the snapshot write did not wait for the purge"
        purge.commit()
        writer.join(10)
        assert not writer.is_alive()
    finally:
        purge.close()
    assert snapshot_row(store, stream) is None
