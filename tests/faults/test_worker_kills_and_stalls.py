"""Real fault injection on ``blackops worker`` processes: OL-4, OL-5, OL-7, OL-8.

Workers are separate processes (``blackops worker --app fault_apps:app``) that the tests
kill (SIGKILL), freeze past their lease (SIGSTOP/SIGCONT), stop (SIGTERM), race against
each other, and cut off from a PostgreSQL server that is crashed and restarted. Every
test ends with invariant checks over the whole journal (:func:`check_journal`): one
terminal event per operation and nothing after it, at most one completion, fencing
tokens strictly increasing per operation, a completion only from the holder of the
newest claim, and a due-work index that is empty, caught up and equal to its rebuild.

Select them with ``-m faults``. Each test waits by polling the journal, never by a
fixed sleep, with generous timeouts that say what was awaited; every worker's output
is printed when a test fails.
"""

from __future__ import annotations

import itertools
import signal
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import postgres_schema_url
from fault_apps import FLAKY_MAX_ATTEMPTS, build_app, fails
from private_postgres import PrivateServer, private_postgres  # noqa: F401 (fixture)
from worker_fleet import Fleet, WorkerProcess, freeze, wait_for

from blackops import Application, BlackOpsError
from domain.errors import BackendUnavailable
from domain.events import RecordedEvent

#: Real processes and servers against real leases: run on their own, after the rest.
pytestmark = pytest.mark.faults

TERMINAL = {
    "operation.completed",
    "operation.rejected",
    "operation.failed",
    "operation.dead_lettered",
}


@pytest.fixture
def markers(tmp_path: Path) -> Path:
    folder = tmp_path / "markers"
    folder.mkdir()
    return folder


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A private schema on the shared PostgreSQL server."""
    yield from postgres_schema_url()


@pytest.fixture
def fault_app(store_url: str) -> Iterator[Application]:
    application = build_app(store_url)
    try:
        yield application
    finally:
        application.close()


# -- waiting and reading the journal -----------------------------------------------------------


def journal(app: Application) -> dict[str, list[RecordedEvent]]:
    """Every event of the store, by stream, checking positions strictly increase."""
    streams: dict[str, list[RecordedEvent]] = defaultdict(list)
    last = 0
    for event in app.store.iter_after(0, page=5000):
        assert event.position > last, f"positions not increasing at {event.position}"
        last = event.position
        streams[event.stream].append(event)
    return dict(streams)


def types_of(events: list[RecordedEvent]) -> list[str]:
    return [e.type for e in events]


def statuses(app: Application, ids: list[str]) -> Counter[str]:
    return Counter(app.status(i)["status"] for i in ids)


def all_status(app: Application, ids: list[str], status: str) -> Callable[[], bool]:
    return lambda: all(app.status(i)["status"] == status for i in ids)


def started_by(app: Application, operation_id: str, worker: str, attempt: int) -> bool:
    return any(
        e["type"] == "attempt.started"
        and e["data"]["worker"] == worker
        and e["data"]["attempt"] == attempt
        for e in app.events(operation_id)
    )


def describe(app: Application, ids: list[str]) -> str:
    lines = []
    for operation_id in ids[:20]:
        events = app.events(operation_id)
        lines.append(f"{operation_id}: {app.status(operation_id)['status']}")
        lines.extend(
            f"    {e['type']:<26} worker={e['context'].get('worker')} "
            f"token={e['context'].get('fencing_token')} data={e['data']}"
            for e in events[2:]
        )
    return "\n".join(lines)


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def check_journal(app: Application, operations: list[str]) -> dict[str, list[RecordedEvent]]:
    """The invariants every fault test ends with (OL-5, OL-8); returns the journal.

    For every operation: versions 1..n; at most one terminal event and nothing after
    it; ``attempt.started`` numbers 1, 2, 3... and fencing tokens strictly increasing
    (so each token names exactly one attempt); at most one ``operation.completed``,
    recorded under the newest claim's token and worker; every ``attempt.claim_lost``
    names the claim it ended; an Outcome Record exists exactly for completions (OL-9).
    The due-work index is empty once all are terminal, caught up with the journal, and
    equal to its rebuild from position 0.
    """
    streams = journal(app)
    assert set(operations) <= set(streams), "an accepted operation is missing from the journal"
    all_terminal = True
    for operation_id in operations:
        events = streams[operation_id]
        where = f"operation {operation_id}: {types_of(events)}"
        assert [e.version for e in events] == list(range(1, len(events) + 1)), where
        assert types_of(events)[:2] == ["operation.received", "operation.accepted"], where
        terminal = [i for i, e in enumerate(events) if e.type in TERMINAL]
        assert len(terminal) <= 1, f"two terminal events: {where}"
        if terminal:
            assert terminal[0] == len(events) - 1, f"events after the terminal one: {where}"
        else:
            all_terminal = False
        started = [e for e in events if e.type == "attempt.started"]
        assert [e.data["attempt"] for e in started] == list(range(1, len(started) + 1)), where
        tokens = [e.data["fencing_token"] for e in started]
        assert all(a < b for a, b in itertools.pairwise(tokens)), where
        assert len(set(tokens)) == len(tokens), f"a fencing token claimed twice: {where}"
        for event in events:
            if event.type == "attempt.claim_lost":
                previous = [s for s in started if s.position < event.position][-1]
                assert event.data["attempt"] == previous.data["attempt"], where
                assert event.data["fencing_token"] == previous.data["fencing_token"], where
                assert event.data["worker"] == previous.data["worker"], where
        completed = [e for e in events if e.type == "operation.completed"]
        assert len(completed) <= 1, f"completed twice: {where}"
        outcome = streams.get(f"outcome:{operation_id}", [])
        if completed:
            last_claim = [s for s in started if s.position < completed[0].position][-1]
            assert completed[0].context["fencing_token"] == last_claim.data["fencing_token"]
            assert completed[0].context["worker"] == last_claim.data["worker"]
            assert completed[0].data["attempt"] == last_claim.data["attempt"]
            # OL-9: one Outcome Record, from the same commit as the completion.
            assert types_of(outcome) == ["outcome.recorded"], where
            assert outcome[0].context == completed[0].context, where
            assert outcome[0].data["digest"] == completed[0].data["outcome_digest"], where
        else:
            assert outcome == [], f"an Outcome Record without a completion: {where}"
        assert "operation.rejected" not in types_of(events), f"a fault became a rejection: {where}"
    store = app.store
    assert store.work_position() == store.last_position(), "due-work index lags the journal"
    if all_terminal:
        assert store.work_rows() == [], "terminal operations left rows in the due-work index"
        store.rebuild_work_index()
        assert store.work_rows() == []
    return streams


def lifecycle_streams(streams: dict[str, list[RecordedEvent]]) -> set[str]:
    return {stream for stream in streams if not stream.startswith("outcome:")}


def marker_files(folder: Path, operation_id: str) -> set[str]:
    return {p.name.removeprefix(operation_id + ".") for p in folder.glob(operation_id + ".*")}


# -- 1. SIGKILL mid-attempt ------------------------------------------------------------------


@pytest.mark.faults
def test_sigkill_mid_attempt_another_worker_takes_over_after_the_lease(
    fault_app: Application, fleet: Fleet, markers: Path
) -> None:
    """OL-4, OL-8: a worker killed with SIGKILL mid-attempt loses its claim at lease expiry.

    A second worker records ``attempt.claim_lost`` for attempt 1 (naming the dead
    worker and its token), claims attempt 2 with a higher fencing token and completes
    the operation exactly once; the killed handler never finished.
    """
    store = fault_app.store.location.display
    ids = [fault_app.submit("fault.sleep", {"n": n}, actor="x", tenant="t") for n in range(3)]
    env = {"FAULT_MARKER_DIR": str(markers)}
    a = fleet.start(store, "A", concurrency=4, lease=1.5, env={**env, "FAULT_SLEEP_SECONDS": "60"})
    wait_for(
        lambda: all("1.A.start" in marker_files(markers, i) for i in ids),
        30,
        "worker A to start every attempt",
        lambda: describe(fault_app, ids),
    )
    a.signal(signal.SIGKILL)
    assert a.wait_exit(10) == -signal.SIGKILL
    assert statuses(fault_app, ids) == {"running": 3}

    b = fleet.start(
        store, "B", lease=1.5, concurrency=4, env={**env, "FAULT_SLEEP_SECONDS": "0.05"}
    )
    wait_for(
        all_status(fault_app, ids, "completed"),
        30,
        "worker B to complete the operations",
        lambda: describe(fault_app, ids),
    )
    streams = check_journal(fault_app, ids)
    for operation_id in ids:
        events = streams[operation_id]
        assert types_of(events) == [
            "operation.received",
            "operation.accepted",
            "attempt.started",
            "attempt.claim_lost",
            "attempt.supervising",
            "attempt.retry_scheduled",
            "attempt.started",
            "attempt.finalizing",
            "operation.completed",
        ]
        first, lost, _, _, second = events[2:7]
        assert first.data["worker"] == a.id and first.data["fencing_token"] == 1
        assert lost.data == {
            "attempt": 1,
            "fencing_token": 1,
            "worker": a.id,
            "claimed_until": first.data["lease_expires_at"],
        }
        assert lost.context["worker"] == b.id  # recorded by the new claimant
        assert events[4].data["reason"] == "claim_lost"
        assert second.data["worker"] == b.id and second.data["attempt"] == 2
        assert second.data["fencing_token"] == 2 > first.data["fencing_token"]
        # The new claim waited for the dead worker's lease to run out.
        assert instant(second.at) >= instant(first.data["lease_expires_at"])
        assert events[-1].context["worker"] == b.id
        assert fault_app.outcome(operation_id) == {"label": "B", "attempt": 2, "fencing_token": 2}
        # The killed handler never got to its end; B's ran once.
        assert marker_files(markers, operation_id) == {"1.A.start", "2.B.start", "2.B.done"}


# -- 2. SIGSTOP past the lease, then SIGCONT ---------------------------------------------------


@pytest.mark.faults
def test_stale_worker_resumed_after_its_lease_never_records_success(
    fault_app: Application, fleet: Fleet, markers: Path
) -> None:
    """OL-8: a worker frozen (SIGSTOP) past its lease is fenced when it wakes up.

    B takes over and completes; A is resumed (SIGCONT) and its handler returns, but
    A never records anything after its claim: exactly one ``operation.completed``,
    under B's worker id and B's fencing token, and no event after it. (Which guard
    stops A depends on its threads' timing after SIGCONT: usually its next heartbeat
    finds the lease gone, else the journal refuses its commit at the old version.)
    """
    store = fault_app.store.location.display
    operation_id = fault_app.submit("fault.sleep", {}, actor="x", tenant="t")
    env = {"FAULT_MARKER_DIR": str(markers)}
    a = fleet.start(store, "A", lease=1.5, env={**env, "FAULT_SLEEP_SECONDS": "2.0"})
    wait_for(
        lambda: started_by(fault_app, operation_id, a.id, 1),
        30,
        "worker A to claim the operation",
        lambda: describe(fault_app, [operation_id]),
    )
    freeze(a, store)
    b = fleet.start(store, "B", lease=1.5, env={**env, "FAULT_SLEEP_SECONDS": "0.05"})
    wait_for(
        all_status(fault_app, [operation_id], "completed"),
        30,
        "worker B to take over and complete",
        lambda: describe(fault_app, [operation_id]),
    )
    assert a.process.poll() is None, "A should still be alive (stopped)"
    completed_at = fault_app.store.last_position()

    a.signal(signal.SIGCONT)
    wait_for(
        lambda: "1.A.done" in marker_files(markers, operation_id),
        30,
        "A's handler to return after SIGCONT",
    )
    # Whatever A does with its result, it does now: give it a moment, then stop it
    # (SIGTERM drains and commits what it still holds) and wait for it to exit.
    time.sleep(1.0)
    a.signal(signal.SIGTERM)
    assert a.wait_exit(30) == 0
    b.signal(signal.SIGTERM)
    assert b.wait_exit(30) == 0

    streams = check_journal(fault_app, [operation_id])
    events = streams[operation_id]
    assert fault_app.store.last_position() == completed_at, "A wrote after B completed"
    completed = [e for e in events if e.type == "operation.completed"]
    assert len(completed) == 1
    assert events[-1] is completed[0], "an event after the completion"
    b_claim = [e for e in events if e.type == "attempt.started"][-1]
    assert b_claim.data["worker"] == b.id
    assert completed[0].context["worker"] == b.id
    assert completed[0].context["fencing_token"] == b_claim.data["fencing_token"] == 2
    # A's only event is its own claim; its attempt was ended by B's claim_lost.
    by_a = [e.type for e in events if e.context.get("worker") == a.id]
    assert by_a == ["attempt.started"]
    lost = [e for e in events if e.type == "attempt.claim_lost"]
    assert [(e.data["worker"], e.context["worker"]) for e in lost] == [(a.id, b.id)]
    assert fault_app.outcome(operation_id) == {"label": "B", "attempt": 2, "fencing_token": 2}
    assert marker_files(markers, operation_id) == {"1.A.start", "1.A.done", "2.B.start", "2.B.done"}
    guard = "heartbeat" if "lost the lease" in a.output() else "journal fencing"
    print(f"the stale worker was stopped by its {guard}")


# -- 3. racing claimants -------------------------------------------------------------------------


@pytest.mark.faults
def test_racing_worker_processes_claim_each_attempt_once(
    fault_app: Application, fleet: Fleet
) -> None:
    """OL-4, OL-8: four worker processes race for 300 operations.

    Every fencing token names exactly one attempt per operation, no operation
    completes twice, and every completion carries its own claim's token and worker.
    """
    store = fault_app.store.location.display
    workers = [
        WorkerProcess(store, label, fleet.folder, concurrency=4, lease=2.0, poll=0.05)
        for label in "ABCD"
    ]
    fleet.workers.extend(workers)
    ids_by_worker = {w.wait_ready(): w.label for w in workers}
    # Submitted once all four run, so all four race for them (one ready well before the
    # others could work off 300 alone in a few tenths of a second).
    ids = [
        fault_app.submit("fault.sleep", {"sleep": (n % 7) / 200}, actor="x", tenant="t")
        for n in range(300)
    ]

    def done() -> bool:
        return fault_app.store.work_rows() == []

    waited = wait_for(done, 120, "all 300 operations to end", lambda: str(statuses(fault_app, ids)))
    assert statuses(fault_app, ids) == {"completed": 300}
    streams = check_journal(fault_app, ids)
    by_worker: Counter[str] = Counter()
    for operation_id in ids:
        completed = streams[operation_id][-1]
        by_worker[ids_by_worker[completed.context["worker"]]] += 1
    assert sum(by_worker.values()) == 300
    assert len(by_worker) >= 2, f"one worker did everything: {by_worker}"
    lost = sum(types_of(streams[i]).count("attempt.claim_lost") for i in ids)
    print(f"300 operations in {waited:.1f}s; completions by worker {dict(by_worker)}; lost {lost}")


# -- 4. SIGTERM grace --------------------------------------------------------------------------


@pytest.mark.faults
def test_sigterm_finishes_within_grace_and_hands_back_the_rest(
    fault_app: Application, fleet: Fleet, markers: Path
) -> None:
    """OL-7, OL-8: SIGTERM stops claiming and gives running attempts the grace period.

    (a) An attempt that ends within the grace completes normally. (b) One that
    outlasts it gets ``attempt.interrupted`` then ``attempt.retry_scheduled`` due at
    once (never rejected or failed); the worker exits 0, and another worker claims
    it at once (no lease wait, no claim_lost) and completes it.
    """
    store = fault_app.store.location.display
    short = fault_app.submit("fault.sleep", {"sleep": 1.0}, actor="x", tenant="t")
    long = fault_app.submit("fault.sleep", {"sleep": 60}, actor="x", tenant="t")
    env = {"FAULT_MARKER_DIR": str(markers)}
    a = fleet.start(store, "A", concurrency=2, lease=30, grace=3.0, env=env)
    wait_for(
        lambda: all("1.A.start" in marker_files(markers, i) for i in (short, long)),
        30,
        "A to start both attempts",
        lambda: describe(fault_app, [short, long]),
    )
    signalled = time.monotonic()
    a.signal(signal.SIGTERM)
    assert a.wait_exit(30) == 0
    took = time.monotonic() - signalled
    assert 2.5 <= took < 15, f"A exited {took:.1f}s after SIGTERM (grace 3s)"
    assert "stopped" in a.output()

    # (a) finished within the grace
    assert fault_app.status(short)["status"] == "completed"
    assert types_of(fault_app.store.read_stream(short))[2:] == [
        "attempt.started",
        "attempt.finalizing",
        "operation.completed",
    ]
    assert fault_app.outcome(short) == {"label": "A", "attempt": 1, "fencing_token": 1}
    # (b) outlasted the grace: interrupted and rescheduled at once, not failed
    assert fault_app.status(long)["status"] == "retry_scheduled"
    events = fault_app.store.read_stream(long)
    assert types_of(events)[2:] == [
        "attempt.started",
        "attempt.interrupted",
        "attempt.supervising",
        "attempt.retry_scheduled",
    ]
    interrupted, supervising, scheduled = events[3:]
    assert interrupted.data == {"attempt": 1, "cause": "worker_shutdown"}
    assert interrupted.context["worker"] == a.id
    assert supervising.data == {"attempt": 1, "decision": "retry", "reason": "interrupted"}
    assert scheduled.data["delay_seconds"] == 0
    assert marker_files(markers, long) == {"1.A.start"}  # its handler never returned

    b = fleet.start(store, "B", lease=30, env={**env, "FAULT_SLEEP_SECONDS": "0.05"})
    waited = wait_for(
        all_status(fault_app, [long], "completed"),
        20,
        "B to complete the handed-back attempt",
        lambda: describe(fault_app, [long]),
    )
    assert waited < 10, "B waited for a lease although A had handed the attempt back"
    streams = check_journal(fault_app, [short, long])
    events = streams[long]
    assert "attempt.claim_lost" not in types_of(events)
    second = [e for e in events if e.type == "attempt.started"][-1]
    assert second.data["attempt"] == 2 and second.data["fencing_token"] == 2
    assert second.data["worker"] == b.id == events[-1].context["worker"]
    assert fault_app.outcome(long) == {"label": "B", "attempt": 2, "fencing_token": 2}


# -- 5. PostgreSQL crash and restart -------------------------------------------------------------


@pytest.mark.faults
@pytest.mark.postgres
def test_postgres_crash_and_restart_loses_nothing_accepted(
    private_postgres: PrivateServer,  # noqa: F811
    fleet: Fleet,
    markers: Path,
) -> None:
    """OL-4, OL-8: four workers ride out an immediate PostgreSQL shutdown (a crash).

    While the server is down ``submit`` fails with ``backend_unavailable``; after
    it is back the workers reconnect on their own and every operation accepted
    before or after the crash completes, exactly once.
    """
    server = private_postgres
    if not server.running:  # an earlier test left it down
        server.start()
    url = server.url(f"crash_{uuid.uuid4().hex[:8]}")
    app = build_app(url)
    try:
        # 80 x 0.8 s over 8 slots: about 8 s of work, so the crash below (after the first 8)
        # still finds work left on a loaded machine (0.3 s each was all done too often).
        before = [
            app.submit("fault.sleep", {"sleep": 0.8}, actor="x", tenant="t") for _ in range(80)
        ]
        env = {"FAULT_MARKER_DIR": str(markers)}
        for label in "ABCD":
            fleet.start(url, label, concurrency=2, lease=3.0, poll=0.2, env=env)
        wait_for(
            lambda: statuses(app, before)["completed"] >= 8,
            60,
            "workers to complete some operations",
            lambda: str(statuses(app, before)),
        )
        server.stop("immediate")
        crashed_at = datetime.now(UTC)
        try:
            stopped = time.monotonic()
            with pytest.raises(BlackOpsError) as refused:
                app.submit("fault.sleep", {}, actor="x", tenant="t")
            assert refused.value.code == "backend_unavailable"
            refused_after = time.monotonic() - stopped
            assert all(w.process.poll() is None for w in fleet.workers), "a worker died"
        finally:
            server.start()

        def reads_again() -> bool:
            try:
                app.status(before[0])
            except BlackOpsError as error:
                if error.code != "backend_unavailable":
                    raise
                return False
            return True

        recovered = wait_for(reads_again, 60, "the application to read from the store again")
        after = [
            app.submit("fault.sleep", {"sleep": 0.05}, actor="x", tenant="t") for _ in range(20)
        ]
        accepted = before + after
        wait_for(
            lambda: statuses(app, accepted)["completed"] == len(accepted),
            120,
            "every accepted operation to complete after the restart",
            lambda: f"{statuses(app, accepted)}\n{describe(app, accepted)}",
            interval=0.25,
        )
        assert all(w.process.poll() is None for w in fleet.workers), "a worker died"
        streams = check_journal(app, accepted)
        # Nothing else was recorded: the refused submit left no trace.
        assert lifecycle_streams(streams) == set(accepted)
        unfinished = sum(instant(streams[i][-1].at) > crashed_at for i in before)
        assert unfinished > 0, "the crash came too late: nothing was left to do"
        lost = sum(types_of(streams[i]).count("attempt.claim_lost") for i in accepted)
        reruns = sum(
            len([m for m in marker_files(markers, i) if m.endswith(".start")]) - 1 for i in accepted
        )
        dropped = sum(w.output().count("attempt end not recorded") for w in fleet.workers)
        print(
            f"\n'attempt end not recorded' warnings in worker logs: {dropped}; "
            f"submit refused {refused_after:.1f}s into the outage; reads failed for "
            f"{recovered:.1f}s after the restart; {unfinished} of {len(before)} finished after "
            f"the crash; claims lost {lost}; handler re-runs {reruns}"
        )
        fleet.stop_gracefully()
    finally:
        app.close()


# -- 6. volume -----------------------------------------------------------------------------------


@pytest.mark.faults
@pytest.mark.postgres
def test_ten_thousand_operations_four_workers_twenty_percent_failures(
    postgres_url: str, fleet: Fleet
) -> None:
    """OL-4, OL-5, OL-7, OL-8: 10,000 operations, 4 worker processes, ~20% retryable failures.

    Failures are a deterministic function of (operation, attempt), so the test knows
    what each operation must come to: ``attempt.failed`` exactly for the failing
    attempts, completed at the first attempt that does not fail, ``dead_letter``
    after 4 failures. Every operation ends, none completes twice, and the counts by
    status add up to 10,000.
    """
    total, rate = 10_000, 0.2
    app = build_app(postgres_url)
    try:
        # The backlog first, then the workers. Submitting into four running workers was
        # measured ~3-4x slower on two cores: each accepted operation wakes every worker
        # (NOTIFY), ~21 transactions per operation instead of ~4 with one worker.
        started = time.monotonic()
        ids = [app.submit("fault.flaky", {"n": n}, actor="x", tenant="t") for n in range(total)]
        submitted = time.monotonic() - started
        env = {"FAULT_FAIL_RATE": str(rate)}
        workers = [
            WorkerProcess(postgres_url, label, fleet.folder, concurrency=8, lease=10.0, env=env)
            for label in "ABCD"
        ]
        fleet.workers.extend(workers)
        for worker in workers:
            worker.wait_ready()
        draining = time.monotonic()

        ended: dict[str, str] = {}
        position = 0

        def all_ended() -> bool:
            nonlocal position
            while events := app.store.read_after(position, 10_000):
                position = events[-1].position
                for event in events:
                    if event.type in TERMINAL:
                        assert event.stream not in ended, f"{event.stream} ended twice"
                        ended[event.stream] = event.type
            return len(ended) == total

        wait_for(
            all_ended,
            240,
            f"{total} operations to end",
            lambda: f"{len(ended)} ended: {Counter(ended.values())}",
            interval=0.5,
        )
        drained = time.monotonic() - draining
        streams = check_journal(app, ids)
        assert lifecycle_streams(streams) == set(ids)

        counts: Counter[str] = Counter()
        attempts: Counter[int] = Counter()
        claim_losses = 0
        for operation_id in ids:
            events = streams[operation_id]
            where = f"{operation_id}: {types_of(events)}"
            endings = {
                e.data["attempt"]: e.type
                for e in events
                if e.type
                in (
                    "attempt.failed",
                    "attempt.claim_lost",
                    "attempt.interrupted",
                    "attempt.finalizing",
                )
            }
            for attempt, ending in endings.items():
                if ending == "attempt.failed":
                    assert fails(operation_id, attempt, rate), f"failed without a fault: {where}"
                elif ending == "attempt.finalizing":
                    assert not fails(operation_id, attempt, rate), f"a fault completed: {where}"
            claim_losses += types_of(events).count("attempt.claim_lost")
            failures = types_of(events).count("attempt.failed")
            last = events[-1]
            if last.type == "operation.completed":
                counts["completed"] += 1
                assert failures < FLAKY_MAX_ATTEMPTS, where
            else:
                assert last.type == "operation.dead_lettered", where
                assert failures == FLAKY_MAX_ATTEMPTS, where
                counts["dead_letter"] += 1
            attempts[len(endings)] += 1
        assert sum(counts.values()) == total
        # The public status agrees with the journal (every dead letter, a sample of the rest).
        dead = [i for i in ids if streams[i][-1].type == "operation.dead_lettered"]
        assert statuses(app, dead) == {"dead_letter": len(dead)}
        sample = ids[::50]
        assert statuses(app, sample) == Counter(
            "completed" if streams[i][-1].type == "operation.completed" else "dead_letter"
            for i in sample
        )
        expected_dead = sum(
            all(fails(i, k, rate) for k in range(1, FLAKY_MAX_ATTEMPTS + 1)) for i in ids
        )
        if claim_losses == 0:  # attempt numbers are then exactly the handler's calls
            assert counts["dead_letter"] == expected_dead
        print(
            f"\n{total} operations submitted in {submitted:.1f}s, worked off by 4 workers "
            f"in {drained:.1f}s: {dict(counts)}; attempts per operation "
            f"{dict(sorted(attempts.items()))}; claims lost {claim_losses}"
        )
        fleet.stop_gracefully()
    finally:
        app.close()


# -- a worker turn that failed while the store was down ------------------------------------------


@pytest.mark.faults
@pytest.mark.parametrize("failing", ["append", "reserve_due_streams"])
def test_an_attempt_end_kept_after_a_failed_turn_is_committed_by_the_next(
    fault_app: Application, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    """OL-8: a worker keeps the endings of a turn that met ``backend_unavailable`` and
    commits them on its next turn while the leases are still its own (blackops/worker.py
    ``_turn``: "Kept: retried on the next turn"), on the engine call the worker makes,
    ``cycle(endings, claim_limit)``, with the store failing once: the group append, or
    the reservation read before it. (Found by this test: the end used to be recorded a
    second time on the advanced aggregate and dropped, so the handler ran again after
    a claim loss.)
    """
    operation_id = fault_app.submit("fault.sleep", {}, actor="x", tenant="t")
    engine = fault_app.engine("w1", lease_seconds=30)
    [attempt] = engine.claim(1)
    ending = engine.execute(attempt)
    fault_app.submit("fault.sleep", {}, actor="x", tenant="t")  # the turn also claims
    store = fault_app.store
    working = getattr(store, failing)

    def unavailable(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(store, failing, working)  # down for this one call only
        raise BackendUnavailable("injected: the store cannot be reached")

    monkeypatch.setattr(store, failing, unavailable)
    with pytest.raises(BackendUnavailable):
        engine.cycle([ending], 1)
    committed = engine.cycle([ending], 0).committed
    assert committed == [ending], "the kept attempt end was dropped by the retry"
    assert fault_app.status(operation_id)["status"] == "completed"
