"""The PostgreSQL append is one call of ``blackops_append_v1`` (journal/append_sql.py,
decisions F120-F123): created safely on open, refusing what the pipeline refused, writing
exactly what the nine pipelined statements wrote (tests/pipelined_append.py is the judge),
and all or nothing."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from itertools import count
from typing import Any

import psycopg
import pytest
from conftest import POSTGRES_URL, postgres_schema_url  # type: ignore[import-not-found, unused-ignore]
from eventsourcing.persistence import IntegrityError, StoredEvent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pipelined_append import PipelinedAppend  # type: ignore[import-not-found, unused-ignore]
from psycopg import sql

from domain.errors import BackendUnavailable, FencingError
from domain.events import NewEvent
from journal import append_sql, lease_sql
from journal.backend_postgres import FUNCTION_EXISTS
from journal.codec import encode_state
from journal.leaves import event_leaf
from journal.snapshot_sql import SnapshotTables
from journal.store import Append, EventStore
from journal.work_sql import WorkTables

pytestmark = pytest.mark.postgres

AT = "2026-11-30T09:00:00.000000Z"
INSTANTS = (AT, "2026-11-30T09:00:01.250000Z", "2026-12-01T00:00:00.000001Z")


@pytest.fixture
def url() -> Iterator[str]:
    yield from postgres_schema_url()


def ev(topic: str, data: dict[str, Any] | None = None, **context: Any) -> NewEvent:
    return NewEvent(topic, AT, context, data or {})


def recorder(store: EventStore) -> Any:
    return store._recorder


def admin() -> psycopg.Connection[Any]:
    return psycopg.connect(POSTGRES_URL, autocommit=True)


def function_count(schema: str, name: str = append_sql.NAME) -> int:
    with admin() as conn:
        row = conn.execute(FUNCTION_EXISTS, (schema, name)).fetchone()
        return int(row[0]) if row else 0


def drop_function(schema: str) -> None:
    with admin() as conn:
        conn.execute(
            sql.SQL("DROP FUNCTION {}.{}").format(
                sql.Identifier(schema), sql.Identifier(append_sql.NAME)
            )
        )


def snapshot(store: EventStore) -> tuple[Any, ...]:
    """Everything an append writes: rows, leaves, both indexes and the tracked position."""
    rows = [
        (n.id, n.originator_id, n.originator_version, n.topic, n.state)
        for n in store.read_raw_after(0, 10_000)
    ]
    return (
        rows,
        store.read_leaves(0, 10_000),
        store.work_rows(),
        store.retention_rows(),
        store.work_position(),
    )


# -- creating the function ------------------------------------------------------------------


def test_opening_creates_the_function_once(url: str) -> None:
    schema = url.split("schema=")[1]
    with EventStore(url) as store:
        assert function_count(schema) == 1
        store.append(Append("s", 0, [ev("test.happened")]))
    with EventStore(url) as store:  # a second open finds it and leaves it alone
        assert function_count(schema) == 1
        assert store.append(Append("s", 1, [ev("test.happened")])) == [[2]]


def test_a_journal_written_before_the_function_gets_it_on_open(url: str) -> None:
    schema = url.split("schema=")[1]
    with EventStore(url) as store:
        store.append(Append("op-1", 0, [ev("operation.received", {"operation_type": "t"})]))
        before = snapshot(store)
    drop_function(schema)  # what an older release left: its tables, no function
    assert function_count(schema) == 0
    with EventStore(url) as store:
        assert function_count(schema) == 1
        assert snapshot(store) == before
        accepted = ev("operation.accepted", operation_type="t", tenant="acme")
        assert store.append(Append("op-1", 1, [accepted])) == [[2]]
        assert [r.operation_id for r in store.work_rows()] == ["op-1"]


def test_concurrent_opens_of_a_new_journal_all_succeed(url: str) -> None:
    schema = url.split("schema=")[1]
    errors: list[BaseException] = []
    start = threading.Barrier(6)

    def open_and_append(n: int) -> None:
        try:
            start.wait()
            with EventStore(url) as store:
                store.append(Append(f"s-{n}", 0, [ev("test.happened")]))
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=open_and_append, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert function_count(schema) == 1
    with EventStore(url) as store:
        assert sorted(n.originator_id for n in store.read_raw_after(0)) == [
            f"s-{n}" for n in range(6)
        ]


def test_an_opener_racing_another_creator_finds_its_function(url: str) -> None:
    """Without the setup lock, two creators meet the catalog's unique key: the loser waits
    for the winner's commit, is refused, looks again and finds the function."""
    schema = url.split("schema=")[1]
    with EventStore(url) as store:
        rec = recorder(store)
        drop_function(schema)
        failed: list[BaseException] = []
        with admin() as winner:
            winner.execute("BEGIN")
            winner.execute(append_sql.create_statement(rec.append_tables))

            def create() -> None:
                try:
                    rec._create_function(append_sql.NAME, rec.functions[append_sql.NAME])
                except BaseException as error:  # reported below
                    failed.append(error)

            loser = threading.Thread(target=create)
            loser.start()
            waiting = (
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                f"AND query LIKE 'CREATE FUNCTION \"{schema}\".%%' AND pid <> pg_backend_pid()"
            )
            # Watched from its own connection: a transaction sees one snapshot of activity.
            with admin() as watcher:
                deadline = time.monotonic() + 30
                while not watcher.execute(waiting).fetchone()[0]:  # type: ignore[index]
                    assert time.monotonic() < deadline, "the second creator never queued"
                    time.sleep(0.01)
            winner.execute("COMMIT")
            loser.join()
        assert failed == []
        assert function_count(schema) == 1
        assert store.append(Append("s", 0, [ev("test.happened")])) == [[1]]


def test_the_function_bodies_are_pinned_to_their_versions() -> None:
    """A journal keeps the functions it was given; a changed body needs a new name (a new
    version in it, then its digest here), or journals opened by an older release would
    keep the old body under the same name."""
    tables = append_sql.Tables("s", "blackops_events", "l", "p", "d", "r", "c", "t")
    statements = {
        append_sql.NAME: append_sql.create_statement(tables),
        lease_sql.RESERVE_IDS: lease_sql.reserve_ids_create_statement("s", "s.d"),
        lease_sql.RESERVE: lease_sql.reserve_create_statement(
            "s",
            "s.d",
            SnapshotTables(
                "s.", sqlite=False, events_table="s.e", position="notification_id"
            ).reserved_tails_statement(),
        ),
        lease_sql.RESERVE_STREAMS: lease_sql.reserve_create_statement(
            "s",
            "s.d",
            WorkTables("s.", sqlite=False, events_table="s.e").reserved_streams_statement,
            lease_sql.RESERVE_STREAMS,
            lease_sql.STREAM_COLUMNS,
        ),
        lease_sql.RENEW: lease_sql.renew_create_statement("s", "s.d"),
    }
    digests = {name: hashlib.sha256(s.encode()).hexdigest() for name, s in statements.items()}
    assert digests == PINNED


PINNED = {
    "blackops_append_v1": "e988ca4560013ec67799b7fa8492f9cd0affffc3bf8596db4e2433b4d6935d9d",
    "blackops_reserve_v1": ("79a71a2f51b29d3ec6f2f9ba4c301988f34b08c869a5e8cf5c4323ebe39bc3f0"),
    "blackops_reserve_tails_v2": (
        "a88917b29656c5d4cd9d02de53038762144644e88054401f683e15eaf38f006f"
    ),
    "blackops_reserve_streams_v1": (
        "e0dfccf65bf1ca43b0675eb2a3bdcf6ba11376003a262966275d969a89d28c34"
    ),
    "blackops_renew_leases_v1": "90430a1757fd965897b1b7f09537c0826f9684d732182040337ce6f773b4f3d8",
}


# -- refusals -------------------------------------------------------------------------------


def stored(stream: str, version: int, topic: str = "test.happened") -> StoredEvent:
    return StoredEvent(stream, version, topic, encode_state(ev(topic, {"v": version})))


def test_a_gap_or_a_restart_is_refused_with_its_own_code(url: str) -> None:
    with EventStore(url) as store:
        rec = recorder(store)
        rec.insert_events([stored("s", 1), stored("s", 2), stored("k", 1), stored("k", 2)])
        store.delete_stream_events("s", 1)  # a purge: version 2 stays as the tombstone
        before = snapshot(store)
        for events in (
            [stored("s", 4)],  # one predecessor missing
            [stored("t", 2)],
            [stored("new", 1), stored("s", 4)],
            [stored("u", 1), stored("s", 3), stored("t", 5)],  # several, one missing
            [stored("s", 3), stored("k", 3), stored("t", 5)],
            [stored("s", 1)],  # a restart of a purged stream
            [stored("new", 1), stored("s", 1)],
        ):
            with pytest.raises(IntegrityError) as refused:
                rec.insert_events(events)
            assert str(refused.value) == append_sql.GAP_MESSAGE
            assert refused.value.__cause__ is None
        assert snapshot(store) == before
        with pytest.raises(FencingError):
            store.append(Append("t", 3, [ev("test.happened")]))
        # A stale version is still the primary key's refusal (the store reconciles it).
        with pytest.raises(IntegrityError) as stale:
            rec.insert_events([stored("k", 2)])
        assert isinstance(stale.value.__cause__, psycopg.errors.UniqueViolation)
        assert snapshot(store) == before
        positions = rec.insert_events([stored("s", 3), stored("t", 1), stored("k", 3)])
        assert positions == sorted(positions) and positions[0] > before[0][-1][0]
        assert [e.position for e in store.read_stream("t")] == [positions[1]]


def test_nothing_half_done_commits(url: str) -> None:
    """A failure in the function's last statements undoes the insert, its leaves, the
    tracked position, the due-work rows and the NOTIFY."""
    schema = url.split("schema=")[1]
    with EventStore(url) as store:
        store.append(Append("op-0", 0, [ev("operation.accepted", operation_type="t", tenant="a")]))
        before = snapshot(store)
        with admin() as conn:
            conn.execute(
                sql.SQL(
                    "ALTER TABLE {}.blackops_retention ADD CHECK (operation_type <> 'boom')"
                ).format(sql.Identifier(schema))
            )
        with admin() as listener:
            listener.execute(
                sql.SQL("LISTEN {}").format(sql.Identifier(recorder(store).work_channel))
            )
            with pytest.raises(FencingError):  # an integrity error: the store reconciles
                store.append(
                    Append(
                        "op-1",
                        0,
                        [
                            ev("operation.received", {"operation_type": "boom"}),
                            ev("operation.accepted", operation_type="boom", tenant="a"),
                        ],
                    )
                )
            assert list(listener.notifies(timeout=0.5, stop_after=1)) == []
        assert snapshot(store) == before
        [[position]] = store.append(Append("op-1", 0, [ev("test.happened")]))
        assert [e.position for e in store.read_stream("op-1")] == [position]


def test_a_lock_wait_past_its_limit_is_backend_unavailable(url: str) -> None:
    schema = url.split("schema=")[1]
    with EventStore(url) as store:
        store.append(Append("s", 0, [ev("test.happened")]))
        recorder(store)._lock_wait = "100ms"  # the function's lock_timeout for this store
        with admin() as holder:
            holder.execute("BEGIN")
            holder.execute(
                sql.SQL("LOCK TABLE {}.blackops_events IN EXCLUSIVE MODE").format(
                    sql.Identifier(schema)
                )
            )
            with pytest.raises(BackendUnavailable):
                store.append(Append("s", 1, [ev("test.happened")]))
            holder.execute("ROLLBACK")
        assert store.append(Append("s", 1, [ev("test.happened")])) == [[2]]


def test_an_append_with_waking_topics_notifies_once_with_them(url: str) -> None:
    with EventStore(url) as store:
        with admin() as listener:
            channel = sql.Identifier(recorder(store).work_channel)
            listener.execute(sql.SQL("LISTEN {}").format(channel))
            store.append(Append("s", 0, [ev("test.happened")]))
            store.append(
                Append("wf-1", 0, [ev("workflow.created", {"workflow": "w"}, tenant="a")]),
                Append("op-1", 0, [ev("operation.accepted", operation_type="t", tenant="a")]),
            )
            # A later append's NOTIFY ends the wait: PostgreSQL delivers the notifications
            # of transactions in commit order, so any more from the two above (or any
            # from the first) would come before it. The wait has no other end but 30 s.
            end = ev("operation.accepted", operation_type="end", tenant="a")
            store.append(Append("op-2", 0, [end]))
            mark = recorder(store).announcer
            payloads: list[str] = []
            for notification in listener.notifies(timeout=30):
                payloads.append(notification.payload)
                if notification.payload == f"operation.accepted,=end,{mark}":
                    break
        # The topics, the operation types accepted, the mark its own listener skips (F164).
        assert payloads == [
            f"operation.accepted,workflow.created,=t,{mark}",
            f"operation.accepted,=end,{mark}",
        ]


# -- groups ---------------------------------------------------------------------------------


def test_a_group_of_many_members_gets_its_positions_in_input_order(url: str) -> None:
    with EventStore(url) as store:
        store.append(*(Append(f"old-{n}", 0, [ev("test.happened")]) for n in range(50)))
        group = []
        for n in range(100):  # fresh streams and continuations, interleaved
            if n % 2:
                group.append(Append(f"old-{n // 2}", 1, [ev("test.happened")] * (n % 3 + 1)))
            else:
                group.append(Append(f"new-{n}", 0, [ev("test.happened")] * (n % 4 + 1)))
        positions = store.append(*group)
        flat = [p for member in positions for p in member]
        assert flat == list(range(51, 51 + len(flat)))
        for append, member in zip(group, positions, strict=True):
            read = store.read_stream(append.stream, append.expected_version)
            assert [e.position for e in read] == member
        assert_leaves_recomputed(store)


def assert_leaves_recomputed(store: EventStore) -> None:
    """Every event still stored has the leaf journal/leaves.py computes for it."""
    leaves = dict(store.read_leaves(0, 10_000))
    for row in store.read_raw_after(0, 10_000):
        assert leaves[row.id] == event_leaf(
            row.id, str(row.originator_id), row.originator_version, row.topic, row.state
        )


# -- the differential tests: the function against the pipelined statements -----------------


class Pair:
    """The same journal twice: appended by the function, and by the old statements."""

    def __init__(self, function_url: str, pipelined_url: str) -> None:
        self.function = EventStore(function_url)
        self.pipelined = EventStore(pipelined_url)
        old = recorder(self.pipelined)
        old.insert_events = PipelinedAppend(old).insert_events
        self.versions: dict[str, int] = {}
        self.example = count()

    def append(self, *appends: Append) -> Any:
        """Both journals append (one transaction each); they must answer alike."""
        by_function = _outcome(self.function, appends)
        assert by_function == _outcome(self.pipelined, appends), appends
        if isinstance(by_function, list):
            for append in appends:
                end = append.expected_version + len(append.events)
                self.versions[append.stream] = max(self.versions.get(append.stream, 0), end)
        return by_function

    def purge(self, stream: str) -> None:
        """A retention purge's deletion: every event but the newest (the tombstone)."""
        version = self.versions.get(stream, 0)
        if version > 1:
            deleted = self.function.delete_stream_events(stream, version - 1)
            assert deleted == self.pipelined.delete_stream_events(stream, version - 1)

    def assert_alike(self) -> None:
        assert snapshot(self.function) == snapshot(self.pipelined)
        assert_leaves_recomputed(self.function)  # a purge keeps the leaves

    def close(self) -> None:
        self.function.close()
        self.pipelined.close()


@pytest.fixture
def pair() -> Iterator[Pair]:
    for first in postgres_schema_url():
        for second in postgres_schema_url():
            pair = Pair(first, second)
            try:
                yield pair
            finally:
                pair.close()


def _outcome(store: EventStore, appends: tuple[Append, ...]) -> Any:
    try:
        return store.append(*appends)
    except Exception as error:  # compared, not hidden
        return (type(error).__name__, str(error))


LATER = INSTANTS[1]


def test_every_kind_of_index_change_matches_the_pipelined_statements(pair: Pair) -> None:
    """Each way an append changes the due-work and retention rows, one after another:
    creation, updates with and without a token or a worker, deletion, creation and end in
    one append, deletion and creation in one append, and every retention column."""
    ctx = {"operation_type": "t.one", "tenant": "acme"}
    claim = {"fencing_token": 2, "worker": "w", "lease_expires_at": LATER}
    scripts: list[tuple[str, list[tuple[str, dict[str, Any]]]]] = [
        ("op-1", [("operation.received", {"operation_type": "t.one"}), ("operation.accepted", {})]),
        ("op-1", [("attempt.started", claim)]),
        ("op-1", [("attempt.retry_scheduled", {"due_at": LATER})]),
        ("op-1", [("attempt.started", {"fencing_token": 3, "worker": "inline"})]),  # no lease
        ("op-1", [("attempt.started", {**claim, "fencing_token": 4})]),
        ("op-1", [("operation.completed", {})]),
        (
            "op-2",
            [("operation.received", {}), ("operation.accepted", {}), ("operation.failed", {})],
        ),
        ("op-3", [("operation.received", {"operation_type": "t.two"}), ("operation.accepted", {})]),
        ("op-3", [("operation.held", {})]),
        ("op-3", [("operation.released", {}), ("operation.held", {})]),
        ("op-3", [("operation.dead_lettered", {})]),
        ("outcome:op-1", [("outcome.recorded", {})]),
        ("outcome:op-1", [("outcome.purged", {})]),
        ("op-1", [("operation.purged", {})]),
        ("op-4", [("operation.received", {}), ("operation.rejected", {})]),
        ("wf-1", [("workflow.created", {"workflow": "w1"})]),
        ("wf-1", [("workflow.context_started", claim)]),
        (
            "wf-1",
            [("workflow.step_completed", {}), ("workflow.step_suspended", {"wake_at": LATER})],
        ),
        ("wf-1", [("workflow.event_accepted", {"wake_at": None})]),
        ("wf-1", [("workflow.event_accepted", {"wake_at": AT})]),
        ("wf-1", [("workflow.step_retry_scheduled", {"wake_at": LATER})]),
        ("wf-1", [("workflow.termination_requested", {"wake_at": AT, "fencing_token": 5})]),
        ("wf-1", [("workflow.terminated", {})]),
        ("wf-1", [("workflow.purged", {})]),
        ("wf-2", [("workflow.created", {"workflow": "w2"}), ("workflow.completed", {})]),
        ("wf-2", [("workflow.purged", {}), ("workflow.created", {"workflow": "w2"})]),
        ("wf-3", [("workflow.created", {"workflow": "w1"}), ("workflow.purged", {})]),
    ]
    for stream, kinds in scripts:
        events = [NewEvent(topic, AT, ctx, data) for topic, data in kinds]
        assert isinstance(pair.append(Append(stream, pair.versions.get(stream, 0), events)), list)
        pair.assert_alike()
    assert pair.function.work_rows() and pair.function.retention_rows()
    # The same kinds again, all in one transaction (several rows of each kind at once).
    group = []
    for n, (stream, kinds) in enumerate(scripts):
        events = [NewEvent(topic, AT, ctx, data) for topic, data in kinds]
        group.append(Append(f"g{n}-{stream}", 0, events))
    assert isinstance(pair.append(*group), list)
    pair.assert_alike()


def _instant(draw: st.DrawFn) -> str:
    return draw(st.sampled_from(INSTANTS))


@st.composite
def events_for(draw: st.DrawFn, stream: str) -> list[NewEvent]:
    """1-3 events of the kinds the due-work and retention indexes read, in any order (the
    indexes must agree on any order, not only the lifecycle's); the kinds that create a
    row come up more often, so that later events find rows to change."""
    at = _instant(draw)
    context = {"operation_type": draw(st.sampled_from(("t.one", "t.two"))), "tenant": "acme"}
    claim = {"fencing_token": draw(st.integers(1, 5)), "worker": draw(st.sampled_from("wv"))}
    if stream.startswith("outcome:"):
        kinds: list[tuple[str, dict[str, Any]]] = [("outcome.recorded", {}), ("outcome.purged", {})]
    elif stream.startswith("wf-"):
        wake = {"wake_at": _instant(draw)}
        created = ("workflow.created", {"workflow": draw(st.sampled_from(("w1", "w2")))})
        kinds = [
            created,
            created,
            created,
            ("workflow.context_started", {**claim, "lease_expires_at": _instant(draw)}),
            ("workflow.step_completed", {"step": "s"}),
            ("workflow.step_suspended", wake),
            ("workflow.step_retry_scheduled", wake),
            ("workflow.event_accepted", draw(st.sampled_from(({}, wake, {"wake_at": None})))),
            ("workflow.termination_requested", {**wake, "fencing_token": claim["fencing_token"]}),
            ("workflow.completed", {}),
            ("workflow.errored", {}),
            ("workflow.terminated", {}),
            ("workflow.purged", {}),
        ]
    else:
        received = ("operation.received", {"operation_type": context["operation_type"], "n": "é✓"})
        accepted: tuple[str, dict[str, Any]] = ("operation.accepted", {})
        kinds = [
            received,
            accepted,
            accepted,
            accepted,
            ("attempt.started", {**claim, "lease_expires_at": _instant(draw)}),
            ("attempt.started", {"fencing_token": 1, "worker": "inline"}),  # Inline: no row
            ("attempt.retry_scheduled", {"due_at": _instant(draw)}),
            ("attempt.retry_scheduled", {"due_at": _instant(draw)}),
            ("attempt.heartbeat", {}),
            ("operation.completed", {}),
            ("operation.rejected", {}),
            ("operation.failed", {}),
            ("operation.dead_lettered", {}),
            ("operation.held", {}),
            ("operation.released", {}),
            ("operation.purged", {}),
        ]
    chosen = draw(st.lists(st.sampled_from(kinds), min_size=1, max_size=3))
    return [NewEvent(topic, at, context, data) for topic, data in chosen]


OPERATIONS = ("op-a", "op-b", "op-c")
STREAMS = (*OPERATIONS, *(f"outcome:{o}" for o in OPERATIONS), "wf-a", "wf-b")
#: Mostly the stream's version; now and then stale, a gap or a restart.
OFFSETS = (*([0] * 12), -1, 2, "restart")


@st.composite
def steps(draw: st.DrawFn) -> list[tuple[str, Any]]:
    """Transactions of 1-4 appends (each to its own stream), now and then at a wrong
    version, and purges of a stream's early history."""
    found: list[tuple[str, Any]] = []
    for _ in range(draw(st.integers(1, 10))):
        if draw(st.integers(0, 9)) == 0:
            found.append(("purge", draw(st.sampled_from(STREAMS))))
            continue
        streams = draw(st.lists(st.sampled_from(STREAMS), min_size=1, max_size=4, unique=True))
        members = [(s, draw(st.sampled_from(OFFSETS)), draw(events_for(s))) for s in streams]
        found.append(("append", members))
    return found


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(script=steps())
def test_the_function_writes_what_the_pipelined_statements_wrote(
    pair: Pair, script: list[tuple[str, Any]]
) -> None:
    prefix = f"x{next(pair.example)}-"  # each example its own streams, in the same journals
    for kind, what in script:
        if kind == "purge":
            pair.purge(prefix + what)
            continue
        appends = []
        for name, offset, events in what:
            stream = prefix + name
            current = pair.versions.get(stream, 0)
            expected = 0 if offset == "restart" else max(current + offset, 0)
            appends.append(Append(stream, expected, events))
        pair.append(*appends)
    pair.assert_alike()
