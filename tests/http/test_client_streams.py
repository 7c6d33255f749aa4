"""``Client.stream`` / ``AsyncClient.stream`` where a defect hunt found them running for ever
or reading wrongly: ``max_seconds`` while the server cannot be reached, a 200 that is no
event stream, the WHATWG event-stream details (id-less events, an empty ``id:``, a leading
BOM, a CR that ends a chunk) and a server that repeats what the client has seen."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from cli_processes import free_port
from in_time import within

from blackops import BackendUnavailable, BlackOpsError
from blackops.client import AsyncClient, Client, StreamedLine
from blackops.client.client import streamed_lines
from blackops.client.sse import SSEDecoder


def drained(client: Client, **options: Any) -> list[StreamedLine]:
    return list(client.stream(0, **options))


async def collected(lines: AsyncIterator[StreamedLine]) -> list[StreamedLine]:
    return [line async for line in lines]


def proxy_502(request: httpx.Request) -> httpx.Response:
    return httpx.Response(502, text="<html>Bad Gateway</html>")


# -- max_seconds while the server cannot be reached --------------------------------------------


@pytest.mark.parametrize("where", ["nothing listening", "a proxy answering 502"])
def test_max_seconds_ends_a_stream_whose_server_cannot_be_reached(where: str) -> None:
    """The backoff branch never looked at the deadline (and slept up to 30 s past it): the
    stream ran for ever. At the deadline it raises the last failure: an outage is not an
    empty journal."""
    if where == "nothing listening":
        client = Client(f"http://127.0.0.1:{free_port()}", "t")
    else:
        client = Client("http://x", "t", transport=httpx.MockTransport(proxy_502))
    started = time.monotonic()
    with client:
        # retry_seconds=2 with max_seconds=1: the first pause alone would overshoot.
        outcome = within(10, lambda: list(client.stream(0, max_seconds=1, retry_seconds=2)))
    assert outcome, "still running 10 s after max_seconds=1"
    assert isinstance(outcome[0], BackendUnavailable)
    assert time.monotonic() - started < 2.5


def test_max_seconds_ends_the_async_stream_too() -> None:
    async def scenario(client: AsyncClient) -> None:
        async with client:
            started = time.monotonic()
            with pytest.raises(BackendUnavailable):
                await asyncio.wait_for(
                    collected(client.stream(0, max_seconds=1, retry_seconds=2)), 10
                )
            assert time.monotonic() - started < 2.5

    asyncio.run(scenario(AsyncClient(f"http://127.0.0.1:{free_port()}", "t")))
    asyncio.run(scenario(AsyncClient("http://x", "t", transport=httpx.MockTransport(proxy_502))))


def test_a_stream_the_server_ends_early_ends_at_max_seconds_not_a_pause_later() -> None:
    """A server that closes each stream at once (no lines): the client reconnects after
    ``retry_seconds``, but never sleeps past the deadline, and ends normally there."""

    def empty(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=b"")

    with Client("http://x", "t", transport=httpx.MockTransport(empty)) as client:
        started = time.monotonic()
        assert list(client.stream(0, max_seconds=0.5, retry_seconds=5)) == []
        assert time.monotonic() - started < 1.5


# -- a 200 that is no event stream -------------------------------------------------------------


def test_a_200_that_is_no_event_stream_is_refused_not_reconnected_for_ever() -> None:
    """An SSO proxy's login page read as an empty stream: reconnected every second, for
    ever, silently (reconnect=False: an "empty" normal end)."""
    hits: list[int] = []

    def portal(request: httpx.Request) -> httpx.Response:
        hits.append(1)
        return httpx.Response(
            200, headers={"content-type": "text/html"}, text="<html><form>Sign in</form></html>"
        )

    for reconnect in (True, False):
        hits.clear()
        with Client("http://x", "t", transport=httpx.MockTransport(portal)) as client:
            outcome = within(5, partial(drained, client, reconnect=reconnect))
        assert outcome and isinstance(outcome[0], BlackOpsError), outcome
        assert outcome[0].code == "internal_error"
        assert "text/html" in outcome[0].message and "Sign in" in outcome[0].message
        assert hits == [1]

    async def scenario() -> None:
        async with AsyncClient("http://x", "t", transport=httpx.MockTransport(portal)) as client:
            with pytest.raises(BlackOpsError, match="text/html"):
                await asyncio.wait_for(collected(client.stream(0, retry_seconds=0.01)), 5)

    asyncio.run(scenario())


# -- the event-stream format -------------------------------------------------------------------


def line(n: int) -> bytes:
    return b'{"position":%d}' % n


def lines_of(*chunks: bytes) -> list[tuple[int, bytes]]:
    decoder, got = SSEDecoder(), []
    for chunk in chunks:
        got += [(s.position, s.line) for s in streamed_lines(decoder, chunk)]
    return got


def test_an_event_without_an_id_of_its_own_is_no_journal_line() -> None:
    """It inherited the previous event's id and was delivered as that position's line."""
    got = lines_of(
        b"id: 1\ndata: " + line(1) + b"\n\ndata: hello\n\nid: 2\ndata: " + line(2) + b"\n\n"
    )
    assert got == [(1, line(1) + b"\n"), (2, line(2) + b"\n")]


def test_an_empty_id_resets_the_id_and_is_no_position() -> None:
    """``int("")`` raised a raw ValueError that ended the stream."""
    got = lines_of(
        b"id: 1\ndata: " + line(1) + b"\n\nid:\ndata: {}\n\nid: 3\ndata: " + line(3) + b"\n\n"
    )
    assert [position for position, _ in got] == [1, 3]
    decoder = SSEDecoder()
    list(decoder.feed(b"id: 1\ndata: x\n\nid\ndata: y\n\n"))
    assert decoder.last_id == ""  # WHATWG: the last event id is reset


def test_an_id_that_is_no_position_is_refused_as_a_blackops_error() -> None:
    with pytest.raises(BlackOpsError, match="no position"):
        lines_of(b"id: abc\ndata: {}\n\n")


@pytest.mark.parametrize("split", [0, 1, 2, 3, 5])
def test_a_leading_bom_is_ignored_even_split_across_chunks(split: int) -> None:
    body = b"\xef\xbb\xbfid: 1\ndata: " + line(1) + b"\n\nid: 2\ndata: " + line(2) + b"\n\n"
    assert [p for p, _ in lines_of(body[:split], body[split:])] == [1, 2]
    # Only a leading one: a BOM later is part of a field name (an unknown field).
    assert [p for p, _ in lines_of(b"id: 1\ndata: x\n\n\xef\xbb\xbfid: 2\ndata: y\n\n")] == [1]


def test_a_cr_that_ends_a_chunk_ends_its_line_at_once() -> None:
    """The event waited for the next chunk (a keep-alive 15 s later, or never)."""
    decoder = SSEDecoder()
    assert [s.position for s in streamed_lines(decoder, b"id: 1\rdata: " + line(1) + b"\r\r")] == [
        1
    ]
    # A CR LF split by a chunk boundary is one line end, not a blank line.
    decoder = SSEDecoder()
    assert list(streamed_lines(decoder, b"id: 2\r")) == []
    assert list(streamed_lines(decoder, b"\ndata: " + line(2) + b"\r")) == []
    assert [s.position for s in streamed_lines(decoder, b"\n\r\n")] == [2]
    assert not decoder.partial


def test_a_server_that_ignores_last_event_id_repeats_nothing() -> None:
    """Each connection answers everything from the start: the client yields each position
    once, in order, skipping what came before its resume point (a duplicate inside one
    connection is passed on: `replay --follow` reports it, P51)."""
    positions = [3, 4, 9, 10]
    asked: list[str | None] = []

    class Forgetful(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.headers.get("Last-Event-ID"))
            served = positions[: 2 * len(asked)]  # one more pair each time
            body = b"".join(b'id: %d\ndata: {"p":%d}\n\n' % (p, p) for p in served)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.end_headers()
            self.wfile.write(body)
            self.close_connection = True

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Forgetful)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        with Client(f"http://127.0.0.1:{httpd.server_address[1]}", "t") as client:
            got = list(client.stream(1, limit=4, retry_seconds=0.01))
    finally:
        httpd.shutdown()
    assert [s.position for s in got] == positions
    assert asked[:2] == ["1", "4"]
