"""The event store's contract, written once and run on every backend.

:class:`EventStoreContract` holds the tests (it is not collected itself: no ``Test``
prefix); ``TestMemoryStore``, ``TestSQLiteStore`` and ``TestPostgresStore`` provide the
store, the way eventsourcing's recorder test cases are subclassed per backend. Where a
backend genuinely differs, the base reads a class attribute the subclass sets
(``has_transactions``, ``announces_wakes``, ``durable``); nothing is skipped.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import queue
import random
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import pytest
import rfc8785
from conftest import postgres_schema_url  # type: ignore[import-not-found, unused-ignore]
from eventsourcing.persistence import IntegrityError, OperationalError, StoredEvent

from domain.clock import format_instant
from domain.context import Actor, ExecutionContext
from domain.errors import BackendUnavailable, Conflict, FencingError, InvalidRequest
from domain.events import NewEvent
from domain.lifecycle import EventType
from domain.operation import Operation
from domain.supervision import Supervision
from domain.workflow import Topic
from journal.codec import encode_state
from journal.group_commit import commit_group
from journal.leaves import entry_bytes, leaf_hash
from journal.locator import resolve_store
from journal.operations import pending_append
from journal.store import PAGE_LIMIT_MAX, Append, EventStore
from journal.work_index import (
    OPERATION_WAKING_TOPICS,
    WAKING_TOPICS,
    WORKFLOW_WAKING_TOPICS,
    WorkRow,
    moment_micros,
)

AT = "2026-11-30T09:00:00.000000Z"
T0 = datetime(2026, 11, 30, 9, 0, 0, tzinfo=UTC)
MAIL = "mail.send"
LEASE = 30.0
HOLD = 5.0


def ev(n: int, kind: str = "test.happened") -> NewEvent:
    return NewEvent(
        type=kind, at=AT, context={"actor": {"id": "t"}}, data={"n": n, "é": [1.5, None]}
    )


def moment(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def us(seconds: float) -> int:
    """Microseconds since the epoch ``seconds`` after T0, as reserve_due etc. take them."""
    return moment_micros(moment(seconds))


class Deferred:
    """One Deferred operation whose events are recorded on the product's own aggregate,
    with the data and contexts ``blackops/operations`` journals (checked by OL-3)."""

    def __init__(self, operation_id: str, operation_type: str = MAIL, tenant: str = "acme"):
        self.operation = Operation(operation_id)
        self.ctx = ExecutionContext(
            operation_id=operation_id,
            operation_type=operation_type,
            tenant=tenant,
            actor=Actor("alice"),
            correlation_id=operation_id,
        )
        self.attempt_ctx = self.ctx

    @property
    def id(self) -> str:
        return self.operation.id

    @property
    def token(self) -> int:
        return self.operation.fencing_token

    def _record(self, kind: EventType, seconds: float, data: dict[str, Any]) -> None:
        instant = format_instant(moment(seconds))
        self.operation.record(kind, instant, self.attempt_ctx.to_dict(), data)

    def _take(self) -> Append:
        return pending_append(self.operation)

    def accept(self, seconds: float = 0) -> Append:
        """``operation.received`` and ``operation.accepted``, as ``submit`` commits them."""
        self._record(EventType.RECEIVED, seconds, self._received_data())
        self._record(EventType.ACCEPTED, seconds, {})
        return self._take()

    def _received_data(self) -> dict[str, Any]:
        return {
            "operation_type": self.ctx.operation_type,
            "mode": "deferred",
            "tenant": self.ctx.tenant,
            "correlation_id": self.ctx.correlation_id,
            "params": {"to": "bob@example.com"},
            "supervision": Supervision().describe(),
        }

    def claim(self, seconds: float, worker: str, lease: float = LEASE) -> Append:
        """``attempt.started`` with its lease, as a worker's claim journals it."""
        self._claim(seconds, worker, lease)
        return self._take()

    def _claim(self, seconds: float, worker: str, lease: float) -> None:
        token = self.operation.fencing_token + 1
        self.attempt_ctx = self.ctx.for_attempt(
            self.operation.attempt + 1, worker=worker, fencing_token=token
        )
        self._record(
            EventType.ATTEMPT_STARTED,
            seconds,
            {
                "attempt": self.attempt_ctx.attempt,
                "fencing_token": token,
                "worker": worker,
                "lease_expires_at": format_instant(moment(seconds + lease)),
            },
        )

    def take_over(self, seconds: float, worker: str, lease: float = LEASE) -> Append:
        """A new claimant records the expired holder's lost claim, then its own claim."""
        self.attempt_ctx = self.ctx.for_attempt(
            self.operation.attempt, worker=worker, fencing_token=self.operation.fencing_token + 1
        )
        self._record(
            EventType.ATTEMPT_CLAIM_LOST,
            seconds,
            {
                "attempt": self.operation.attempt,
                "fencing_token": self.operation.fencing_token,
                "worker": self.operation.worker,
                "claimed_until": self.operation.lease_expires_at,
            },
        )
        self._schedule_retry(seconds, 0.0, "claim_lost")
        self._claim(seconds, worker, lease)
        return self._take()

    def complete(self, seconds: float) -> Append:
        attempt = self.attempt_ctx.attempt
        self._record(EventType.ATTEMPT_FINALIZING, seconds, {"attempt": attempt})
        self._record(
            EventType.COMPLETED,
            seconds,
            {
                "attempt": attempt,
                "outcome_type": "none",
                "outcome_schema_version": 1,
                "outcome_digest": "sha256:" + "0" * 64,
                "outcome_recorded": False,
            },
        )
        return self._take()

    def reject(self, seconds: float) -> Append:
        self._record(
            EventType.REJECTED,
            seconds,
            {
                "attempt": self.attempt_ctx.attempt,
                "category": "business_rule",
                "code": "no",
                "message": "no",
            },
        )
        return self._take()

    def fail(self, seconds: float, retry_in: float | None, *, quarantine: bool = False) -> Append:
        """``attempt.failed`` and Supervising's decision: a retry after ``retry_in``
        seconds, or (None) ``operation.failed`` / ``operation.dead_lettered``."""
        error = {"type": "builtins.RuntimeError", "message": "boom"}
        self._record(
            EventType.ATTEMPT_FAILED, seconds, {"attempt": self.attempt_ctx.attempt, "error": error}
        )
        if retry_in is not None:
            self._schedule_retry(seconds, retry_in, "retry")
            return self._take()
        attempt = self.attempt_ctx.attempt
        decision = "dead_letter" if quarantine else "fail"
        self._record(
            EventType.ATTEMPT_SUPERVISING,
            seconds,
            {"attempt": attempt, "decision": decision, "reason": "exhausted"},
        )
        ending = EventType.DEAD_LETTERED if quarantine else EventType.FAILED
        self._record(ending, seconds, {"attempt": attempt, "error": error, "reason": "exhausted"})
        return self._take()

    def _schedule_retry(self, seconds: float, delay: float, reason: str) -> None:
        attempt = self.operation.attempt
        self._record(
            EventType.ATTEMPT_SUPERVISING,
            seconds,
            {"attempt": attempt, "decision": "retry", "reason": reason},
        )
        self._record(
            EventType.ATTEMPT_RETRY_SCHEDULED,
            seconds,
            {
                "attempt": attempt,
                "delay_seconds": delay,
                "due_at": format_instant(moment(seconds + delay)),
            },
        )


def row_of(store: EventStore, operation_id: str) -> WorkRow | None:
    return next((r for r in store.work_rows() if r.operation_id == operation_id), None)


def the_row(store: EventStore, operation_id: str) -> WorkRow:
    row = row_of(store, operation_id)
    assert row is not None, f"no due-work row for {operation_id}"
    return row


def cells(row: Any) -> tuple[Any, ...]:
    """A database row as a tuple (sqlite3.Row, psycopg dict rows)."""
    return tuple(row.values()) if isinstance(row, dict) else tuple(row)


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


class EventStoreContract(ABC):
    """What every backend's EventStore must do; subclasses say how to open one."""

    #: ``store.transaction()`` gives a database cursor (memory stores have none).
    has_transactions: ClassVar[bool]
    #: Appends of other processes wake ``listen_for_wakes`` (PostgreSQL LISTEN/NOTIFY).
    announces_wakes: ClassVar[bool]
    #: A second EventStore on the same URL opens the same journal (memory: a new one).
    durable: ClassVar[bool]

    @abstractmethod
    def store_urls(self, tmp_path: Path) -> Iterator[str]:
        """Yield the URL of a private, empty journal; clean it up afterwards."""

    @pytest.fixture
    def url(self, tmp_path: Path) -> Iterator[str]:
        yield from self.store_urls(tmp_path)

    @pytest.fixture
    def store(self, url: str) -> Iterator[EventStore]:
        with EventStore(url) as s:
            yield s

    @pytest.fixture
    def peer(self, store: EventStore, url: str) -> Iterator[EventStore]:
        """A second writer on the same journal: its own EventStore where the journal is
        durable, the same store (used from another thread) in memory."""
        if not self.durable:
            yield store
            return
        with EventStore(url) as other:
            yield other

    # -- versions and positions ------------------------------------------------------------

    def test_versions_start_at_one_and_positions_strictly_increase(self, store: EventStore) -> None:
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

    def test_positions_returned_by_a_multi_stream_append_are_the_positions_read_back(
        self, store: EventStore
    ) -> None:
        """Each stream's positions come back in append order, and reading by position
        finds those events with their streams, versions and content."""
        store.append(Append("x", 0, [ev(0)]))
        result = store.append(
            Append("x", 1, [ev(1), ev(2)]), Append("y", 0, [ev(3)]), Append("z", 0, [])
        )
        assert [len(r) for r in result] == [2, 1, 0]
        found = {e.position: e for e in store.read_after(0)}
        assert [(found[p].stream, found[p].version) for p in result[0]] == [("x", 2), ("x", 3)]
        assert [(found[p].stream, found[p].version) for p in result[1]] == [("y", 1)]
        first = found[result[0][0]]
        assert (first.type, first.at, first.context, first.data) == (
            "test.happened",
            AT,
            {"actor": {"id": "t"}},
            {"n": 1, "é": [1.5, None]},
        )
        assert max(found) == store.last_position() == result[1][0]

    def test_an_empty_append_writes_nothing_and_returns_no_positions(
        self, store: EventStore
    ) -> None:
        assert store.append(Append("e", 0, [])) == [[]]
        assert store.append() == []
        assert store.last_position() == 0 and store.read_stream("e") == []

    def test_events_are_stored_as_rfc8785_canonical_bytes(self, store: EventStore) -> None:
        event = ev(5)
        store.append(Append("c", 0, [event]))
        raw = store._recorder.select_stream("c")[0].state
        body: dict[str, Any] = {"at": event.at, "context": event.context, "data": event.data}
        assert raw == rfc8785.dumps(body) == encode_state(event)

    # -- fencing ---------------------------------------------------------------------------

    def test_stale_append_is_a_fencing_error_and_writes_nothing(self, store: EventStore) -> None:
        store.append(Append("s", 0, [ev(1)]))
        last = store.last_position()
        with pytest.raises(FencingError) as caught:
            store.append(Append("s", 0, [ev(99)]))
        assert caught.value.code == "conflict" and caught.value.stream == "s"
        assert caught.value.expected_version == 0
        assert store.last_position() == last
        assert [e.data["n"] for e in store.read_stream("s")] == [1]

    def test_group_append_is_atomic_across_streams(self, store: EventStore) -> None:
        store.append(Append("x", 0, [ev(1)]))
        with pytest.raises(FencingError):
            store.append(Append("y", 0, [ev(2)]), Append("x", 0, [ev(3)]))
        assert store.read_stream("y") == []
        result = store.append(Append("y", 0, [ev(2)]), Append("x", 1, [ev(3), ev(4)]))
        assert [len(r) for r in result] == [1, 2]

    def test_one_stale_stream_fails_a_many_stream_append_and_leaves_the_index_alone(
        self, store: EventStore
    ) -> None:
        """Nothing of a refused append reaches the events, the due-work index, its
        position or the Merkle leaves."""
        first = Deferred("op-1")
        store.append(first.accept(0))
        rows, position, leaves = store.work_rows(), store.work_position(), store.read_leaves(0)
        last = store.last_position()
        others = [Deferred(f"op-{n}") for n in range(2, 6)]
        stale = Append("op-1", 0, [ev(9)])
        with pytest.raises(FencingError) as caught:
            store.append(
                *(o.accept(1) for o in others[:2]), stale, *(o.accept(1) for o in others[2:])
            )
        assert caught.value.stream == "op-1"
        assert store.read_streams([o.id for o in others]) == {o.id: [] for o in others}
        assert store.work_rows() == rows and store.work_position() == position
        assert store.read_leaves(0) == leaves and store.last_position() == last

    def test_a_group_conflict_names_the_stream_that_collided(self, store: EventStore) -> None:
        store.append(Append("x", 0, [ev(1)]))
        with pytest.raises(FencingError) as caught:
            store.append(Append("y", 0, [ev(2)]), Append("x", 0, [ev(3)]))
        assert caught.value.stream == "x"

    def test_an_append_from_the_future_leaves_no_gap(self, store: EventStore) -> None:
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

    def test_replaying_our_own_commit_is_idempotent(self, store: EventStore) -> None:
        """A commit whose acknowledgement was lost comes back as IntegrityError on retry: an
        append byte-identical to what is stored succeeds with the stored positions."""
        first = store.append(Append("r", 0, [ev(1), ev(2)]))
        again = store.append(Append("r", 0, [ev(1), ev(2)]))
        assert again == first
        with pytest.raises(FencingError):
            store.append(Append("r", 0, [ev(1), ev(7)]))

    def test_replaying_our_own_many_stream_commit_writes_nothing_and_returns_its_positions(
        self, store: EventStore
    ) -> None:
        """Even after other writers moved on, a lost acknowledgement's retry is recognised
        stream by stream and adds no event, leaf or index change."""
        op = Deferred("op-r")
        appends = [op.accept(0), Append("side", 0, [ev(1), ev(2)])]
        first = store.append(*appends)
        store.append(Append("side", 2, [ev(3)]), Append("other", 0, [ev(4)]))
        rows, last, leaves = store.work_rows(), store.last_position(), store.read_leaves(0)
        assert store.append(*appends) == first
        assert store.last_position() == last and store.read_leaves(0) == leaves
        assert store.work_rows() == rows
        assert [e.version for e in store.read_stream("side")] == [1, 2, 3]

    def test_a_retry_of_our_own_commit_with_more_appends_commits_the_new_ones(
        self, store: EventStore
    ) -> None:
        """A worker whose commit's answer was lost retries it with the attempts that ended
        since: the stored part is recognised and the rest committed, where the new streams
        were refused as lost races and their handlers ran again (found by review)."""
        stored = Append("mine", 0, [ev(1), ev(2)])
        first = store.append(stored)
        fresh = Append("new", 0, [ev(3)])
        got = store.append(stored, fresh, Append("also-new", 0, [ev(4)]))
        assert got[0] == first[0] and len(got[1]) == 1 and len(got[2]) == 1
        assert [e.position for e in store.read_stream("new")] == got[1]
        assert len(store.read_stream("mine")) == 2  # nothing written twice
        with pytest.raises(FencingError):  # another writer's event is still a conflict
            store.append(Append("mine", 0, [ev(1), ev(9)]), Append("newer", 0, [ev(5)]))
        assert store.read_stream("newer") == []

    def test_a_retry_whose_reconciliation_cannot_read_back_still_wakes_this_process(
        self, store: EventStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The retry of a commit collides with what is stored (maybe its own lost commit),
        then the read that would tell fails: BackendUnavailable, and this process's workers
        are woken as after any append that may have committed (F164)."""
        append = Deferred("op-w").accept(0)
        store.append(append)
        woken: list[int] = []
        store.add_wake_listener(lambda: woken.append(1))

        def unreachable(*args: Any, **kwargs: Any) -> Any:
            raise OperationalError("server closed the connection unexpectedly")

        monkeypatch.setattr(store._recorder, "select_stream", unreachable)
        with pytest.raises(BackendUnavailable):
            store.append(append)
        assert woken == [1]

    def test_recorder_primary_key_is_the_fence(self, store: EventStore) -> None:
        """The refusal comes from the store's own constraint, not from a read-then-write check."""
        store.append(Append("pk", 0, [ev(1)]))
        with pytest.raises(IntegrityError):
            store._recorder.insert_events(
                [StoredEvent("pk", 1, "test.happened", encode_state(ev(2)))]
            )

    @pytest.mark.parametrize(
        "bad",
        [
            pytest.param(Append("", 0, [ev(1)]), id="empty-stream"),
            pytest.param(Append("has space", 0, [ev(1)]), id="stream-with-space"),
            pytest.param(Append('quo"te', 0, [ev(1)]), id="stream-with-quote"),
            pytest.param(Append("back\\slash", 0, [ev(1)]), id="stream-with-backslash"),
            pytest.param(Append("é", 0, [ev(1)]), id="stream-not-ascii"),
            pytest.param(Append("x" * 201, 0, [ev(1)]), id="stream-too-long"),
            pytest.param(Append(7, 0, [ev(1)]), id="stream-not-text"),  # type: ignore[arg-type]
            pytest.param(Append("ok", 0, [ev(1, kind="")]), id="empty-type"),
            pytest.param(Append("ok", 0, [ev(1, kind="bad type")]), id="type-with-space"),
            pytest.param(Append("ok", 0, [ev(1, kind='t"')]), id="type-with-quote"),
            pytest.param(Append("ok", -1, [ev(1)]), id="negative-version"),
            pytest.param(Append("ok", True, [ev(1)]), id="bool-version"),
            pytest.param(Append("ok", 1.0, [ev(1)]), id="float-version"),  # type: ignore[arg-type]
            pytest.param(Append("ok", "0", [ev(1)]), id="text-version"),  # type: ignore[arg-type]
        ],
    )
    def test_a_bad_stream_type_or_expected_version_is_refused_before_anything_is_written(
        self, store: EventStore, bad: Append
    ) -> None:
        with pytest.raises(InvalidRequest):
            store.append(Append("good", 0, [ev(0)]), bad)
        assert store.last_position() == 0 and store.read_stream("good") == []
        assert store.read_leaves(0) == [] and store.work_position() == 0

    def test_commit_group_drops_only_the_items_that_lost_a_race_or_were_refused(
        self, store: EventStore
    ) -> None:
        store.append(Append("taken", 0, [ev(0)]))
        refused: list[str] = []
        group: list[tuple[list[Append], str]] = [
            ([Append("a", 0, [ev(1)])], "a"),
            ([Append("b", 0, [ev(2)]), Append("taken", 0, [ev(3)])], "stale"),
            ([Append("c", 0, [ev(4, kind="no spaces allowed")])], "invalid"),
            ([Append("d", 0, [ev(5)])], "d"),
            ([Append("nothing", 0, [])], "empty"),
        ]
        assert commit_group(store, group, refused.append) == ["a", "d"]
        assert refused == ["stale", "invalid"]  # a lost race is handed over too (P53)
        found = store.read_streams(["a", "b", "c", "d", "taken"])
        assert {s: [e.data["n"] for e in es] for s, es in found.items()} == {
            "a": [1],
            "b": [],
            "c": [],
            "d": [5],
            "taken": [0],
        }

    # -- reading ---------------------------------------------------------------------------

    def test_read_after_pages_in_position_order(self, store: EventStore) -> None:
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

    def test_bad_reads_are_refused(self, store: EventStore) -> None:
        with pytest.raises(InvalidRequest):
            store.read_after(-1)
        with pytest.raises(InvalidRequest):
            store.read_after(0, limit=0)
        with pytest.raises(InvalidRequest):
            store.read_stream("")
        assert store.read_stream("never-written") == []

    @pytest.mark.parametrize("reader", ["read_after", "read_raw_after"])
    def test_page_limits_run_from_one_to_the_maximum_and_positions_are_non_negative(
        self, store: EventStore, reader: str
    ) -> None:
        read: Callable[..., list[Any]] = getattr(store, reader)
        store.append(Append("l", 0, [ev(1), ev(2), ev(3)]))
        assert len(read(0, 1)) == 1
        assert len(read(0, PAGE_LIMIT_MAX)) == 3
        for limit in (0, -1, PAGE_LIMIT_MAX + 1, True, 2.0, "2"):
            with pytest.raises(InvalidRequest):
                read(0, limit)
        for position in (-1, True, 1.0, "0", None):
            with pytest.raises(InvalidRequest):
                read(position, 10)

    def test_read_raw_after_returns_the_stored_canonical_bytes_by_position(
        self, store: EventStore
    ) -> None:
        events = [ev(n, kind=f"kind.{n % 2}") for n in range(5)]
        store.append(Append("raw", 0, events[:3]), Append("other", 0, events[3:]))
        decoded = store.read_after(0)
        raw = store.read_raw_after(0, 4) + store.read_raw_after(decoded[3].position, 4)
        assert [r.id for r in raw] == [e.position for e in decoded]
        assert [(str(r.originator_id), r.originator_version, r.topic) for r in raw] == [
            (e.stream, e.version, e.type) for e in decoded
        ]
        assert [r.state for r in raw] == [encode_state(e) for e in events]

    def test_iter_after_yields_every_event_after_a_position_in_order(
        self, store: EventStore
    ) -> None:
        positions = [p for n in range(7) for p in store.append(Append(f"i{n}", 0, [ev(n)]))[0]]
        assert [e.position for e in store.iter_after(0, page=2)] == positions
        assert [e.data["n"] for e in store.iter_after(positions[2], page=3)] == [3, 4, 5, 6]
        assert list(store.iter_after(positions[-1])) == []

    def test_read_topics_returns_only_events_of_the_given_types_in_position_order(
        self, store: EventStore
    ) -> None:
        for n in range(9):
            store.append(Append(f"t{n % 2}", n // 2, [ev(n, kind=f"kind.{n % 3}")]))
        found = store.read_topics(["kind.0", "kind.2"], page=2)
        assert [e.data["n"] for e in found] == [0, 2, 3, 5, 6, 8]
        assert {e.type for e in found} == {"kind.0", "kind.2"}
        assert [e.position for e in found] == sorted(e.position for e in found)
        assert store.read_topics(["kind.none"]) == []

    def test_read_topics_of_no_types_returns_no_events(self, store: EventStore) -> None:
        store.append(Append("t", 0, [ev(1)]))
        assert store.read_topics([]) == []

    def test_read_streams_reads_several_streams_in_one_call(self, store: EventStore) -> None:
        store.append(Append("s1", 0, [ev(1), ev(2)]), Append("s2", 0, [ev(3)]))
        store.append(Append("s3", 0, [ev(4)]), Append("s1", 2, [ev(5)]))
        found = store.read_streams(["s1", "missing", "s2", "s1"])
        assert list(found) == ["s1", "missing", "s2"]
        assert [(e.version, e.data["n"]) for e in found["s1"]] == [(1, 1), (2, 2), (3, 5)]
        assert found["missing"] == []
        assert found["s2"] == store.read_stream("s2")
        assert found["s1"] == store.read_stream("s1")
        assert store.read_streams([]) == {}
        with pytest.raises(InvalidRequest):
            store.read_streams(["s1", 'bad"id'])

    def test_read_stream_after_a_version_returns_only_the_later_events(
        self, store: EventStore
    ) -> None:
        store.append(Append("v", 0, [ev(1), ev(2), ev(3)]))
        assert [e.version for e in store.read_stream("v", after_version=1)] == [2, 3]
        assert store.read_stream("v", after_version=3) == []

    def test_last_position_is_zero_when_empty_then_the_newest_position(
        self, store: EventStore
    ) -> None:
        assert store.last_position() == 0
        [[_, second]] = store.append(Append("lp", 0, [ev(1), ev(2)]))
        assert store.last_position() == second
        [[third]] = store.append(Append("lq", 0, [ev(3)]))
        assert store.last_position() == third > second

    # -- the due-work index ----------------------------------------------------------------

    def test_an_accepted_operation_is_due_from_its_acceptance(self, store: EventStore) -> None:
        op = Deferred("op-a", tenant="acme")
        store.append(op.accept(10))
        assert store.work_rows() == [WorkRow("op-a", MAIL, "acme", us(10), 0, None)]
        assert store.reserve_due(us(10) - 1, us(20), "w1", [MAIL], 10) == []
        assert store.reserve_due(us(10), us(20), "w1", ["other.type"], 10) == []
        assert store.reserve_due(us(10), us(20), "w1", [], 10) == []
        assert store.reserve_due(us(10), us(20), "w1", [MAIL], 0) == []
        assert store.reserve_due(us(10), us(20), "w1", [MAIL, "other.type"], 10) == ["op-a"]

    def test_a_reservation_takes_the_earliest_due_rows_of_all_its_types(
        self, store: EventStore
    ) -> None:
        """Each type is read by its own index range (decisions F161): what is taken is still
        the earliest of all types together, each row once, whatever order the types come in."""
        for n in range(12):
            kind = (MAIL, "sms.send", "push.send")[n % 3]
            store.append(Deferred(f"op-{n:02d}", operation_type=kind).accept(10 + n))
        kinds = ["push.send", MAIL, "sms.send", MAIL]
        first = store.reserve_due(us(30), us(60), "w1", kinds, 4)
        assert sorted(first) == ["op-00", "op-01", "op-02", "op-03"]
        taken = store.reserve_due(us(30), us(60), "w2", [MAIL, "sms.send"], 3)
        assert sorted(taken) == ["op-04", "op-06", "op-07"]
        rest = store.reserve_due(us(19), us(60), "w3", kinds, 10)
        assert sorted(rest) == ["op-05", "op-08", "op-09"]

    def test_a_reservation_of_many_types_takes_the_earliest(self, store: EventStore) -> None:
        """More types than SQLite reads as ranges in one statement (`_RANGES`)."""
        kinds = [f"t.{n}" for n in range(600)]
        for n in (599, 3, 250):
            store.append(Deferred(f"op-{n}", operation_type=kinds[n]).accept(n))
        assert sorted(store.reserve_due(us(600), us(700), "w1", kinds, 2)) == ["op-250", "op-3"]
        assert store.reserve_due(us(600), us(700), "w1", kinds[::-1], 5) == ["op-599"]

    def test_a_reservation_keeps_the_row_off_other_workers_lists_until_it_ends(
        self, store: EventStore
    ) -> None:
        store.append(Deferred("op-h").accept(0))
        assert store.reserve_due(us(1), us(1 + HOLD), "w1", [MAIL], 10) == ["op-h"]
        assert the_row(store, "op-h").worker == "w1"
        assert the_row(store, "op-h").due_at == us(1 + HOLD)
        assert store.reserve_due(us(1 + HOLD) - 1, us(20), "w2", [MAIL], 10) == []
        assert store.reserve_due(us(1 + HOLD), us(20), "w2", [MAIL], 10) == ["op-h"]
        assert the_row(store, "op-h").worker == "w2"

    def test_reserve_due_takes_the_earliest_due_rows_first_up_to_the_limit(
        self, store: EventStore
    ) -> None:
        for n, seconds in enumerate((30, 10, 40, 20)):
            store.append(Deferred(f"op-{n}").accept(seconds))
        # Which rows: the earliest due. In which order the ids come back is not promised
        # (PostgreSQL's UPDATE ... RETURNING does not keep the subquery's order).
        assert sorted(store.reserve_due(us(35), us(100), "w1", [MAIL], 2)) == ["op-1", "op-3"]
        assert store.reserve_due(us(35), us(100), "w2", [MAIL], 5) == ["op-0"]
        assert store.reserve_due(us(99), us(100), "w3", [MAIL], 5) == ["op-2"]

    def test_reserve_due_streams_reserves_and_reads_the_due_streams(
        self, store: EventStore
    ) -> None:
        due, later = Deferred("op-due"), Deferred("op-later")
        store.append(due.accept(0), later.accept(50), Append("noise", 0, [ev(1)]))
        found = store.reserve_due_streams(us(10), us(10 + HOLD), "w1", [MAIL], 10)
        assert found == store.read_streams(["op-due"])
        assert [e.type for e in found["op-due"]] == ["operation.received", "operation.accepted"]
        assert the_row(store, "op-due").worker == "w1"
        assert store.reserve_due_streams(us(10), us(10 + HOLD), "w2", [MAIL], 10) == {}
        assert store.reserve_due_streams(us(10), us(10 + HOLD), "w2", [], 10) == {}
        assert store.reserve_due_streams(us(10), us(10 + HOLD), "w2", [MAIL], 0) == {}

    def test_a_claim_moves_the_row_to_its_lease_expiry_with_its_token_and_worker(
        self, store: EventStore
    ) -> None:
        op = Deferred("op-c", tenant="beta")
        store.append(op.accept(0))
        assert store.reserve_due(us(1), us(1 + HOLD), "w1", [MAIL], 1) == ["op-c"]
        store.append(op.claim(2, "w1"))
        assert store.work_rows() == [WorkRow("op-c", MAIL, "beta", us(2 + LEASE), 1, "w1")]
        assert store.reserve_due(us(2 + LEASE) - 1, us(100), "w2", [MAIL], 1) == []
        assert store.reserve_due(us(2 + LEASE), us(100), "w2", [MAIL], 1) == ["op-c"]

    def test_renew_leases_extends_only_leases_still_held_by_that_worker_and_token(
        self, store: EventStore
    ) -> None:
        held, other = Deferred("op-1"), Deferred("op-2")
        store.append(held.accept(0), other.accept(0))
        store.append(held.claim(1, "w1"), other.claim(1, "w2"))
        expiry = us(1 + LEASE)
        assert store.renew_leases([("op-1", 1)], "w2", us(2), us(100)) == []
        assert store.renew_leases([("op-1", 2)], "w1", us(2), us(100)) == []
        assert store.renew_leases([("op-1", 1)], "w1", expiry, us(100)) == []  # ran out
        assert the_row(store, "op-1").due_at == expiry
        assert store.renew_leases([("op-1", 1), ("op-2", 1)], "w1", us(2), us(100)) == ["op-1"]
        assert the_row(store, "op-1").due_at == us(100)
        assert the_row(store, "op-2").due_at == expiry
        assert store.renew_leases([], "w1", us(2), us(100)) == []

    def test_renew_leases_renews_many_at_once_in_the_order_given(self, store: EventStore) -> None:
        ops = [Deferred(f"op-{n}") for n in range(5)]
        store.append(*(op.accept(0) for op in ops))
        store.append(*(op.claim(1, "w1" if n != 2 else "w2") for n, op in enumerate(ops)))
        leases = [("op-4", 1), ("op-2", 1), ("op-0", 1), ("op-3", 2), ("op-1", 1)]
        assert store.renew_leases(leases, "w1", us(2), us(100)) == ["op-4", "op-0", "op-1"]
        assert [r.due_at == us(100) for r in store.work_rows()] == [True, True, False, False, True]

    def test_held_leases_reports_which_leases_the_worker_still_holds(
        self, store: EventStore
    ) -> None:
        mine, theirs = Deferred("op-1"), Deferred("op-2")
        store.append(mine.accept(0), theirs.accept(0))
        store.append(mine.claim(1, "w1"), theirs.claim(1, "w2"))
        leases = [("op-1", 1), ("op-2", 1), ("op-none", 1)]
        assert store.held_leases(leases, "w1") == ["op-1"]
        assert store.held_leases([("op-1", 7)], "w1") == []
        assert store.held_leases([], "w1") == []
        # Lease ran out and another worker reserved the row: the holder learns at once.
        assert sorted(store.reserve_due(us(1 + LEASE), us(100), "w3", [MAIL], 10)) == [
            "op-1",
            "op-2",
        ]
        assert store.held_leases(leases, "w1") == []

    def test_a_takeover_after_an_expired_lease_fences_the_old_holder(
        self, store: EventStore
    ) -> None:
        op = Deferred("op-t")
        store.append(op.accept(0))
        store.append(op.claim(1, "w1"))
        assert store.reserve_due(us(1 + LEASE), us(1 + LEASE + HOLD), "w2", [MAIL], 1) == ["op-t"]
        store.append(op.take_over(32, "w2"))
        assert store.work_rows() == [WorkRow("op-t", MAIL, "acme", us(32 + LEASE), 2, "w2")]
        assert store.held_leases([("op-t", 1)], "w1") == []
        assert store.renew_leases([("op-t", 1)], "w1", us(33), us(200)) == []
        assert store.renew_leases([("op-t", 2)], "w2", us(33), us(200)) == ["op-t"]

    def test_a_scheduled_retry_is_due_at_its_retry_time_with_no_worker(
        self, store: EventStore
    ) -> None:
        op = Deferred("op-r")
        store.append(op.accept(0))
        store.append(op.claim(1, "w1"))
        store.append(op.fail(3, retry_in=60))
        assert store.work_rows() == [WorkRow("op-r", MAIL, "acme", us(63), 1, None)]
        assert store.reserve_due(us(62), us(70), "w2", [MAIL], 1) == []
        assert store.reserve_due(us(63), us(70), "w2", [MAIL], 1) == ["op-r"]
        store.append(op.claim(64, "w2"))
        assert the_row(store, "op-r").fencing_token == 2

    @pytest.mark.parametrize("ending", ["completed", "rejected", "failed", "dead_lettered"])
    def test_a_terminal_event_deletes_the_row(self, store: EventStore, ending: str) -> None:
        op, bystander = Deferred("op-end"), Deferred("op-by")
        store.append(op.accept(0), bystander.accept(0))
        store.append(op.claim(1, "w1"))
        endings: dict[str, Callable[[], Append]] = {
            "completed": lambda: op.complete(2),
            "rejected": lambda: op.reject(2),
            "failed": lambda: op.fail(2, None),
            "dead_lettered": lambda: op.fail(2, None, quarantine=True),
        }
        last = store.append(endings[ending]())[0][-1]
        assert store.read_stream("op-end")[-1].type == f"operation.{ending}"
        assert [r.operation_id for r in store.work_rows()] == ["op-by"]
        assert store.reserve_due(us(1000), us(1001), "w2", [MAIL], 10) == ["op-by"]
        assert store.work_position() == last

    def test_an_operation_accepted_and_ended_in_one_append_leaves_no_row(
        self, store: EventStore
    ) -> None:
        op = Deferred("op-1")
        steps = [op.accept(0), op.claim(0, "w1"), op.complete(1)]
        store.append(Append(op.id, 0, [event for step in steps for event in step.events]))
        assert store.work_rows() == []
        assert [e.version for e in store.read_stream("op-1")] == [1, 2, 3, 4, 5]

    def test_next_due_is_the_earliest_due_time_among_the_types(self, store: EventStore) -> None:
        assert store.next_due([MAIL]) is None
        store.append(Deferred("op-1").accept(40), Deferred("op-2", "pdf.render").accept(10))
        store.append(Deferred("op-3").accept(25))
        assert store.next_due([MAIL]) == us(25)
        assert store.next_due(["pdf.render"]) == us(10)
        assert store.next_due([MAIL, "pdf.render"]) == us(10)
        assert store.next_due(["other.type"]) is None
        assert store.next_due([]) is None
        store.reserve_due(us(30), us(50), "w1", [MAIL], 1)  # op-3 held until 50
        assert store.next_due([MAIL]) == us(40)

    def test_work_position_tracks_the_last_folded_position(self, store: EventStore) -> None:
        assert store.work_position() == 0
        [[*_, accepted]] = store.append(Deferred("op-1").accept(0))
        assert store.work_position() == accepted
        [[unrelated]] = store.append(Append("noise", 0, [ev(1)]))
        assert store.work_position() == unrelated == store.last_position()
        with pytest.raises(FencingError):
            store.append(Append("noise", 0, [ev(2)]))
        assert store.work_position() == unrelated
        store.reserve_due(us(1), us(2), "w1", [MAIL], 1)
        assert store.work_position() == unrelated

    def test_rebuilding_the_work_index_reproduces_the_same_rows(self, store: EventStore) -> None:
        ops = {n: Deferred(f"op-{n}", tenant=f"t{n % 2}") for n in range(6)}
        store.append(*(op.accept(n) for n, op in ops.items()))
        store.append(ops[1].claim(10, "w1"), ops[2].claim(10, "w2"), ops[3].claim(10, "w1"))
        store.append(Append("noise", 0, [ev(1)]))
        store.append(ops[2].fail(11, retry_in=90), ops[3].complete(11))
        store.append(ops[4].claim(12, "w1"))
        store.append(ops[4].fail(13, None))
        store.append(ops[1].take_over(50, "w3"))
        expected = store.work_rows()
        assert [r.operation_id for r in expected] == ["op-0", "op-1", "op-2", "op-5"]
        last = store.last_position()
        assert store.work_position() == last
        # Reservations and renewals live outside the journal: a rebuild forgets them.
        store.reserve_due(us(5), us(500), "w9", [MAIL], 10)
        assert store.work_rows() != expected
        assert store.rebuild_work_index() == last
        assert store.work_rows() == expected
        assert store.work_position() == last

    def test_rebuilding_an_empty_work_index_gives_position_zero(self, store: EventStore) -> None:
        assert store.rebuild_work_index() == 0
        assert store.work_rows() == [] and store.work_position() == 0

    # -- Merkle leaves ---------------------------------------------------------------------

    def test_every_event_has_one_leaf_the_hash_of_its_observed_line(
        self, store: EventStore
    ) -> None:
        store.append(Deferred("op-1").accept(0), Append("s", 0, [ev(1), ev(2)]))
        store.append(Append("s", 2, [ev(3, kind="other.kind")]))
        events = store.read_after(0)
        leaves = store.read_leaves(0)
        assert [p for p, _ in leaves] == [e.position for e in events]
        for (_, leaf), event, raw in zip(leaves, events, store.read_raw_after(0), strict=True):
            observed = rfc8785.dumps(event.to_observed())
            entry = entry_bytes(raw.id, event.stream, event.version, event.type, raw.state)
            assert entry == observed
            assert leaf == leaf_hash(observed) and len(leaf) == 32

    def test_read_leaves_pages_after_a_position(self, store: EventStore) -> None:
        positions = [p for n in range(6) for p in store.append(Append(f"l{n}", 0, [ev(n)]))[0]]
        page = store.read_leaves(0, 4)
        assert [p for p, _ in page] == positions[:4]
        assert [p for p, _ in store.read_leaves(page[-1][0], 4)] == positions[4:]
        assert store.read_leaves(positions[-1]) == []

    # -- deleting (retention purge) --------------------------------------------------------

    def test_delete_stream_events_deletes_only_up_to_a_version_of_one_stream(
        self, store: EventStore
    ) -> None:
        store.append(Append("doomed", 0, [ev(1), ev(2)]), Append("kept", 0, [ev(3)]))
        store.append(Append("doomed", 2, [ev(4), ev(5)]), Append("kept", 1, [ev(6)]))
        before = store.read_after(0)
        assert store.delete_stream_events("doomed", 3) == 3
        assert [(e.version, e.data["n"]) for e in store.read_stream("doomed")] == [(4, 5)]
        assert store.read_stream("kept") == [e for e in before if e.stream == "kept"]
        assert store.read_after(0) == [e for e in before if e.stream == "kept" or e.version > 3]
        assert store.delete_stream_events("doomed", 3) == 0
        assert store.delete_stream_events("never-written", 10) == 0
        with pytest.raises(InvalidRequest):
            store.delete_stream_events("", 1)

    def test_deleted_events_keep_their_leaves(self, store: EventStore) -> None:
        """The tree stays verifiable after a purge: leaves are never deleted with events."""
        store.append(Append("doomed", 0, [ev(1), ev(2)]))
        store.append(Append("doomed", 2, [ev(3, kind="tomb.stone")]))
        leaves = store.read_leaves(0)
        store.delete_stream_events("doomed", 2)
        assert store.read_leaves(0) == leaves and len(leaves) == 3

    def test_the_stream_continues_after_its_purged_versions(self, store: EventStore) -> None:
        store.append(Append("p", 0, [ev(1), ev(2)]))
        store.append(Append("p", 2, [ev(3, kind="tomb.stone")]))
        store.delete_stream_events("p", 2)
        store.append(Append("p", 3, [ev(4)]))
        assert [e.version for e in store.read_stream("p")] == [3, 4]
        with pytest.raises(FencingError):
            store.append(Append("p", 3, [ev(5)]))

    def test_an_append_at_version_zero_of_a_purged_stream_is_refused(
        self, store: EventStore
    ) -> None:
        store.append(Append("p", 0, [ev(1), ev(2)]))
        store.append(Append("p", 2, [ev(3, kind="tomb.stone")]))
        store.delete_stream_events("p", 2)
        with pytest.raises(FencingError):
            store.append(Append("p", 0, [ev(9)]))
        assert [e.version for e in store.read_stream("p")] == [3]

    def test_one_append_starting_and_continuing_streams_passes_only_both_checks(
        self, store: EventStore
    ) -> None:
        """The gap and fresh checks of one append are one verdict (PostgreSQL sends them
        as one statement): each failing alone refuses the whole append."""
        store.append(Append("p", 0, [ev(1), ev(2)]), Append("q", 0, [ev(1)]))
        store.append(Append("p", 2, [ev(3, kind="tomb.stone")]))
        store.delete_stream_events("p", 2)
        last = store.last_position()
        refused = [
            (Append("q", 1, [ev(2)]), Append("p", 0, [ev(9)])),  # restarts a purged stream
            (Append("q", 3, [ev(2)]), Append("n", 0, [ev(9)])),  # a gap in q
            (Append("q", 1, [ev(2)]), Append("p", 5, [ev(9)]), Append("n", 0, [ev(9)])),
        ]
        for appends in refused:
            with pytest.raises(FencingError):
                store.append(*appends)
        assert store.last_position() == last and store.read_stream("n") == []
        written = store.append(
            Append("q", 1, [ev(2)]), Append("p", 3, [ev(4)]), Append("n", 0, [ev(1)])
        )
        assert [len(positions) for positions in written] == [1, 1, 1]
        assert store.work_position() == store.last_position() == written[-1][-1]
        assert [e.version for e in store.read_stream("q")] == [1, 2]

    def test_positions_are_never_reused_after_the_newest_events_are_deleted(
        self, store: EventStore
    ) -> None:
        [[first]] = store.append(Append("a", 0, [ev(1)]))
        [[newest]] = store.append(Append("b", 0, [ev(2)]))
        store.delete_stream_events("b", 1)
        [[after]] = store.append(Append("c", 0, [ev(3)]))
        assert after > newest
        assert [p for p, _ in store.read_leaves(0)] == [first, newest, after]
        assert [e.position for e in store.read_after(0)] == [first, after]

    # -- listeners -------------------------------------------------------------------------

    def test_wake_listeners_are_called_after_commits_of_waking_topics_only(
        self, store: EventStore
    ) -> None:
        assert "operation.accepted" in WAKING_TOPICS and "test.happened" not in WAKING_TOPICS
        seen: list[list[str]] = []

        def on_wake() -> None:  # runs after the commit: the event is already readable
            seen.append([e.type for e in store.read_stream("op-w")])

        store.add_wake_listener(on_wake)
        store.append(Append("quiet", 0, [ev(1)]))
        assert seen == []
        op = Deferred("op-w")
        store.append(op.accept(0))
        assert seen == [["operation.received", "operation.accepted"]]
        store.append(op.claim(1, "w1"))  # attempt.started makes nothing new due
        assert len(seen) == 1
        with pytest.raises(FencingError):
            store.append(Deferred("op-w").accept(5))
        assert len(seen) == 1
        store.remove_wake_listener(on_wake)
        store.append(op.fail(2, retry_in=5))  # waking, but nobody listens any more
        assert len(seen) == 1

    def test_a_wake_listener_with_topics_is_called_only_for_commits_holding_one(
        self, store: EventStore
    ) -> None:
        """An idle workflow runner listens to workflow topics only: submits never wake it;
        a worker's Deferred loop listens to operation topics only: workflow events never
        wake it."""
        assert "operation.accepted" not in WORKFLOW_WAKING_TOPICS
        everything: list[int] = []
        workflows: list[int] = []
        operations: list[int] = []
        store.add_wake_listener(lambda: everything.append(1))
        store.add_wake_listener(lambda: workflows.append(1), WORKFLOW_WAKING_TOPICS)
        store.add_wake_listener(lambda: operations.append(1), OPERATION_WAKING_TOPICS)
        store.append(Deferred("op-t").accept(0))
        assert (len(everything), len(workflows), len(operations)) == (1, 0, 1)
        # A workflow event that makes nothing due in the index, but wakes its listeners.
        accepted = NewEvent(type=Topic.EVENT_ACCEPTED, at=AT, context={}, data={})
        store.append(Append("wf-t", 0, [accepted]))
        assert (len(everything), len(workflows), len(operations)) == (2, 1, 1)

    def test_append_listeners_are_called_after_every_commit_and_never_after_a_refusal(
        self, store: EventStore
    ) -> None:
        seen: list[int] = []
        store.add_append_listener(lambda: seen.append(store.last_position()))
        [[first]] = store.append(Append("a", 0, [ev(1)]))
        [[second]] = store.append(Append("b", 0, [ev(2)]))
        assert seen == [first, second]
        with pytest.raises(FencingError):
            store.append(Append("a", 0, [ev(3)]))
        with pytest.raises(InvalidRequest):
            store.append(Append("", 0, [ev(3)]))
        store.append(Append("none", 0, []))
        assert seen == [first, second]

    def test_store_says_whether_other_processes_appends_are_announced(
        self, store: EventStore
    ) -> None:
        assert store.announces_wakes is self.announces_wakes

    @contextlib.contextmanager
    def _heard(
        self, store: EventStore, *, topics: bool = True
    ) -> Iterator[queue.Queue[frozenset[str] | None] | None]:
        """What ``store``'s listener (``listen_for_wake_topics``, or ``listen_for_wakes``
        whose calls are heard as ``None``) hears while the block runs, past the call made
        once it is connected. ``None`` where the backend announces nothing: the listener
        then returned at once without a call."""
        heard: queue.Queue[frozenset[str] | None] = queue.Queue()
        stopped = threading.Event()
        if topics:
            listener = threading.Thread(
                target=store.listen_for_wake_topics, args=(heard.put, stopped), daemon=True
            )
        else:
            listener = threading.Thread(
                target=store.listen_for_wakes, args=(lambda: heard.put(None), stopped), daemon=True
            )
        listener.start()
        try:
            if not self.announces_wakes:
                listener.join(timeout=10)
                assert not listener.is_alive() and heard.empty()
                yield None
                return
            assert heard.get(timeout=10) is None  # connected: anything may have been missed
            yield heard
        finally:
            stopped.set()
            listener.join(timeout=10)
        assert not listener.is_alive()

    def test_listen_for_wakes_hears_another_stores_waking_append_only_where_announced(
        self, store: EventStore, peer: EventStore
    ) -> None:
        """Where the backend announces wakes, a waking append by another EventStore wakes
        the listener; elsewhere listen_for_wakes returns at once without calling it."""
        with self._heard(store, topics=False) as heard:
            if heard is not None:
                peer.append(Deferred("op-x").accept(0))
                heard.get(timeout=10)

    def test_an_announcement_names_the_waking_topics_it_committed(
        self, store: EventStore, peer: EventStore
    ) -> None:
        with self._heard(store) as heard:
            if heard is not None:
                peer.append(Append("quiet", 0, [ev(1)]))
                peer.append(Deferred("op-n").accept(0), Deferred("op-m", "report.build").accept(0))
                # The topics, and the operation types accepted (decisions F164).
                expected = {"operation.accepted", f"={MAIL}", "=report.build"}
                assert heard.get(timeout=10) == frozenset(expected)

    def test_a_stores_own_appends_are_not_announced_to_its_listener(
        self, store: EventStore, peer: EventStore
    ) -> None:
        """Its own appends wake its process's listeners directly (add_wake_listener): the
        LISTEN connection hears only other stores'. Announcements arrive in commit order,
        so an echo of the first append would be heard before the peer's."""
        with self._heard(store) as heard:
            if heard is not None:
                store.append(Deferred("op-own").accept(0))
                accepted = NewEvent(type=Topic.EVENT_ACCEPTED, at=AT, context={}, data={})
                peer.append(Append("wf-peer", 0, [accepted]))
                assert heard.get(timeout=10) == frozenset({Topic.EVENT_ACCEPTED})

    # -- transactions ----------------------------------------------------------------------

    def test_a_transaction_commits_at_the_end_of_its_block_and_rolls_back_if_it_raises(
        self, store: EventStore
    ) -> None:
        if not self.has_transactions:
            with pytest.raises(InvalidRequest), store.transaction():
                pass
            return
        schema = store.settings.get("POSTGRES_SCHEMA")
        table = f'"{schema}".contract_probe' if schema else "contract_probe"
        with store.transaction() as cursor:
            cursor.execute(f"CREATE TABLE {table} (n INTEGER)")
            cursor.execute(f"INSERT INTO {table} VALUES (1)")

        def abandon() -> None:
            with store.transaction() as cursor:
                cursor.execute(f"INSERT INTO {table} VALUES (2)")
                raise RuntimeError("abandon")

        with pytest.raises(RuntimeError, match="abandon"):
            abandon()
        with store.transaction() as cursor:
            cursor.execute(f"SELECT n FROM {table} ORDER BY n")
            assert [cells(row) for row in cursor.fetchall()] == [(1,)]

    # -- concurrency -----------------------------------------------------------------------

    def test_racing_writers_at_one_version_exactly_one_wins(self, store: EventStore) -> None:
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

    def test_concurrent_writers_never_duplicate_interleave_or_reorder_positions(
        self, store: EventStore, peer: EventStore
    ) -> None:
        """Two writers append to shared streams while a reader follows by position: every
        append commits or is fenced, each commit's positions are adjacent and visible all
        at once, and the follower sees every position exactly once, in increasing order."""
        streams = [f"c{n}" for n in range(6)]
        turns, page = 40, 7
        committed: list[tuple[int, list[Append], list[list[int]]]] = []
        fenced: list[int] = []
        errors: list[BaseException] = []
        done = threading.Event()
        start = threading.Barrier(3)
        followed: list[int] = []
        caught_up_at: list[int] = []  # the last position of each page that reached the end

        def write(writer: EventStore, seed: int) -> None:
            rng = random.Random(seed)
            try:
                start.wait()
                for turn in range(turns):
                    chosen = rng.sample(streams, rng.choice((1, 1, 2)))
                    appends = [
                        Append(s, len(writer.read_stream(s)), [ev(seed * 1000 + turn)] * k)
                        for s in chosen
                        for k in [rng.randint(1, 3)]
                    ]
                    try:
                        committed.append((seed, appends, writer.append(*appends)))
                    except FencingError:
                        fenced.append(seed)
            except BaseException as error:  # reported by the test
                errors.append(error)

        def follow() -> None:
            try:
                start.wait()
                position = 0
                while True:
                    finished = done.is_set()
                    found = store.read_after(position, page)
                    followed.extend(e.position for e in found)
                    if found:
                        position = found[-1].position
                        if len(found) < page:
                            caught_up_at.append(position)
                    elif finished:
                        return
            except BaseException as error:  # reported by the test
                errors.append(error)

        writers = [
            threading.Thread(target=write, args=(store, 1)),
            threading.Thread(target=write, args=(peer, 2)),
        ]
        reader = threading.Thread(target=follow)
        for thread in (*writers, reader):
            thread.start()
        for thread in writers:
            thread.join(timeout=120)
        done.set()
        reader.join(timeout=60)
        assert errors == []
        assert len(committed) + len(fenced) == 2 * turns
        assert {seed for seed, _, _ in committed} == {1, 2}
        journal = store.read_after(0, PAGE_LIMIT_MAX)
        positions = [e.position for e in journal]
        assert followed == positions
        assert positions == sorted(set(positions))
        assert len(journal) == sum(len(a.events) for _, appends, _ in committed for a in appends)
        order = {p: i for i, p in enumerate(positions)}
        by_position = {e.position: e for e in journal}
        commit_end: dict[int, int] = {}
        for _, appends, result in committed:
            mine = [p for stream_positions in result for p in stream_positions]
            indexes = sorted(order[p] for p in mine)
            assert indexes == list(range(indexes[0], indexes[0] + len(mine)))
            commit_end.update((p, max(mine)) for p in mine)
            for append, stream_positions in zip(appends, result, strict=True):
                assert [
                    (by_position[p].stream, by_position[p].version) for p in stream_positions
                ] == [
                    (append.stream, append.expected_version + n)
                    for n in range(1, len(append.events) + 1)
                ]
        assert [commit_end[p] for p in caught_up_at] == caught_up_at
        for stream in streams:
            versions = [e.version for e in store.read_stream(stream)]
            assert versions == list(range(1, len(versions) + 1))


class DurableStoreContract(EventStoreContract):
    """What only a journal shared between processes can show."""

    durable = True

    def test_racing_processes_exactly_one_wins(self, url: str) -> None:
        """OL-8 groundwork: four OS processes append version 1 of one stream at once."""
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

    def test_a_second_store_on_the_same_url_sees_the_same_journal(
        self, store: EventStore, peer: EventStore
    ) -> None:
        [[position]] = store.append(Append("shared", 0, [ev(1)]))
        assert peer is not store
        assert [e.position for e in peer.read_stream("shared")] == [position]
        with pytest.raises(FencingError):
            peer.append(Append("shared", 0, [ev(2)]))


class TestMemoryStore(EventStoreContract):
    has_transactions = False
    announces_wakes = False
    durable = False

    def store_urls(self, tmp_path: Path) -> Iterator[str]:
        yield "memory://"

    def test_memory_stores_are_private(self) -> None:
        with EventStore("memory://") as one, EventStore("memory://") as two:
            one.append(Append("m", 0, [ev(1)]))
            assert two.read_stream("m") == []

    def test_reading_unknown_streams_does_not_grow_the_memory_index(
        self, store: EventStore
    ) -> None:
        for n in range(50):
            assert store.read_stream(f"nobody-{n}") == []
        assert store.read_streams([f"nobody-{n}" for n in range(50, 60)])["nobody-55"] == []
        assert len(store._recorder._stored_events_index) == 0  # type: ignore[attr-defined]


class TestSQLiteStore(DurableStoreContract):
    has_transactions = True
    announces_wakes = False

    def store_urls(self, tmp_path: Path) -> Iterator[str]:
        yield f"sqlite:///{tmp_path}/journal.sqlite3"

    def test_positions_are_never_reused_after_the_newest_events_are_deleted(
        self, store: EventStore
    ) -> None:
        """SQLite would give the newest rowid to the next append: deleting the journal's
        newest event is refused, and what is older can still go."""
        [[first]] = store.append(Append("a", 0, [ev(1)]))
        [[newest]] = store.append(Append("b", 0, [ev(2)]))
        with pytest.raises(Conflict, match="newest"):
            store.delete_stream_events("b", 1)
        assert store.delete_stream_events("a", 1) == 1
        [[after]] = store.append(Append("c", 0, [ev(3)]))
        assert after > newest > first
        assert [e.position for e in store.read_after(0)] == [newest, after]


@pytest.mark.postgres
class TestPostgresStore(DurableStoreContract):
    has_transactions = True
    announces_wakes = True

    def store_urls(self, tmp_path: Path) -> Iterator[str]:
        yield from postgres_schema_url()


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
        "postgresql://h/db?schema=order",  # keywords break eventsourcing's unquoted SQL
        "postgresql://h/db?schema=user",
        "postgresql://h/db?schema=between",  # a column-name keyword: no type name either
        "postgresql://h/db?schema=pg_mine",
        "postgresql:///db",
    ):
        with pytest.raises(InvalidRequest):
            resolve_store(bad)
