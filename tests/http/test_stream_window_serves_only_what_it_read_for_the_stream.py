"""The streams' shared tail (F168) hands a stream only lines it read while that stream was
open (found by review of F168): a stream opened later read the window's older copies, so it
sent an event changed behind the journal's back (F163: a page and an export refuse it) and
events a retention purge had deleted since. Such a stream reads the store up to the tail's
head first, as any new reader does. And a stream that opened while the tail was starting
is woken once the tail has its floor (a commit in between waited for the heartbeat)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tampering import behind_the_journals_back, position_column, q

from blackops import Application, ExecutionContext, Retention
from blackops.client.sse import SSEDecoder
from blackops.http.app import StreamSettings, create_http_app
from replay.export import observed_lines

SYSTEM = "systok"
AUTH = {"Authorization": f"Bearer {SYSTEM}"}


def with_echo(app: Application) -> Application:
    @app.operation("t.echo")
    def echo(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        return params

    return app


def serve(app: Application) -> TestClient:
    with_echo(app)
    context = app.access_context({"id": "root", "kind": "system"}, "acme")
    app.access.create_space("acme", context)
    settings = StreamSettings(heartbeat_seconds=60, poll_seconds=0.05)
    return TestClient(create_http_app(app, SYSTEM, stream_settings=settings))


def in_background(call: Callable[[], Any]) -> threading.Thread:
    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    return thread


def keeper(client: TestClient) -> threading.Thread:
    """An open stream from the journal's end: it keeps the tail and its window alive."""
    thread = in_background(
        lambda: client.get("/v1/journal/stream?after=1000000000&max_seconds=4", headers=AUTH)
    )
    time.sleep(0.5)
    return thread


def run_some(app: Application, n: int) -> None:
    for i in range(n):
        app.run("t.echo", {"n": i}, actor="ana", tenant="acme")


@pytest.mark.parametrize("path", ["/v1/journal/stream", "/v1/spaces/acme/journal/stream"])
def test_a_stream_opened_later_meets_an_event_changed_in_the_window(
    store_url: str, path: str
) -> None:
    app = Application(store_url)
    with serve(app) as client:
        run_some(app, 1)
        head = app.store.last_position()
        held = keeper(client)
        run_some(app, 3)
        time.sleep(0.5)  # the tail has read them
        positions = [at for at, _ in observed_lines(app.store, head)]
        victim = positions[len(positions) // 2]
        with behind_the_journals_back(app.store) as (conn, events, _):
            sql = f"UPDATE {events} SET state = ? WHERE {position_column(conn)} = ?"
            conn.execute(q(conn, sql), (b"{}", victim))
        answer = client.get(f"{path}?after={head}&max_seconds=2", headers=AUTH)
        held.join()
    app.close()
    sent = list(SSEDecoder().feed(answer.content))
    ids = [int(e.id) for e in sent if e.id]
    assert victim not in ids  # the window's old copy was sent, and the stream went on
    assert sent[-1].event == "error" and f"position {victim}".encode() in sent[-1].data


def test_a_stream_opened_later_never_gets_purged_events(store_url: str) -> None:
    app = Application(store_url, retention=Retention(journal_seconds=0, outcome_seconds=0))
    with serve(app) as client:
        run_some(app, 1)
        head = app.store.last_position()
        held = keeper(client)
        app.run("t.echo", {"secret": "123-45-6789"}, actor="ana", tenant="acme")
        time.sleep(0.5)  # the tail has read it
        app.purge(actor={"id": "root", "kind": "system"})
        assert not [line for _, line in observed_lines(app.store, head) if b"123-45" in line]
        answer = client.get(f"/v1/journal/stream?after={head}&max_seconds=1.5", headers=AUTH)
        held.join()
    app.close()
    assert answer.status_code == 200 and b"123-45-6789" not in answer.content


def test_a_stream_opened_while_the_tail_starts_is_woken_for_a_commit_then(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = Application(store_url)
    other = with_echo(Application(store_url))  # another process's commits: polled
    with serve(app) as client:
        run_some(app, 1)
        first = threading.Event()
        last_position = app.store.last_position

        def slow_first_look() -> int:
            if not first.is_set():  # the tail's first look: a commit lands meanwhile
                first.set()
                time.sleep(0.3)
            return last_position()

        monkeypatch.setattr(app.store, "last_position", slow_first_look)
        head = last_position()
        got: list[Any] = []
        began = time.monotonic()
        reader = in_background(
            lambda: got.append(
                client.get(
                    f"/v1/spaces/acme/journal/stream?after={head}&limit=1&max_seconds=15",
                    headers=AUTH,
                )
            )
        )
        assert first.wait(10)
        run_some(other, 1)
        reader.join()
        took = time.monotonic() - began
    other.close()
    app.close()
    assert got[0].status_code == 200 and b"id: " in got[0].content
    assert took < 10, f"the line came after {took:.1f} s: at the heartbeat or the deadline"
