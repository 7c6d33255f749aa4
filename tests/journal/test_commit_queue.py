"""The commit queue (journal/commit_queue.py) on SQLite and PostgreSQL: concurrent appends
share transactions, each caller is answered only after its own commit, a member the journal
refuses fails alone, and positions and Merkle leaves are exactly what one-by-one appends
would give.

Groups are made deterministic, not timed: the first commit is held on a gate until the test
has seen every other caller queued, so they all join the second transaction.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pytest

from domain.errors import BackendUnavailable, FencingError
from domain.events import NewEvent
from journal.codec import encode_state
from journal.commit_queue import CommitQueue
from journal.leaves import event_leaf
from journal.store import Append, EventStore

AT = "2026-11-30T09:00:00.000000Z"


def ev(n: int) -> NewEvent:
    return NewEvent(type="test.happened", at=AT, context={"actor": {"id": "t"}}, data={"n": n})


@pytest.fixture
def store(store_url: str) -> Iterator[EventStore]:
    with EventStore(store_url) as opened:
        yield opened


@dataclass
class Gated:
    """A commit function over a real store whose first call waits for ``release``."""

    store: EventStore
    release: threading.Event = field(default_factory=threading.Event)
    entered: threading.Event = field(default_factory=threading.Event)
    calls: list[list[str]] = field(default_factory=list)
    seen_committed: list[bool] = field(default_factory=list)

    def __call__(self, appends: Sequence[Append]) -> list[list[int]]:
        self.calls.append([a.stream for a in appends])
        if len(self.calls) == 1:
            self.entered.set()
            assert self.release.wait(30)
        return self.store.append(*appends)


class Caller(threading.Thread):
    def __init__(self, queue: CommitQueue, appends: list[Append], check: EventStore) -> None:
        super().__init__(daemon=True)
        self.queue, self.appends, self.check = queue, appends, check
        self.result: list[list[int]] | None = None
        self.error: BaseException | None = None
        self.visible_on_return: bool | None = None

    def run(self) -> None:
        try:
            self.result = self.queue.append(self.appends)
        except BaseException as error:
            self.error = error
            return
        # Answered only after the commit: another connection already sees the events.
        first = self.appends[0]
        found = self.check.read_stream(first.stream, first.expected_version)
        self.visible_on_return = len(found) >= len(first.events)


def queued(queue: CommitQueue, callers: list[Caller]) -> None:
    """Start the callers one by one, each queued before the next starts (arrival order)."""
    for number, caller in enumerate(callers, start=1):
        caller.start()
        while queue.waiting < number:
            threading.Event().wait(0.001)


def run_gated(
    store: EventStore, store_url: str, members: list[list[Append]]
) -> tuple[Gated, Caller, list[Caller], CommitQueue]:
    """A first caller holds the gate; ``members`` queue behind it; then the gate opens."""
    gated = Gated(store)
    queue = CommitQueue(gated)
    check = EventStore(store_url)
    first = Caller(queue, [Append("gate-1", 0, [ev(0)])], check)
    first.start()
    assert gated.entered.wait(30)
    callers = [Caller(queue, appends, check) for appends in members]
    queued(queue, callers)
    assert all(c.result is None and c.error is None for c in [first, *callers])
    gated.release.set()
    for caller in [first, *callers]:
        caller.join(30)
        assert not caller.is_alive()
    check.close()
    return gated, first, callers, queue


def test_waiting_appends_share_one_transaction_and_are_answered_after_it(
    store: EventStore, store_url: str
) -> None:
    members = [[Append(f"s-{n}", 0, [ev(n), ev(n + 100)])] for n in range(6)]
    gated, _, callers, queue = run_gated(store, store_url, members)
    assert gated.calls == [["gate-1"], [f"s-{n}" for n in range(6)]]
    assert (queue.groups, queue.members) == (2, 7)
    for n, caller in enumerate(callers):
        assert caller.error is None and caller.visible_on_return is True
        stored = store.read_stream(f"s-{n}")
        assert caller.result == [[e.position for e in stored]]
    # One gapless run in arrival order, each member's events together.
    positions = [p for c in callers for p in c.result[0]]  # type: ignore[index]
    assert positions == list(range(positions[0], positions[0] + 12))


def test_a_refused_member_fails_alone_and_the_others_commit(
    store: EventStore, store_url: str
) -> None:
    store.append(Append("taken", 0, [ev(1)]))
    members = [
        [Append("fine-a", 0, [ev(2)])],
        [Append("taken", 0, [ev(3)])],  # stale: the stream is at version 1
        [Append("fine-b", 0, [ev(4)]), Append("fine-c", 0, [ev(5)])],
        [Append("gap", 3, [ev(6)])],  # from the future: versions 1-3 do not exist
        [Append("fine-d", 0, [ev(7)])],
    ]
    _, _, callers, _ = run_gated(store, store_url, members)
    ok, stale, pair, gap, last = callers
    assert isinstance(stale.error, FencingError) and stale.error.stream == "taken"
    assert isinstance(gap.error, FencingError) and gap.error.stream == "gap"
    for caller in (ok, pair, last):
        assert caller.error is None and caller.visible_on_return is True
    assert [e.data["n"] for e in store.read_stream("taken")] == [1]
    assert store.read_stream("gap") == []
    for stream, n in (("fine-a", 2), ("fine-b", 4), ("fine-c", 5), ("fine-d", 7)):
        assert [e.data["n"] for e in store.read_stream(stream)] == [n]
    assert pair.result == [
        [e.position for e in store.read_stream("fine-b")],
        [e.position for e in store.read_stream("fine-c")],
    ]


def test_two_members_on_one_stream_never_share_a_transaction(
    store: EventStore, store_url: str
) -> None:
    members = [
        [Append("same", 0, [ev(1)])],
        [Append("other", 0, [ev(2)])],
        [Append("same", 0, [ev(3)])],  # the same version: the first one wins, this one alone
        [Append("same", 1, [ev(4)])],  # after the first: it commits in a later group
    ]
    gated, _, callers, _ = run_gated(store, store_url, members)
    assert gated.calls[1] == ["same", "other"]
    first, other, loser, follower = callers
    assert first.error is None and other.error is None and follower.error is None
    assert isinstance(loser.error, FencingError) and loser.error.stream == "same"
    assert [e.data["n"] for e in store.read_stream("same")] == [1, 4]


def test_an_unreachable_store_is_every_members_answer_and_nothing_is_kept(
    store: EventStore,
) -> None:
    calls: list[int] = []
    release = threading.Event()

    def failing(appends: Sequence[Append]) -> list[list[int]]:
        calls.append(len(appends))
        if len(calls) == 1:
            assert release.wait(30)
            return store.append(*appends)
        raise BackendUnavailable("the journal store cannot be reached")

    queue = CommitQueue(failing)
    errors: list[BaseException | None] = []

    def call(stream: str) -> None:
        try:
            queue.append([Append(stream, 0, [ev(1)])])
            errors.append(None)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=call, args=(f"u-{n}",)) for n in range(4)]
    threads[0].start()
    while not calls:
        threading.Event().wait(0.001)
    for number, thread in enumerate(threads[1:], start=1):
        thread.start()
        while queue.waiting < number:
            threading.Event().wait(0.001)
    release.set()
    for thread in threads:
        thread.join(30)
    assert calls == [1, 3]  # the three waiting members tried once, together
    assert errors.count(None) == 1
    assert sum(isinstance(e, BackendUnavailable) for e in errors) == 3
    assert [store.read_stream(f"u-{n}") for n in range(1, 4)] == [[], [], []]


def test_concurrent_appends_through_the_store_keep_positions_and_leaves_exact(
    store: EventStore,
) -> None:
    threads, per_thread = 8, 15
    results: dict[str, list[list[int]]] = {}
    failures: list[BaseException] = []
    start = threading.Barrier(threads)

    def writer(t: int) -> None:
        start.wait()
        try:
            for n in range(per_thread):
                stream = f"w-{t}-{n % 3}"
                version = 2 * (n // 3)  # two events per append
                got = store.append(Append(stream, version, [ev(n), ev(n + 1000)]))
                results[f"{t}-{n}"] = got
        except BaseException as error:
            failures.append(error)

    workers = [threading.Thread(target=writer, args=(t,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert failures == []
    events = list(store.iter_after(0))
    assert len(events) == threads * per_thread * 2
    assert [e.position for e in events] == sorted({e.position for e in events})
    assert events[-1].position - events[0].position == len(events) - 1  # gapless
    by_position = {e.position: e for e in events}
    for key, got in results.items():
        t, n = map(int, key.split("-"))
        first, second = (by_position[p] for p in got[0])
        assert (first.data["n"], second.data["n"]) == (n, n + 1000)
        assert first.stream == second.stream == f"w-{t}-{n % 3}"
        assert second.position == first.position + 1
    leaves = dict(store.read_leaves(0, 10_000))
    for e in events:
        state = encode_state(NewEvent(e.type, e.at, e.context, e.data))
        assert leaves[e.position] == event_leaf(e.position, e.stream, e.version, e.type, state)
    transactions, appends = store.commit_groups
    assert appends == threads * per_thread and 1 <= transactions <= appends


def test_an_append_from_inside_a_commit_is_committed_on_its_own(store: EventStore) -> None:
    """A listener that appends (run by the committing thread) must not wait for itself."""
    seen: list[list[list[int]]] = []

    def after(appends: Sequence[Append]) -> None:
        if appends[0].stream == "outer":
            seen.append(queue.append([Append("inner", 0, [ev(2)])]))

    queue = CommitQueue(lambda appends: store.append(*appends), after)
    outer = queue.append([Append("outer", 0, [ev(1)])])
    assert seen == [[[e.position for e in store.read_stream("inner")]]]
    assert seen[0][0][0] > outer[0][0]


def test_a_leader_lingers_until_the_last_groups_company_is_back(
    store: EventStore, store_url: str
) -> None:
    """After a group of three, the next leader waits for three, however long its linger
    (decisions F32): the same callers back with their next appends share one transaction,
    and nobody sleeps out the bound once they are there."""
    members = [[Append(f"s-{n}", 0, [ev(n)])] for n in range(3)]
    gated, _, _, queue = run_gated(store, store_url, members)
    assert gated.calls[1] == ["s-0", "s-1", "s-2"]
    queue.linger = 120.0  # slept out, the callers below would outlive their join
    check = EventStore(store_url)
    again = [Caller(queue, [Append(f"s-{n}", 1, [ev(n + 10)])], check) for n in range(3)]
    for caller in again:
        caller.start()
    for caller in again:
        caller.join(60)
        assert not caller.is_alive() and caller.error is None
    check.close()
    assert sorted(gated.calls[2]) == ["s-0", "s-1", "s-2"]
    assert (queue.groups, queue.members) == (3, 7)


class Interrupted(Exception):
    """What a signal handler raises in the waiting thread (as Ctrl-C raises KeyboardInterrupt)."""


def test_a_caller_interrupted_while_waiting_leaves_the_queue_and_others_go_on() -> None:
    """A waiting caller interrupted (Ctrl-C, a signal handler's exception) stayed queued:
    handed the lead later, it led nobody, and every later append of the process waited for
    ever (found by a defect hunt). It leaves the queue now, uncommitted."""
    import os
    import signal

    gate, committed = threading.Event(), list[str]()

    def commit(appends: Sequence[Append]) -> list[list[int]]:
        if appends[0].stream == "first":
            gate.wait(10)
        committed.extend(a.stream for a in appends)
        return [[1] for _ in appends]

    queue = CommitQueue(commit, linger=0)
    leader = threading.Thread(target=lambda: queue.append([Append("first", 0, [ev(1)])]))
    leader.start()

    def interrupt(signum: int, frame: object) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGUSR1, interrupt)
    try:
        while not queue._leading:  # the leader is in its commit
            threading.Event().wait(0.01)
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGUSR1)).start()
        with pytest.raises(Interrupted):
            queue.append([Append("interrupted", 0, [ev(2)])])  # waits behind the leader
    finally:
        signal.signal(signal.SIGUSR1, previous)
    gate.set()
    leader.join(10)
    later: list[list[list[int]]] = []
    after = threading.Thread(
        target=lambda: later.append(queue.append([Append("later", 0, [ev(3)])])), daemon=True
    )
    after.start()
    after.join(5)
    assert later == [[[1]]], "a later append never returned"
    assert committed == ["first", "later"] and queue.waiting == 0


def test_a_caller_interrupted_once_handed_the_lead_hands_it_on() -> None:
    """The same interrupt landing after the lead was handed to the caller: the next waiting
    member leads, or nobody leads once nobody waits."""
    from journal.commit_queue import _Member

    queue = CommitQueue(lambda appends: [[1] for _ in appends], linger=0)
    handed, next_one = (_Member([], frozenset({s}), 0) for s in ("a", "b"))
    queue._waiting, queue._leading = [handed, next_one], True
    handed.handed = True  # what a finished leader does to the first waiting member
    queue._leave(handed)
    assert queue._waiting == [next_one] and next_one.handed and next_one.done.is_set()
    assert queue._leading
    queue._leave(next_one)
    assert queue._waiting == [] and queue._leading is False


def test_a_leader_interrupted_while_it_lingers_leaves_and_hands_the_lead_on() -> None:
    """A leader waiting for company (``linger``) when the interrupt lands had not taken its
    group: it stayed queued as the next leader, and nobody led again (found by review)."""
    import os
    import signal

    queue = CommitQueue(lambda appends: [[1] for _ in appends], linger=2.0)
    queue._had_company, queue._last_size = True, 5  # as after a group that had company

    def interrupt(signum: int, frame: object) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGUSR1, interrupt)
    try:
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGUSR1)).start()
        with pytest.raises(Interrupted):
            queue.append([Append("mine", 0, [ev(1)])])  # leads, lingers, is interrupted
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert queue.waiting == 0 and queue._leading is False
    later: list[list[list[int]]] = []
    after = threading.Thread(
        target=lambda: later.append(queue.append([Append("later", 0, [ev(2)])])), daemon=True
    )
    after.start()
    after.join(5)
    assert later == [[[1]]]
