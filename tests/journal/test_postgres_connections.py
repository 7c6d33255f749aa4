"""PostgreSQL appends send COMMIT in their pipeline, and the pool pings a connection only
when its idle socket has something to read (decisions F30, F31): a refused append leaves
no transaction open, and a connection the server closed is replaced, not lent."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
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
    with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
        for pid in pids:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        # Wait until the server has ended them (termination is asynchronous).
        live = "SELECT 1 FROM pg_stat_activity WHERE pid = ANY(%s)"
        while admin.execute(live, (pids,)).fetchone():
            pass
    # A read with no retry of its own: the pool must not lend the dead connection.
    assert store.next_due(["test.happened"]) is None
    [[position]] = store.append(Append("s", 1, [ev(2)]))
    assert [e.position for e in store.read_stream("s")][-1] == position
    assert lent_backend(store)[0] not in pids
