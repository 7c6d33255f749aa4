"""``stream(max_seconds=S)`` with S over a day: the server grants one connection at most a
day (``max_seconds`` above it is ``invalid_request``), and the client used to forward the
whole deadline, so a two-day follow failed at once. Each connection now asks for at most a
day and the next one follows when it ends, until the deadline (``reconnect=False`` too: the
client split the deadline, no connection dropped)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import httpx
import pytest
from conftest import spaces
from fastapi.testclient import TestClient
from in_time import wait_until, within

from blackops import Application
from blackops.client import AsyncClient, Client, StreamedLine
from blackops.client import client as client_module
from blackops.http import stream as server_stream
from blackops.http.app import create_http_app

TOKEN = "tok"
TWO_DAYS = 2 * 86_400.0


def test_a_connection_asks_for_what_the_server_grants() -> None:
    assert client_module.CONNECTION_SECONDS == server_stream.MAX_SECONDS


class Recording(httpx.BaseTransport):
    """Keeps each request's ``max_seconds`` and passes the request on."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner
        self.asked: list[float] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.asked.append(float(request.url.params["max_seconds"]))
        return self.inner.handle_request(request)


@pytest.fixture
def api(app: Application) -> Any:
    app.operation("t.echo")(lambda ctx, params: params)
    spaces(app, "acme")
    app.run("t.echo", {}, actor="me", tenant="acme")
    return create_http_app(app, TOKEN)


def test_a_two_day_stream_is_served_a_day_per_connection(api: Any) -> None:
    with TestClient(api) as http:
        transport = Recording(http._transport)
        with Client("http://testserver", TOKEN, transport=transport) as client:
            got = list(client.stream(limit=1, max_seconds=TWO_DAYS))
            assert [line.position for line in got] == [1]
            got = list(client.stream(limit=1, space="acme", max_seconds=TWO_DAYS))
            assert len(got) == 1
    assert transport.asked == [86_400.0, 86_400.0]
    # The server's tail thread notices its streams ended within a poll: not after the
    # fixture closed the store under it (a warning in a later test's log).
    wait_until(
        lambda: not any(t.name == "blackops-stream-tail" for t in threading.enumerate()),
        5,
        "the stream tail to stop",
    )


def test_the_async_client_asks_for_a_day_too() -> None:
    """The served app refuses more than a day (the sync test above shows it serves one);
    the async client asks the same."""
    asked: list[float] = []

    def one_line(request: httpx.Request) -> httpx.Response:
        asked.append(float(request.url.params["max_seconds"]))
        headers = {"content-type": "text/event-stream"}
        return httpx.Response(200, headers=headers, content=b"id: 7\ndata: {}\n\n")

    async def main() -> list[StreamedLine]:
        transport = httpx.MockTransport(one_line)
        async with AsyncClient("http://x", TOKEN, transport=transport) as client:
            return [line async for line in client.stream(limit=1, max_seconds=TWO_DAYS)]

    assert [line.position for line in asyncio.run(main())] == [7]
    assert asked == [86_400.0]


# -- the next connection follows when one has had its day --------------------------------------
# A "day" of 0.2 s; each answer is an empty stream that lasts what its request asked for.


@pytest.fixture
def short_days(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_module, "CONNECTION_SECONDS", 0.2)
    monkeypatch.setattr(client_module, "CONNECTION_SLACK", 0.05)


def empty_stream() -> httpx.Response:
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=b"")


def check_split(asked: list[float], took: float) -> None:
    assert asked[:3] == [0.2, 0.2, 0.2] and len(asked) == 4, asked
    assert 0 < asked[3] < 0.2
    # No retry_seconds pause between them (5 s): a connection that had its day is no drop.
    assert 0.65 < took < 2.5


@pytest.mark.parametrize("reconnect", [True, False])
def test_a_deadline_longer_than_a_day_takes_several_connections(
    short_days: None, reconnect: bool
) -> None:
    asked: list[float] = []

    def serve(request: httpx.Request) -> httpx.Response:
        asked.append(float(request.url.params["max_seconds"]))
        time.sleep(asked[-1])
        return empty_stream()

    with Client("http://x", "t", transport=httpx.MockTransport(serve)) as client:
        started = time.monotonic()
        outcome = within(
            10,
            lambda: list(client.stream(max_seconds=0.7, reconnect=reconnect, retry_seconds=5)),
        )
    assert outcome == [[]]
    check_split(asked, time.monotonic() - started)


@pytest.mark.parametrize("reconnect", [True, False])
def test_the_async_client_splits_alike(short_days: None, reconnect: bool) -> None:
    asked: list[float] = []

    async def serve(request: httpx.Request) -> httpx.Response:
        asked.append(float(request.url.params["max_seconds"]))
        await asyncio.sleep(asked[-1])
        return empty_stream()

    async def main() -> list[StreamedLine]:
        transport = httpx.MockTransport(serve)
        async with AsyncClient("http://x", "t", transport=transport) as client:
            lines = client.stream(max_seconds=0.7, reconnect=reconnect, retry_seconds=5)
            return await asyncio.wait_for(collect(lines), 10)

    started = time.monotonic()
    assert asyncio.run(main()) == []
    check_split(asked, time.monotonic() - started)


async def collect(lines: Any) -> list[StreamedLine]:
    return [line async for line in lines]


def test_a_connection_ended_before_its_day_is_not_followed_without_reconnect(
    short_days: None,
) -> None:
    asked: list[float] = []

    def closes_at_once(request: httpx.Request) -> httpx.Response:
        asked.append(float(request.url.params["max_seconds"]))
        return empty_stream()

    with Client("http://x", "t", transport=httpx.MockTransport(closes_at_once)) as client:
        assert list(client.stream(max_seconds=0.7, reconnect=False)) == []
    assert asked == [0.2]
