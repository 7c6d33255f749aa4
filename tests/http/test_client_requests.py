"""What ``blackops.client`` refuses before (or instead of) a request, as the in-process API
refuses it: a local mistake (a token with a newline, a base URL without ``http://``) is
``InvalidRequest`` and never "the server cannot be reached" retried for ever; a document
that is no document is ``DocumentError(invalid_params)`` (python-contract §1: exact
built-in types, nothing converted), never converted by ``json.dumps`` nor a raw
``ValueError``; an empty id is answered as in process, without a request."""

from __future__ import annotations

import asyncio
import collections
import decimal
import json
import math
import threading
from collections.abc import Callable, Iterator
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from in_time import within

from blackops import (
    Application,
    BackendUnavailable,
    DocumentError,
    ExecutionContext,
    InvalidRequest,
    NotFound,
    UnknownInstance,
)
from blackops.cli.follow import FollowedStream
from blackops.client import AsyncClient, Client, Instance, Workflow


class Recorder:
    """A MockTransport handler that keeps every request and answers ``answer``."""

    def __init__(self, answer: Callable[[httpx.Request], httpx.Response] | None = None) -> None:
        self.requests: list[httpx.Request] = []
        self.answer = answer or (lambda request: httpx.Response(200, json={"operationId": "o"}))

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.answer(request)


@pytest.fixture
def authorization_seen() -> Iterator[tuple[str, list[str | None]]]:
    """A real HTTP/1.1 server (so httpx's h11 checks headers, as in production) that
    records each request's Authorization header and answers an operation count."""
    seen: list[str | None] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization"))
            body = b'{"counts": {}, "observedPosition": 0}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    finally:
        httpd.shutdown()


# -- 1. local mistakes are InvalidRequest, never an outage -------------------------------------


def test_a_token_read_from_a_file_is_stripped(
    authorization_seen: tuple[str, list[str | None]],
) -> None:
    """`blackops serve` writes its token files with a newline; httpx refused the header
    (LocalProtocolError), which the client reported as an unreachable server."""
    url, seen = authorization_seen
    with Client(url, "bo_secret\n") as client:
        assert client.operation_counts() == {"counts": {}, "observedPosition": 0}

    async def awaited() -> None:
        async with AsyncClient(url, "  bo_secret\r\n") as client:
            await client.operation_counts()

    asyncio.run(awaited())
    assert seen == ["Bearer bo_secret", "Bearer bo_secret"]


@pytest.mark.parametrize("token", ["bo_a\nb", "bo a", "bo_é", "bo\x00"])
def test_a_token_no_header_can_carry_is_refused_at_once_without_naming_it(token: str) -> None:
    for make in (Client, AsyncClient):
        with pytest.raises(InvalidRequest) as refused:
            make("http://127.0.0.1:9", token)
        assert refused.value.code == "invalid_request"
        assert token not in refused.value.message  # a secret is never echoed


@pytest.mark.parametrize(
    "base_url", ["127.0.0.1:8080", "localhost", "ftp://host", "http://", "http://h:port", ""]
)
def test_a_base_url_that_is_not_http_is_refused_at_construction(base_url: str) -> None:
    for make in (Client, AsyncClient):
        with pytest.raises(InvalidRequest):
            make(base_url, "t")
    Client("https://host:8443/prefix", "t").close()  # what is allowed


def test_an_error_of_the_request_itself_is_invalid_request_and_never_reconnected() -> None:
    """A LocalProtocolError or UnsupportedProtocol can never succeed: the stream raised
    nothing and retried it for ever (``except (TransportError, BackendUnavailable)``)."""
    for error in (httpx.LocalProtocolError("bad header"), httpx.UnsupportedProtocol("no")):
        attempts: list[int] = []

        def fail(
            request: httpx.Request, error: Exception = error, attempts: list[int] = attempts
        ) -> httpx.Response:
            attempts.append(1)
            raise error

        with Client("http://x", "t", transport=httpx.MockTransport(fail)) as client:
            with pytest.raises(InvalidRequest):
                client.status("op")
            outcome = within(5, partial(drained, client))
            assert outcome, "the stream retried a request that can never work"
            assert isinstance(outcome[0], InvalidRequest)
        assert len(attempts) == 2  # status once, the stream once

        async def awaited(error: Exception = error) -> None:
            async def afail(request: httpx.Request) -> httpx.Response:
                raise error

            async with AsyncClient("http://x", "t", transport=httpx.MockTransport(afail)) as ac:
                with pytest.raises(InvalidRequest):
                    await asyncio.wait_for(_drain(ac.stream(0, retry_seconds=0.01)), 5)

        asyncio.run(awaited())


def drained(client: Client) -> list[Any]:
    return list(client.stream(0, retry_seconds=0.01))


async def _drain(lines: Any) -> None:
    async for _ in lines:
        pass


def test_a_server_that_cannot_be_reached_is_still_backend_unavailable() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    with (
        Client("http://x", "t", transport=httpx.MockTransport(refuse)) as client,
        pytest.raises(BackendUnavailable),
    ):
        client.status("op")


def test_follow_strips_the_token_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BLACKOPS_TOKEN", "bo_from_a_file\n")
    assert FollowedStream("http://127.0.0.1:9", None, None, 0).token == "bo_from_a_file"
    monkeypatch.setenv("BLACKOPS_TOKEN", "\n")
    with pytest.raises(InvalidRequest, match="--token"):
        FollowedStream("http://127.0.0.1:9", None, None, 0)


# -- 2. documents: refused as in process, sent as given ------------------------------------------

NOT_DOCUMENTS: dict[str, Any] = {
    "tuple": {"t": (1, 2)},
    "int key": {"k": {1: "a"}},
    "bool key": {"k": {True: "a"}},
    "dict subclass": collections.OrderedDict(a=1),
    "NaN": {"f": math.nan},
    "infinity": {"f": -math.inf},
    "Decimal": {"d": decimal.Decimal("1.5")},
    "lone surrogate": {"s": "x\ud800"},
    "unsafe integer": {"n": 2**53},
    "bytes": {"b": b"x"},
    "a list root": [1],
}


@pytest.fixture(scope="module")
def in_process() -> Iterator[Application]:
    app = Application("memory://")

    @app.operation("echo.it")
    def echo(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        return {"got": params}

    yield app
    app.close()


@pytest.mark.parametrize("name", list(NOT_DOCUMENTS))
def test_a_document_the_in_process_api_refuses_is_refused_alike_and_not_sent(
    name: str, in_process: Application
) -> None:
    params = NOT_DOCUMENTS[name]
    with pytest.raises(DocumentError) as here:
        in_process.run("echo.it", params, actor="me", tenant="default")
    recorder = Recorder()
    with Client("http://x", "t", transport=httpx.MockTransport(recorder)) as client:
        calls: list[Callable[[], object]] = [
            lambda: client.run("t", params),
            lambda: client.submit("t", params),
            lambda: client.workflow("W").create(params=params),
            lambda: client.workflow("W").create(id="i", params=params),
        ]
        for call in calls:
            with pytest.raises(DocumentError) as there:
                call()
            assert (there.value.code, there.value.message) == (here.value.code, here.value.message)
    assert recorder.requests == []


def test_an_event_payload_is_checked_too(in_process: Application) -> None:
    recorder = Recorder(lambda request: httpx.Response(200, json={"sequence": 1}))
    with Client("http://x", "t", transport=httpx.MockTransport(recorder)) as client:
        instance = Instance(Workflow(client, "default", "W"), "i")
        with pytest.raises(DocumentError) as refused:
            instance.send_event(type="approval", payload={"by": ("ana",)})
        assert refused.value.code == "invalid_params"
        assert recorder.requests == []
        assert instance.send_event(type="approval", payload={"é": 1.0, "a": [True, None]}) == 1
    sent = recorder.requests[0]
    assert sent.headers["content-type"] == "application/json"
    # The canonical bytes (RFC 8785: sorted keys, 1.0 written as 1, UTF-8 as is).
    assert sent.content == '{"type":"approval","payload":{"a":[true,null],"é":1}}'.encode()


def test_a_valid_document_is_sent_as_its_canonical_bytes() -> None:
    recorder = Recorder()
    with Client("http://x", "t", transport=httpx.MockTransport(recorder)) as client:
        client.submit("t", {"b": 1, "a": "\u2028"}, idempotency_key="k")
        client.submit("t")
    assert [r.content for r in recorder.requests] == ['{"a":"\u2028","b":1}'.encode(), b"{}"]
    assert json.loads(recorder.requests[0].content) == {"a": "\u2028", "b": 1}


def test_a_document_too_large_is_refused_before_sending(in_process: Application) -> None:
    params = {str(n): n for n in range(1025)}
    with pytest.raises(DocumentError) as here:
        in_process.run("echo.it", params, actor="me", tenant="default")
    recorder = Recorder()
    transport = httpx.MockTransport(recorder)
    with (
        Client("http://x", "t", transport=transport) as client,
        pytest.raises(DocumentError) as there,
    ):
        client.run("t", params)
    assert there.value.code == here.value.code == "document_too_large"
    assert recorder.requests == []


@pytest.mark.parametrize(
    "send",
    [
        lambda c: c.submit("t", {}, idempotency_key="clé"),
        lambda c: c.submit("t", {}, idempotency_key="a\nb"),
        lambda c: c.run("t", {}, traceparent="x\r\ny"),
        lambda c: c.hold("op", reason=("not", "text")),
        lambda c: c.workflow("W").create(id="x\ud800"),
    ],
)
def test_text_that_cannot_be_sent_is_invalid_request_not_a_raw_error(
    send: Callable[[Client], object],
) -> None:
    recorder = Recorder()
    transport = httpx.MockTransport(recorder)
    with Client("http://x", "t", transport=transport) as client, pytest.raises(InvalidRequest):
        send(client)
    assert recorder.requests == []


# -- an empty id -----------------------------------------------------------------------------------


def test_an_empty_id_is_answered_as_in_process_without_a_request(
    in_process: Application,
) -> None:
    """``status("")`` asked ``GET /v1/operations/`` and raised internal_error "HTTP 307
    without an error body"; ``workflow(uid).get("")`` asked the instance listing."""
    with pytest.raises(NotFound) as here:
        in_process.status("")
    recorder = Recorder(lambda request: httpx.Response(307, headers={"location": "/x"}))
    with Client("http://x", "t", transport=httpx.MockTransport(recorder)) as client:
        for call in (client.status, client.outcome, client.events, client.receipt):
            with pytest.raises(NotFound) as there:
                call("")
            assert there.value.message == here.value.message
        with pytest.raises(UnknownInstance):
            client.workflow("W").get("")
        with pytest.raises(InvalidRequest):
            client.run("", {})
        with pytest.raises(InvalidRequest):
            client.workflow("").get("i")
    assert recorder.requests == []
