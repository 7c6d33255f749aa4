"""The Deferred coordinator's pacing: the busy pause (decisions F111) against a stop and the
lease; turns woken by this process's submits, and the spacing under a trickle (F131)."""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Iterator, Sequence
from functools import partial
from itertools import pairwise
from typing import Any

import pytest
from conftest import postgres_schema_url  # type: ignore[import-not-found, unused-ignore]
from eventsourcing.persistence import OperationalError
from worker_fleet import wait_for

from blackops import Application, Retryable, Supervision
from blackops.worker import Worker
from domain.errors import BackendUnavailable
from journal.store import Append


class BusyCoordinator:
    """What `Worker._work` reads of its worker, with every turn claiming something."""

    _pace = Worker._pace
    _hold = Worker._hold
    _spacing = Worker._spacing
    _trickle = Worker._trickle

    def __init__(self, wake_delay: float, lease_seconds: float = 30.0) -> None:
        self.wake_delay, self.lease_seconds = wake_delay, lease_seconds
        self.gather_seconds = wake_delay
        self._stop_requested, self._paced = threading.Event(), threading.Event()
        self._wake, self._notified = threading.Event(), threading.Event()
        self._finished: queue.Queue[object] = queue.Queue()
        self.completed, self._next_due, self._submits = 0, None, 0
        # Busy: every turn claims all the room it has.
        self._last_claim_full, self._last_submit = True, (-math.inf, math.inf)
        self.turns: list[tuple[float, bool, bool]] = []  # (when, claim, stop requested)

    def _claim_room(self) -> int:
        return 8

    def _turn(self, *, claim: bool, submitted: bool) -> int:
        self.turns.append((time.monotonic(), claim, self._stop_requested.is_set()))
        return 1

    def _heartbeat(self) -> None:
        pass

    def _idle_timeout(self) -> float:
        return 1.0


def run(coordinator: BusyCoordinator, seconds: float) -> None:
    thread = threading.Thread(target=Worker._work, args=(coordinator,))
    thread.start()
    time.sleep(seconds)
    stop(coordinator, thread)


def gaps(coordinator: BusyCoordinator) -> list[float]:
    """Seconds between the starts of consecutive turns (before the stop): a paused machine
    only lengthens some of them, so the shortest shows the cap."""
    starts = [at for at, _, stop in coordinator.turns if not stop]
    return [later - earlier for earlier, later in pairwise(starts)]


def run_until_turns(coordinator: BusyCoordinator, turns: int) -> None:
    """Run until ``turns`` turns have begun: at most 10 s, so a pause of a tenth of the
    lease passes on a loaded machine, where a pause of ``wake_delay`` (a minute) fails."""
    thread = threading.Thread(target=Worker._work, args=(coordinator,))
    thread.start()
    try:
        wait_for(lambda: len(coordinator.turns) >= turns, 10, f"{turns} turns")
    finally:
        stop(coordinator, thread)


def stop(coordinator: BusyCoordinator, thread: threading.Thread) -> None:
    coordinator._stop_requested.set()  # what request_stop() does
    coordinator._paced.set()
    coordinator._wake.set()
    thread.join(5)
    assert not thread.is_alive()


def test_a_stop_during_the_pause_claims_nothing_more() -> None:
    coordinator = BusyCoordinator(wake_delay=0.5)
    run(coordinator, 0.1)  # the first turn is done; the stop comes during the pause
    assert [(claim, stop) for _, claim, stop in coordinator.turns if stop] in ([], [(False, True)])
    assert all(claim for _, claim, stop in coordinator.turns if not stop)


def test_the_pause_never_outlasts_a_tenth_of_the_lease() -> None:
    coordinator = BusyCoordinator(wake_delay=60.0, lease_seconds=1.0)
    run_until_turns(coordinator, 4)  # about one turn every 0.1 s, not one a minute
    assert min(gaps(coordinator)) < 0.5  # a tenth of the lease, not all or half of it


class NotifiedCoordinator(BusyCoordinator):
    """Under a trickle of announced submits: every turn claims some, leaves room, and hears
    another announcement meanwhile."""

    def __init__(self, gather_seconds: float, lease_seconds: float) -> None:
        super().__init__(wake_delay=0.005, lease_seconds=lease_seconds)
        self.gather_seconds = gather_seconds
        self._last_claim_full = False

    def _turn(self, *, claim: bool, submitted: bool) -> int:
        self._last_submit = (time.monotonic(), 0.001)  # what Worker._announced records
        self._notified.set()
        self._wake.set()
        return super()._turn(claim=claim, submitted=submitted)


def test_the_pause_after_an_announcement_never_outlasts_a_tenth_of_the_lease() -> None:
    coordinator = NotifiedCoordinator(gather_seconds=60.0, lease_seconds=1.0)
    run_until_turns(coordinator, 3)  # a turn every 0.1-0.2 s, not one a minute
    assert min(gaps(coordinator)) < 0.5  # capped by a tenth of the lease, not more


def test_submits_here_filling_the_room_end_the_pause_after_an_announcement() -> None:
    """The pause after an announcement (a minute here: gather_seconds under a trickle,
    capped at a tenth of the lease) ends like the busy pause once this process's own
    submits fill the claim room (found by CI: a reconnect's "anything" announcement held
    a worker with gather_seconds of an hour for a minute)."""
    coordinator = NotifiedCoordinator(gather_seconds=3600.0, lease_seconds=600.0)
    thread = threading.Thread(target=Worker._work, args=(coordinator,))
    thread.start()
    try:
        wait_for(lambda: len(coordinator.turns) == 1, 5, "the first turn")
        time.sleep(0.2)  # in the pause after the announcement that turn heard
        assert len(coordinator.turns) == 1
        coordinator._submits = coordinator._claim_room()  # what Worker._on_submit counts
        coordinator._paced.set()
        wait_for(lambda: len(coordinator.turns) >= 2, 5, "the turn the submits start")
    finally:
        stop(coordinator, thread)


# -- a real worker -----------------------------------------------------------------------------


class Transactions:
    """What each committed transaction held: claims, ends, submits (a commit observer)."""

    def __init__(self, app: Application) -> None:
        self.seen: list[dict[str, int]] = []
        app.runtime.add_commit_observer(self.committed)

    def committed(self, appends: Sequence[Append], members: int, seconds: float) -> None:
        types = [event.type for append in appends for event in append.events]
        self.seen.append(
            {
                "claims": types.count("attempt.started"),
                "ends": types.count("operation.completed"),
                "submits": types.count("operation.accepted"),
            }
        )

    def worker_turns(self) -> list[dict[str, int]]:
        return [t for t in self.seen if t["claims"] or t["ends"]]


@pytest.fixture
def noop_app(store_url: str) -> Iterator[Application]:
    app = Application(store_url)
    app.operation("t.noop")(lambda ctx, params: None)
    yield app
    app.close()


def completed(app: Application, ids: list[str]) -> bool:
    return all(app.status(i)["status"] == "completed" for i in ids)


def test_a_turn_woken_by_a_submit_here_claims_without_a_due_work_read(
    noop_app: Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The submit's commit says there is work: the turn goes straight to the claim (the
    read stays for wakes that do not say so: polling, NOTIFY, retries)."""
    app = noop_app
    # On PostgreSQL this store's own submits are not announced back to its listener
    # (an announced wake does not say whose work it is, and its turn reads the index).
    # Only the reads of turns a submit here woke count: the first turn's, and a turn the
    # listener's connecting wakes, read (whenever a loaded machine runs them).
    worker = app.worker(poll_seconds=30)
    reads: list[object] = []
    submit_turns: list[int] = []
    in_submit_turn = threading.local()
    original_next_due, original_turn = app.store.next_due, worker._turn

    def next_due(types: Any) -> int | None:
        if getattr(in_submit_turn, "on", False):
            reads.append(types)
        return original_next_due(types)

    def turn(*, claim: bool, submitted: bool = False) -> int:
        in_submit_turn.on = submitted
        try:
            claimed = original_turn(claim=claim, submitted=submitted)
        finally:
            in_submit_turn.on = False
        if submitted:
            submit_turns.append(claimed)
        return claimed

    monkeypatch.setattr(app.store, "next_due", next_due)
    monkeypatch.setattr(worker, "_turn", turn)
    worker.start()
    try:
        for n in range(3):
            submitted = app.submit("t.noop", {"n": n}, actor="a", tenant="t")
            wait_for(partial(completed, app, [submitted]), 30, "the operation")
    finally:
        worker.stop(5)
    assert sum(submit_turns) >= 1, submit_turns  # a submit's turn claimed (so was looked at)
    assert reads == []


def test_under_a_trickle_ends_ride_with_the_next_claims(noop_app: Application) -> None:
    """Submits one at a time, closer together than gather_seconds: claimed in groups, and
    each group's ends committed in the transaction of the next group's claims, instead of
    a claim and an end each. The first submit after a quiet spell is claimed at once.

    A steady trickle (a submit every quarter of gather_seconds) rather than a few timed
    submits: whether one submit counts as a trickle depends on when the one before it
    came, which a loaded machine delays; a steady one keeps the pattern however late
    some turns are."""
    app = noop_app
    turns = Transactions(app)
    gather, count = 0.4, 16
    worker = app.worker(gather_seconds=gather, poll_seconds=30).start()
    try:
        first = app.submit("t.noop", {}, actor="a", tenant="t")
        wait_for(lambda: bool(turns.worker_turns()), 30, "the first claim")
        assert turns.worker_turns()[0] == {"claims": 1, "ends": 0, "submits": 0}  # at once
        trickle = []
        for n in range(count):
            trickle.append(app.submit("t.noop", {"n": n}, actor="a", tenant="t"))
            time.sleep(gather / 4)
        wait_for(lambda: completed(app, [first, *trickle]), 30, "every operation")
    finally:
        worker.stop(5)
    seen = turns.worker_turns()
    assert sum(t["claims"] for t in seen) == count + 1, seen
    assert sum(t["ends"] for t in seen) == count + 1, seen
    assert any(t["claims"] >= 2 for t in seen), seen  # gathered, not one claim per submit
    assert any(t["claims"] and t["ends"] for t in seen), seen  # ends rode with claims
    # One claim and one end each would be 2 * (count + 1) = 34 transactions (about 8 here).
    assert len(seen) <= count, seen


def test_submits_filling_the_room_end_the_gathering(noop_app: Application) -> None:
    """With room for two claims, the second submit of a trickle starts the turn at once,
    not after gather_seconds (an hour here)."""
    app = noop_app
    turns = Transactions(app)
    worker = app.worker(
        concurrency=1, prefetch=1, gather_seconds=3600, lease_seconds=600, poll_seconds=30
    )
    worker.start()
    try:
        first = app.submit("t.noop", {}, actor="a", tenant="t")
        wait_for(lambda: bool(turns.worker_turns()), 30, "the first claim")
        pair = [app.submit("t.noop", {"n": n}, actor="a", tenant="t") for n in range(2)]
        wait_for(lambda: completed(app, [first, *pair]), 30, "three operations")
    finally:
        worker.stop(5)
    assert sum(t["claims"] for t in turns.worker_turns()) == 3


class IdleWake(threading.Event):
    """A coordinator's ``_wake`` that tells when the coordinator waits on it: ``entries``
    counts its waits, ``waiting`` is set while one blocks."""

    def __init__(self) -> None:
        super().__init__()
        self.entries = 0
        self.waiting = False

    def wait(self, timeout: float | None = None) -> bool:
        self.entries += 1
        self.waiting = True
        try:
            return super().wait(timeout)
        finally:
            self.waiting = False


def wait_until_idle(wake: IdleWake, what: str) -> None:
    """Until the coordinator has blocked on its wake for 0.2 s: every wake that came before
    (a submit's listener running after the turn that claimed it, PostgreSQL's listener
    connecting) has had its turn."""

    def settled() -> bool:
        entries = wake.entries
        if not wake.waiting:
            return False
        time.sleep(0.2)
        return wake.waiting and wake.entries == entries

    wait_for(settled, 30, what)


def test_a_stop_ends_the_gathering_and_commits_what_finished(noop_app: Application) -> None:
    """A submit right after a claim waits for the gathering (an hour here); a stop ends
    it at once: the attempt that finished meanwhile is committed, the submit not claimed.

    The submit comes once the coordinator is idle after the claim: found by CI on a loaded
    machine, a turn the first submit's listener woke after the claim had taken it (or the
    PostgreSQL listener's connecting woke) ran as the second submit committed and claimed
    it, which is right (a turn claims what is due) but not the case under test."""
    app = noop_app
    started, release, returned = threading.Event(), threading.Event(), threading.Event()

    def slow_handler(ctx: Any, params: Any) -> None:
        started.set()
        release.wait(30)
        returned.set()

    app.operation("t.slow")(slow_handler)
    # A long lease: the pause is capped at a tenth of it (a minute here, not 3 s).
    worker = app.worker(gather_seconds=3600, lease_seconds=600, poll_seconds=30)
    wake = worker._wake = IdleWake()
    worker.start()
    try:
        try:
            wait_until_idle(wake, "the idle worker's first turns")
            slow = app.submit("t.slow", {}, actor="a", tenant="t")
            assert started.wait(30), "the claim"  # the claim turn is over: its attempt runs
            wait_until_idle(wake, "the coordinator after the claim")
            waiting = app.submit("t.noop", {}, actor="a", tenant="t")  # a trickle: gathered
        finally:
            release.set()
        assert returned.wait(30)
        time.sleep(0.3)  # the slow attempt has finished; its end waits for the next turn
        assert app.status(slow)["status"] == "running"
    except BaseException:
        worker.stop(5)
        raise
    stopping = threading.Thread(target=worker.stop, args=(5,))
    stopping.start()
    stopping.join(30)
    assert not stopping.is_alive()  # not an hour
    assert app.status(slow)["status"] == "completed"  # committed at the stop
    assert app.status(waiting)["status"] == "accepted"  # a stop claims nothing more
    app.close()


@pytest.fixture
def announced() -> Iterator[tuple[Application, Application]]:
    """On PostgreSQL, a working Application (serving ``t.noop``) and another submitting to
    the same journal (``t.noop`` and ``t.other``): its submits reach the first one's worker
    only as announcements."""
    for url in postgres_schema_url():
        working, submitting = Application(url), Application(url)
        working.operation("t.noop")(lambda ctx, params: None)
        for name in ("t.noop", "t.other"):
            submitting.operation(name)(lambda ctx, params: None)
        try:
            yield working, submitting
        finally:
            working.close()
            submitting.close()


def test_announced_submits_a_trickle_gathers_and_a_lone_one_does_not_wait(
    announced: tuple[Application, Application],
) -> None:
    """Another process's submits reach a worker as announcements (PostgreSQL NOTIFY). A
    lone one is claimed after ``wake_delay``, not ``gather_seconds`` (6 s here); in a
    trickle announced 0.2 s apart, a submit that comes while the one before is recent starts
    the gathering, so the next ones are claimed with it (decisions F164). Five follow the
    first: on a loaded machine the second may be claimed with the first one's end, and the
    gathering then starts at the third."""
    working, submitting = announced
    turns = Transactions(working)
    # A 120 s lease: the pause is capped at a tenth of it, so a gathering lasts 6-12 s and
    # a lone operation's whole life has 5 s on a loaded machine to show it was not gathered.
    worker = working.worker(gather_seconds=6.0, lease_seconds=120, poll_seconds=30).start()
    try:
        time.sleep(0.5)  # listening (its first turn found nothing)
        began = time.monotonic()
        lone = submitting.submit("t.noop", {}, actor="a", tenant="t")
        wait_for(lambda: completed(submitting, [lone]), 30, "the lone operation")
        assert time.monotonic() - began < 5  # not gathered for 6-12 s
        time.sleep(6.5)  # the lone submit is no longer recent
        trickle = []
        for n in range(6):
            trickle.append(submitting.submit("t.noop", {"n": n}, actor="a", tenant="t"))
            time.sleep(0.2)
        wait_for(lambda: completed(submitting, trickle), 30, "the trickle")
    finally:
        worker.stop(5)
    claims = [t["claims"] for t in turns.worker_turns() if t["claims"]]
    assert sum(claims) == 7 and max(claims) >= 3, claims


def test_a_trickle_of_types_served_elsewhere_does_not_delay_a_lone_operation(
    announced: tuple[Application, Application],
) -> None:
    """Announcements name the types they accepted: another process's trickle of a type this
    worker does not serve is no trickle to it, so its own lone operation is claimed after
    ``wake_delay``, not ``gather_seconds`` (30 s here, capped at a tenth of the lease)."""
    working, submitting = announced
    worker = working.worker(gather_seconds=30.0, lease_seconds=600, poll_seconds=30).start()
    try:
        time.sleep(0.5)  # listening
        for n in range(10):
            submitting.submit("t.other", {"n": n}, actor="a", tenant="t")
            time.sleep(0.03)
        began = time.monotonic()
        lone = submitting.submit("t.noop", {}, actor="a", tenant="t")
        wait_for(lambda: completed(submitting, [lone]), 90, "the lone operation")
        assert time.monotonic() - began < 15  # not gathered for 30-60 s
    finally:
        worker.stop(5)


def test_a_submit_whose_acknowledgement_was_lost_still_wakes_the_worker_here(
    noop_app: Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Committed, then the connection failed before the answer (BackendUnavailable): the
    store's own announcement is not heard by its listener (F164), so the store wakes its
    process's workers itself; the worker does not wait for its poll (30 s here)."""
    app = noop_app
    worker = app.worker(poll_seconds=30).start()
    recorder = app.store._recorder
    committed = recorder.insert_events

    def acknowledgement_lost(stored: Any, **kwargs: Any) -> Any:
        committed(stored, **kwargs)
        raise OperationalError("server closed the connection unexpectedly")

    try:
        time.sleep(0.2)  # its first turn (nothing due) is over
        monkeypatch.setattr(recorder, "insert_events", acknowledgement_lost)
        with pytest.raises(BackendUnavailable):
            app.submit("t.noop", {}, actor="a", tenant="t")
        monkeypatch.setattr(recorder, "insert_events", committed)
        wait_for(lambda: worker.completed == 1, 10, "the operation, long before the poll")
    finally:
        worker.stop(5)


def flaky_once(app: Application, *, retry_after: float, other_seconds: float) -> list[float]:
    """Register ``t.flaky`` (its first attempt raises Retryable, its retry is due
    ``retry_after`` seconds later) and ``t.other`` (sleeps ``other_seconds``); returns the
    list the flaky attempts append their start times to."""
    starts: list[float] = []
    policy = Supervision(max_attempts=2, initial_delay_seconds=retry_after)

    @app.operation("t.flaky", supervision=policy)
    def flaky(ctx: Any, params: dict[str, Any]) -> dict[str, Any]:
        starts.append(time.monotonic())
        if len(starts) == 1:
            raise Retryable("once more")
        return {}

    app.operation("t.other")(lambda ctx, params: time.sleep(other_seconds))
    return starts


@pytest.mark.parametrize("other_seconds", [0.0, 4.0])
def test_a_retry_is_claimed_when_due_after_turns_that_read_nothing(
    noop_app: Application, other_seconds: float
) -> None:
    """OL-7: a retry due in 0.5 s is claimed then by a running worker, although the turns
    after its scheduling were a submit's (claiming without a due-work read) and an end's:
    the due time read before them is kept (a 30 s poll here; it was forgotten, and the
    retry waited for the other handler's end or the poll)."""
    app = noop_app
    starts = flaky_once(app, retry_after=0.5, other_seconds=other_seconds)
    worker = app.worker(concurrency=2, lease_seconds=60, poll_seconds=30).start()
    try:
        flaky_id = app.submit("t.flaky", {}, actor="a", tenant="t")
        wait_for(lambda: bool(starts), 30, "the first attempt")
        time.sleep(0.1)
        app.submit("t.other", {}, actor="a", tenant="t")  # a submit while the retry waits
        wait_for(lambda: completed(app, [flaky_id]), 30, "the retry")
    finally:
        worker.stop(5)
    assert len(starts) == 2
    # Due after 0.5 s; forgotten, it would wait for the other's end (4 s) or the poll (30 s).
    assert 0.5 <= starts[1] - starts[0] < 3.5, starts[1] - starts[0]


def test_a_retry_falling_due_during_a_claims_round_trip_is_still_woken_for(
    noop_app: Application,
) -> None:
    """OL-7: a claim begun just before a retry is due, whose commit returns after it (a slow
    round trip, 0.3 s here), did not take the retry: its due time is kept, so the retry is
    claimed then, not when the other handler ends (4 s) or the poll (30 s) comes."""
    app = noop_app
    starts = flaky_once(app, retry_after=1.0, other_seconds=4.0)
    worker = app.worker(concurrency=2, lease_seconds=60, poll_seconds=30)
    cycle = worker.engine.cycle

    def slow_claim(endings: Any, limit: int) -> Any:
        result = cycle(endings, limit)
        if any(attempt.operation.type == "t.other" for attempt in result[1]):
            time.sleep(0.3)  # the commit's acknowledgement comes late
        return result

    worker.engine.cycle = slow_claim  # type: ignore[method-assign,assignment]
    worker.start()
    try:
        flaky_id = app.submit("t.flaky", {}, actor="a", tenant="t")
        wait_for(lambda: bool(starts), 30, "the first attempt")
        time.sleep(max(0.0, starts[0] + 0.85 - time.monotonic()))  # 0.15 s before it is due
        app.submit("t.other", {}, actor="a", tenant="t")
        wait_for(lambda: completed(app, [flaky_id]), 30, "the retry")
    finally:
        worker.stop(5)
    # Due after 1 s; forgotten, it would wait for the other's end (after 4.85 s).
    assert 1.0 <= starts[1] - starts[0] < 4.0, starts[1] - starts[0]
