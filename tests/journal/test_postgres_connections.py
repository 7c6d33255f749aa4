"""PostgreSQL appends send COMMIT in their pipeline, and the pool pings a connection only
when its idle socket has something to read (decisions F30, F31): a refused append leaves
no transaction open, and a connection the server closed is replaced, not lent."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import psycopg_pool
import pytest
from conftest import POSTGRES_URL, postgres_schema_url  # type: ignore[import-not-found, unused-ignore]
from psycopg.pq import TransactionStatus

from domain.errors import FencingError
from domain.events import NewEvent
from journal.store import Append, EventStore

pytestmark = pytest.mark.postgres


def ev(n: int) -> NewEvent:
    return NewEvent(type="test.happened", at="2026-01-01T00:00:00Z", context={}, data={"n": n})


@pytest.fixture
def store() -> Iterator[EventStore]:
    for url in postgres_schema_url():
        # One pooled connection: every call below is lent the same one, when it lives.
        with EventStore(url + "&pool_size=1") as opened:
            yield opened


def datastore(store: EventStore) -> Any:
    return store._recorder.datastore  # type: ignore[attr-defined]


def lent_backend(store: EventStore) -> tuple[int, TransactionStatus]:
    with datastore(store).get_connection() as conn:
        return int(conn.info.backend_pid), conn.info.transaction_status


def terminate(pids: list[int]) -> None:
    """End these backends, as an operator or a failover does, and wait until they are gone
    (termination is asynchronous)."""
    with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
        for pid in pids:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        live = "SELECT 1 FROM pg_stat_activity WHERE pid = ANY(%s)"
        while admin.execute(live, (pids,)).fetchone():
            pass


def test_a_refused_append_leaves_no_transaction_open(store: EventStore) -> None:
    store.append(Append("s", 0, [ev(1)]))
    with pytest.raises(FencingError):
        store.append(Append("s", 0, [ev(2)]))  # stale: the key refuses it
    with pytest.raises(FencingError):
        store.append(Append("t", 3, [ev(3)]))  # a gap: the check divides by zero
    assert lent_backend(store)[1] is TransactionStatus.IDLE
    [[position]] = store.append(Append("s", 1, [ev(4)]))
    assert [e.position for e in store.read_stream("s")][-1] == position
    assert [e.data["n"] for e in store.read_stream("s")] == [1, 4]
    assert store.read_stream("t") == []


def test_a_connection_the_server_closed_is_replaced(store: EventStore) -> None:
    store.append(Append("s", 0, [ev(1)]))
    pids = [conn.info.backend_pid for conn in datastore(store).pool._pool]  # the idle ones
    assert pids
    terminate(pids)
    # A read with no retry of its own: the pool must not lend the dead connection.
    assert store.next_due(["test.happened"]) is None
    [[position]] = store.append(Append("s", 1, [ev(2)]))
    assert [e.position for e in store.read_stream("s")][-1] == position
    assert lent_backend(store)[0] not in pids


def test_dead_idle_connections_are_passed_over_without_waiting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every idle connection terminated at once (a burst of pg_terminate_backend, a
    failover): the pool's own check loop slept 1 s, 2 s, 4 s... before each next one, so
    every caller stalled for seconds, or waited out its timeout, with the database up
    (found by a fault hunt, stop 37). Each dead one is passed over at once now; the pool
    never sleeps in its check loop."""
    import psycopg_pool.pool

    slept: list[float] = []
    monkeypatch.setattr(psycopg_pool.pool, "sleep", slept.append)
    for url in postgres_schema_url():
        with EventStore(url + "&pool_size=4") as store:
            pool = datastore(store).pool
            pool.wait(10)  # its connections open and idle
            pids = [conn.info.backend_pid for conn in pool._pool]
            assert len(pids) >= 2
            terminate(pids)
            [[position]] = store.append(Append("s", 0, [ev(1)]))
            assert [e.position for e in store.read_stream("s")] == [position]
            assert lent_backend(store)[0] not in pids
    assert slept == []


def settings(store: EventStore) -> tuple[str, str, str, TransactionStatus]:
    """The lent connection's session values of the settings appends and reservations
    change for their own transaction only."""
    with datastore(store).get_connection() as conn:
        names = ("synchronous_commit", "lock_timeout", "idle_in_transaction_session_timeout")
        shown = [conn.execute("SELECT current_setting(%s) AS v", (n,)).fetchone() for n in names]
        values = [str(row["v"]) for row in shown if row is not None]  # dict rows
        return values[0], values[1], values[2], conn.info.transaction_status


def test_appends_and_reservations_set_their_limits_for_their_own_transaction(
    store: EventStore,
) -> None:
    before = settings(store)
    created = NewEvent(
        type="workflow.created",
        at="2026-01-01T00:00:00Z",
        context={"tenant": "acme"},
        data={"workflow": "wf-1"},
    )
    store.append(Append("wf-a", 0, [created]), Append("s", 0, [ev(1)]))
    store.append(Append("s", 1, [ev(2)]))
    assert settings(store) == before  # set_config(..., true) is SET LOCAL
    now, hold = 2_000_000_000_000_000, 2_000_000_005_000_000
    reserved = store.reserve_due_tails(now, hold, "w1", ["workflow:wf-1"], 5)
    assert list(reserved) == ["wf-a"]
    assert settings(store) == before and before[3] is TransactionStatus.IDLE
    # The pipelined reservation committed: the row is held, another worker finds nothing.
    assert store.reserve_due_tails(now, hold, "w2", ["workflow:wf-1"], 5) == {}
    assert [(r.operation_id, r.worker, r.due_at) for r in store.work_rows()] == [
        ("wf-a", "w1", hold)
    ]
    store.write_snapshot("wf-a", 1, "digest", b"{}")  # pipelined: BEGIN, SET LOCAL, write
    assert settings(store) == before
    recorder: Any = store._recorder
    assert recorder.select_tails(["wf-a"])["wf-a"].snapshot is not None
    assert store.renew_leases([("wf-a", 0)], "w1", now, hold + 1) == ["wf-a"]
    assert settings(store) == before


def test_a_reservation_commits_without_waiting_for_the_flush(store: EventStore) -> None:
    """The reservation function sets ``synchronous_commit`` off for its own transaction
    (seen here inside a transaction opened around the call, then rolled back)."""
    created = NewEvent(
        type="workflow.created",
        at="2026-01-01T00:00:00Z",
        context={"tenant": "acme"},
        data={"workflow": "wf-1"},
    )
    store.append(Append("wf-a", 0, [created]))
    recorder: Any = store._recorder
    now, hold = 2_000_000_000_000_000, 2_000_000_005_000_000
    with datastore(store).get_connection() as conn, conn.transaction(force_rollback=True):
        rows = conn.execute(
            recorder._reserve_tails, (hold, "w1", now, ["workflow:wf-1"], 5)
        ).fetchall()
        assert [row["event_stream"] for row in rows] == ["wf-a"]
        shown = conn.execute("SELECT current_setting('synchronous_commit') AS v").fetchone()
        assert shown is not None and shown["v"] == "off"
    assert settings(store)[0] == "on"
    assert [r.worker for r in store.work_rows()] == [None]  # rolled back


def test_the_first_request_after_an_outage_connects_at_once() -> None:
    """The pool retried a failed connection 1, 2, 4, 8... s apart for 5 minutes, and a
    waiting caller could not start another try: after a 9 s outage the next try came at
    15 s, so a request right after the server was back still failed (a 90 s outage kept
    the service down 30 s more: found by a fault hunt, stop 37). The pool gives up after a
    few seconds now, and the next request tries at once."""
    from domain.errors import BackendUnavailable
    from journal.backend_postgres import RECONNECT_GIVE_UP_SECONDS

    for url in postgres_schema_url():
        with EventStore(url + "&pool_size=2&connect_timeout=2") as store:
            store.append(Append("s", 0, [ev(1)]))
            pool = datastore(store).pool
            pids = [conn.info.backend_pid for conn in pool._pool]
            port = pool.kwargs["port"]
            pool.kwargs["port"] = _closed_port()  # the server is gone...
            terminate(pids)
            outage = time.monotonic()
            with pytest.raises(BackendUnavailable):
                store.read_stream("s")
            time.sleep(max(0.0, outage + RECONNECT_GIVE_UP_SECONDS + 4 - time.monotonic()))
            pool.kwargs["port"] = port  # ...and back
            assert [e.data["n"] for e in store.read_stream("s")] == [1]


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # nothing listens once it is closed


def test_connections_that_die_at_once_are_not_replaced_as_fast_as_they_can_be(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Dead connections are passed over at once, but when fresh ones die too (a proxy before
    a broken server) the caller pauses, as the pool's own loop did: it reconnected 120-220
    times a second (found by review, stop 37)."""
    import journal.backend_postgres as backend

    lent: list[object] = []

    def dead(conn: Any) -> None:
        lent.append(conn)
        conn.close()
        raise psycopg.OperationalError("died at once")

    for url in postgres_schema_url():
        with EventStore(url + "&pool_size=2") as store:
            pool = datastore(store).pool
            monkeypatch.setattr(backend, "check_lent_connection", dead)
            with pytest.raises(psycopg_pool.PoolTimeout):
                pool.getconn(timeout=2.0)
            # max_size passed over at once, then pauses of 0.5, 1 s... within the 2 s.
            assert pool.max_size < len(lent) <= pool.max_size + 4, len(lent)


def test_a_connection_on_a_descriptor_past_1023_is_lent() -> None:
    """The check looked at the idle socket with select(), which refuses a descriptor of 1024
    or more: in a process with that many open (a server with many live streams) every
    healthy connection failed its check, and the store was unreachable (found by review,
    stop 37)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2048:
        pytest.skip(f"this process may open only {hard} descriptors")
    resource.setrlimit(resource.RLIMIT_NOFILE, (2048, hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        for url in postgres_schema_url():
            with EventStore(url + "&pool_size=1") as store:
                [[position]] = store.append(Append("s", 0, [ev(1)]))
                assert lent_backend(store)[0] > 0
                assert [e.position for e in store.read_stream("s")] == [position]
    finally:
        for descriptor in held:
            os.close(descriptor)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
