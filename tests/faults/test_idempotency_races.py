"""Idempotency under real concurrency: many processes, one key, exactly one operation.

The key maps to a derived operation id, so the journal's unique constraint on
(stream, version) decides; there is no lock-then-lookup to race.
"""

from __future__ import annotations

import multiprocessing
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier

import pytest

from blackops import Application

#: Real processes and servers against real leases: run on their own, after the rest.
pytestmark = pytest.mark.faults

PROCESSES = 8


def _submit(
    store_url: str, barrier: Barrier, params: dict[str, int], results: Queue[tuple[str, str]]
) -> None:
    app = Application(store_url)
    app.operation("t.pay")(lambda ctx, p: None)
    app.store  # connect first, so the race is the submit itself  # noqa: B018
    barrier.wait(timeout=60)
    try:
        operation_id = app.submit(
            "t.pay", params, actor="a", tenant="acme", idempotency_key="order-1"
        )
        results.put(("ok", operation_id))
    except Exception as error:  # reported to the parent, which asserts on it
        results.put(("error", getattr(error, "code", repr(error))))
    finally:
        app.close()


def _race(store_url: str, params: list[dict[str, int]]) -> list[tuple[str, str]]:
    Application(store_url).close()  # create the tables once
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(len(params))
    results: Queue[tuple[str, str]] = context.Queue()
    processes = [
        context.Process(target=_submit, args=(store_url, barrier, p, results)) for p in params
    ]
    for process in processes:
        process.start()
    found = [results.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=60)
    return found


def test_one_key_from_many_processes_makes_one_operation(store_url: str) -> None:
    results = _race(store_url, [{"amount": 10}] * PROCESSES)
    assert {kind for kind, _ in results} == {"ok"}, results
    assert len({operation_id for _, operation_id in results}) == 1
    app = Application(store_url)
    try:
        received = [e for e in app.store.iter_after(0) if e.type == "operation.received"]
        assert len(received) == 1 and received[0].stream == results[0][1]
    finally:
        app.close()


def test_one_key_with_different_params_from_many_processes(store_url: str) -> None:
    """Exactly one wins; the others with other params get ``conflict``, never a second op."""
    results = _race(store_url, [{"amount": n} for n in range(PROCESSES)])
    winners = [value for kind, value in results if kind == "ok"]
    assert len(winners) == 1, results
    assert sorted(value for kind, value in results if kind == "error") == ["conflict"] * (
        PROCESSES - 1
    )
