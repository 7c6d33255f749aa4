"""Open journal streams cannot make another tenant's requests slower (found by a defect
hunt: 800 idle streams of one Space took another Space's Inline runs from 21 ms to 619 ms).

A commit is read once per server, however many streams are open (a shared tail hands the
lines out; every stream used to read a page of its own per commit); one principal may have
``max_streams`` streams open, and the next is refused ``resource_busy`` before any read; a
stream's own reads never take a thread of the API's pool. Structure, not time: reads are
counted through the store, threads through the pool's limiter.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio.to_thread
import pytest
from fastapi.testclient import TestClient

from blackops import Application, ExecutionContext, ResourceBusy
from blackops.client import Client
from blackops.client.sse import SSEDecoder
from blackops.http import stream
from blackops.http.app import StreamSettings, create_http_app
from domain.access import Role
from replay.export import observed_lines

SYSTEM = "systok"
STREAMS = 8


@pytest.fixture
def served(app: Application) -> Iterator[TestClient]:
    @app.operation("t.echo")
    def echo(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        return params

    context = app.access_context({"id": "root", "kind": "system"}, "acme")
    for space in ("acme", "globex"):
        app.access.create_space(space, context)
    # Heartbeats far apart: no access re-checks or keep-alives in the counts.
    cap = {"max_streams": STREAMS} if hasattr(StreamSettings, "max_streams") else {}  # old: none
    settings = StreamSettings(heartbeat_seconds=60, poll_seconds=0.05, **cap)
    with TestClient(create_http_app(app, SYSTEM, stream_settings=settings)) as client:
        yield client


def auth(token: str = SYSTEM) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def reader_token(app: Application, name: str, space: str) -> str:
    context = app.access_context({"id": "root", "kind": "system"}, space)
    app.access.create_principal(name, context)
    app.access.grant(name, space, Role.READER, context)
    token, _ = app.access.issue_token(name, context, space=space)
    return token


def run_some(app: Application, count: int, tenant: str) -> None:
    for n in range(count):
        app.run("t.echo", {"n": n}, actor="ana", tenant=tenant)


def open_streams(served: TestClient) -> int:
    """Streams subscribed to the app's wake-ups now (a set before, a map by Space now)."""
    state = getattr(served.app.state, "blackops_stream", None)  # type: ignore[attr-defined]
    waiters = getattr(state, "_waiters", None) or {}
    if isinstance(waiters, dict):
        return sum(len(some) for some in waiters.values())
    return len(waiters)


def stream_path(route: str, after: int, limit: int, seconds: float) -> str:
    return f"{route}?after={after}&limit={limit}&max_seconds={seconds}"


def wait_for(condition: Callable[[], bool], what: str, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


class CountedReads:
    """Journal reads the streams make (``observed_lines`` as blackops/http/stream.py calls
    it, old code and new), counted per call; with ``hold`` set, each waits for it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        self.hold: threading.Event | None = None
        self.held = threading.Event()
        read = observed_lines  # what stream.py imports

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if self.hold is not None:
                self.held.set()
                self.hold.wait(30)
            return read(*args, **kwargs)

        monkeypatch.setattr(stream, "observed_lines", counted)

    def settled(self) -> int:
        """The count once it has not moved for 0.5 s (the streams have done their reads)."""
        last, since = -1, time.monotonic()
        while time.monotonic() - since < 0.5:
            if self.calls != last:
                last, since = self.calls, time.monotonic()
            time.sleep(0.02)
        return last


def in_threads(count: int, request: Callable[[], Any]) -> tuple[list[threading.Thread], list[Any]]:
    answers: list[Any] = []

    def one() -> None:
        try:
            answers.append(request())
        except BaseException as error:  # shown by the assertions on answers
            answers.append(error)

    threads = [threading.Thread(target=one) for _ in range(count)]
    for thread in threads:
        thread.start()
    return threads, answers


def test_a_commit_is_read_once_however_many_idle_streams_of_another_space_are_open(
    served: TestClient, app: Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another tenant's idle streams take no read and no wake-up of a commit of default's:
    they used to read a page each, on every commit."""
    run_some(app, 1, "acme")
    token = reader_token(app, "rita", "acme")  # journals lines of acme's
    head = app.store.last_position()
    reads = CountedReads(monkeypatch)
    path = stream_path("/v1/spaces/acme/journal/stream", head, 1, 60)
    threads, answers = in_threads(STREAMS, lambda: served.get(path, headers=auth(token)))
    try:
        wait_for(lambda: open_streams(served) == STREAMS, "the streams open")
        before = reads.settled()
        commits = 0

        def counted_commit() -> None:
            nonlocal commits
            commits += 1

        app.store.add_append_listener(counted_commit)
        run_some(app, 3, "default")
        wait_for(lambda: reads.calls > before, "the commits are read")
        read = reads.settled() - before
        # Once per commit (a poll that sees it before its wake-up adds one empty read);
        # was once per open stream.
        assert 1 <= read <= 2 * commits < STREAMS * commits, (read, commits)
    finally:
        run_some(app, 1, "acme")  # the line each stream waits for: they end
        for thread in threads:
            thread.join()
    acme = [line for _, line in observed_lines(app.store, head) if b'"tenant":"acme"' in line]
    for answer in answers:
        assert answer.status_code == 200
        events = list(SSEDecoder().feed(answer.content))
        assert [e.data + b"\n" for e in events] == acme[:1]


def test_streams_of_the_whole_journal_share_each_read_and_get_every_line(
    served: TestClient, app: Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_some(app, 1, "acme")
    head = app.store.last_position()
    run_some(app, 1, "globex")
    per_run = len(list(observed_lines(app.store, head)))  # lines one run commits
    run_some(app, 1, "acme")
    before = list(observed_lines(app.store, head))
    reads = CountedReads(monkeypatch)
    commits = 0

    def counted_commit() -> None:
        nonlocal commits
        commits += 1

    app.store.add_append_listener(counted_commit)
    # The streams start behind the tail's window (each reads for itself up to it), then
    # wait for the lines of a run committed while they are open.
    path = stream_path("/v1/journal/stream", head, len(before) + per_run, 60)
    threads, answers = in_threads(STREAMS, lambda: served.get(path, headers=auth()))
    wait_for(lambda: open_streams(served) == STREAMS, "the streams open")
    caught_up = reads.settled()
    run_some(app, 1, "globex")
    for thread in threads:
        thread.join()
    read = reads.calls - caught_up
    assert 1 <= read <= 2 * commits < STREAMS * commits, (read, commits)  # as above
    expected = list(observed_lines(app.store, head))
    assert len(expected) == len(before) + per_run
    for answer in answers:
        assert answer.status_code == 200
        events = list(SSEDecoder().feed(answer.content))
        assert [(int(e.id or 0), e.data + b"\n") for e in events] == expected


def test_one_stream_more_than_max_streams_is_refused_and_a_closed_one_frees_its_place(
    served: TestClient, app: Application
) -> None:
    run_some(app, 1, "acme")
    token = reader_token(app, "rita", "acme")  # journals lines of acme's
    head = app.store.last_position()
    route = "/v1/spaces/acme/journal/stream"
    path, short = stream_path(route, head, 1, 60), stream_path(route, head, 1, 0.2)
    threads, answers = in_threads(STREAMS, lambda: served.get(path, headers=auth(token)))
    try:
        wait_for(lambda: open_streams(served) == STREAMS, "the streams open")
        refused = served.get(short, headers=auth(token))
        assert refused.status_code == 409, refused.text
        assert refused.headers["content-type"] == "application/json"
        assert refused.json()["error"]["code"] == "resource_busy"
        assert "close one" in refused.json()["error"]["message"]
        # The client raises it as the class its code names, without reconnecting.
        # (Not closed: closing it would close the TestClient's transport under the streams.)
        reader = Client("http://testserver", token, transport=served._transport)
        with pytest.raises(ResourceBusy):
            list(reader.stream(head, space="acme", max_seconds=5))
        # Another principal is not refused: the cap is per principal.
        other = served.get(short, headers=auth())
        assert other.status_code == 200
    finally:
        run_some(app, 1, "acme")  # the line each stream waits for: they end
        for thread in threads:
            thread.join()
    assert [answer.status_code for answer in answers] == [200] * STREAMS
    wait_for(lambda: open_streams(served) == 0, "the streams close")
    again = served.get(short, headers=auth(token))
    assert again.status_code == 200, again.text


def test_a_held_stream_read_takes_no_thread_of_the_api_pool(
    served: TestClient, app: Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_some(app, 3, "acme")
    reads = CountedReads(monkeypatch)
    reads.hold = threading.Event()
    threads, answers = in_threads(
        1, lambda: served.get("/v1/journal/stream?limit=1&max_seconds=30", headers=auth())
    )
    try:
        assert reads.held.wait(20)

        async def borrowed() -> float:
            return anyio.to_thread.current_default_thread_limiter().borrowed_tokens

        assert served.portal is not None
        assert served.portal.call(borrowed) == 0
    finally:
        reads.hold.set()
        for thread in threads:
            thread.join()
    assert answers[0].status_code == 200
