"""Disconnects never skip or reorder a line: a consumer of ``GET /v1/journal/stream`` on a
real ``blackops serve`` (uvicorn) drops its connection at random byte offsets (mid-event
included) while writers append, reconnects with ``Last-Event-ID``, many times; at the end
its lines are the export's lines exactly: same bytes, same order, no duplicates, no gaps.
On SQLite and PostgreSQL.

Two writers: one through the server's HTTP API (Inline runs, and Deferred submits that the
server's in-process worker completes: commits the server's append listener announces), one
in this test process, straight into the store (commits only the server's poller sees).
"""

from __future__ import annotations

import contextlib
import random
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cli_processes import BLACKOPS, ROOT
from served import Served, blackops_serve

from blackops import Application, ExecutionContext
from blackops.client.sse import SSEDecoder

ROUNDS = 60  # drops at least; then more, until the thresholds below are met
DEADLINE_SECONDS = 60  # for those thresholds: a slow machine takes longer, not fewer


@pytest.fixture
def server(store_url: str, tmp_path: Path) -> Iterator[Served]:
    with blackops_serve(store_url, tmp_path / "home", heartbeat_seconds=0.2) as served:
        yield served


def http_writer(server: Served, stop: threading.Event, done: list[int], written: list[int]) -> None:
    headers = {"Authorization": f"Bearer {server.admin_token}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
        n = 0
        while not stop.is_set():
            path = "/v1/spaces/default/operations/greeting.say"
            if n % 3 == 0:
                answer = client.post(path, json={"n": n}, headers={"Prefer": "respond-async"})
                assert answer.status_code == 202, answer.text
            else:
                answer = client.post(path, json={"n": n, "odd": "a\u2028b"})
                assert answer.status_code == 200, answer.text
            n += 1
            written[0] = n
            time.sleep(0.01)
        done.append(n)


def store_writer(store: str, stop: threading.Event, done: list[int], written: list[int]) -> None:
    app = Application(store)

    @app.operation("t.direct")
    def direct(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        return params

    try:
        n = 0
        while not stop.is_set():
            app.run("t.direct", {"n": n}, actor="writer", tenant="default")
            n += 1
            written[1] = n
            time.sleep(0.02)
        done.append(n)
    finally:
        app.close()


def test_random_drops_while_writers_append_lose_and_repeat_nothing(
    server: Served, store_url: str
) -> None:
    rng = random.Random(20261130)
    auth = {"Authorization": f"Bearer {server.system_token}"}
    stop = threading.Event()
    done: list[int] = []
    written = [0, 0]  # how many each writer has written so far
    writers = [
        threading.Thread(target=http_writer, args=(server, stop, done, written)),
        threading.Thread(target=store_writer, args=(store_url, stop, done, written)),
    ]
    for writer in writers:
        writer.start()
    received: list[tuple[int, bytes]] = []
    last = 0
    cut_mid_event = 0
    rounds = 0
    deadline = time.monotonic() + DEADLINE_SECONDS

    def enough() -> bool:
        return min(written) > 10 and len(received) > 200 and cut_mid_event >= 5

    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            while rounds < ROUNDS or (
                not enough()
                and time.monotonic() < deadline
                and all(writer.is_alive() for writer in writers)
            ):
                rounds += 1
                budget = rng.choice([0, rng.randint(1, 300), rng.randint(300, 20_000)])
                headers = {**auth, "Last-Event-ID": str(last)}
                with client.stream("GET", "/v1/journal/stream", headers=headers) as response:
                    assert response.status_code == 200
                    decoder, taken = SSEDecoder(), 0
                    if budget:
                        for chunk in response.iter_raw(rng.choice([1, 7, 64, 4096])):
                            piece = chunk[: budget - taken]
                            taken += len(piece)
                            for event in decoder.feed(piece):
                                assert event.id is not None
                                received.append((int(event.id), event.data + b"\n"))
                                last = int(event.id)
                            if taken >= budget:
                                break
                    cut_mid_event += decoder.partial
                # Leaving the block closes the connection, mid-event or not.
                time.sleep(rng.choice([0, 0, 0.05, 0.3]))
    finally:
        stop.set()
        for writer in writers:
            writer.join(timeout=60)
    assert len(done) == 2 and min(done) > 10, (done, rounds)  # both writers really wrote

    # Catch up on what was committed after the last drop, without dropping.
    final = subprocess.run(
        [*BLACKOPS, "journal", "export", "--no-manifest", "--store", server.store],
        cwd=ROOT, capture_output=True, timeout=120,
    )  # fmt: skip
    assert final.returncode == 0, final.stderr
    exported = final.stdout.splitlines(keepends=True)
    end = int(exported[-1].split(b'"position":')[1].split(b",")[0])
    with httpx.Client(base_url=server.url, timeout=60) as client:
        headers = {**auth, "Last-Event-ID": str(last)}
        with client.stream("GET", "/v1/journal/stream?max_seconds=60", headers=headers) as tail:
            decoder = SSEDecoder()
            for chunk in tail.iter_raw():
                for event in decoder.feed(chunk):
                    if int(event.id or 0) > end:  # committed after the export (a checkpoint)
                        break
                    received.append((int(event.id or 0), event.data + b"\n"))
                    last = int(event.id or 0)
                if last >= end:
                    break

    positions = [position for position, _ in received]
    assert positions == sorted(set(positions)), "a line came twice or out of order"
    assert [line for _, line in received] == exported  # the same bytes, the same order
    assert len(received) > 200, rounds
    # The drops really cut events in half, not only between them.
    assert cut_mid_event >= 5, rounds


def test_serve_stops_on_sigterm_while_a_stream_is_open(tmp_path: Path) -> None:
    """An open live stream never ends by itself; SIGTERM must still stop the server within
    its grace (found by a defect hunt: it waited for the follower to hang up, for ever)."""
    home = tmp_path / "home"
    store = f"sqlite:///{tmp_path}/journal.db"
    with blackops_serve(store, home, extra=["--grace-seconds", "2"]) as served:
        opened = threading.Event()

        def follow() -> None:
            auth = {"Authorization": f"Bearer {served.system_token}"}
            with (
                contextlib.suppress(httpx.HTTPError),
                httpx.stream(
                    "GET", f"{served.url}/v1/journal/stream", headers=auth, timeout=120
                ) as response,
            ):
                opened.set()
                for _ in response.iter_bytes():
                    pass

        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        assert opened.wait(30)
        started = time.monotonic()
        served.process.terminate()
        served.process.wait(timeout=60)  # hung for ever before; a grace of 2 s now
        assert time.monotonic() - started < 30
        follower.join(30)
        assert not follower.is_alive()  # its connection was closed
