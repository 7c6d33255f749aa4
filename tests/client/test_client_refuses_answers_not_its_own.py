"""A success that is not the API's answer (an SSO proxy's sign-in page, a captive portal's
200) is refused by every ``Client`` and ``AsyncClient`` call with ``internal_error`` naming
what came: before, the calls read it as a result (``checkpoint`` returned the page), or
raised a raw ``JSONDecodeError`` / ``KeyError`` (found by a defect hunt, stop 38). A JSON
answer of the API's own media type is still read, as the server sends it."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from functools import partial
from typing import Any

import httpx
import pytest
from client_calls import call_client

from blackops import BackendUnavailable, BlackOpsError, InvalidRequest
from blackops.client import AsyncClient, Client

PAGE = b"<html><body>Please sign in</body></html>"

CALLS: dict[str, tuple[str, tuple[Any, ...], dict[str, Any]]] = {
    "status": ("status", ("op-1",), {}),
    "events": ("events", ("op-1",), {}),
    "submit": ("submit", ("t.echo", {}), {}),
    "run": ("run", ("t.echo", {}), {}),
    "hold": ("hold", ("op-1",), {"reason": "r"}),
    "release": ("release", ("op-1",), {"reason": "r"}),
    "list_operations": ("list_operations", (), {}),
    "list_instances": ("list_instances", ("Flow",), {}),
    "journal": ("journal", (), {"after": 0}),
    "checkpoint": ("checkpoint", (), {}),
    "schema": ("schema", (), {}),
}


def answering(media_type: str, body: bytes) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"content-type": media_type})

    return httpx.MockTransport(handler)


def by_name(caller: str, transport: httpx.MockTransport, name: str) -> Any:
    method, args, kwargs = CALLS[name]
    return call_client(caller, transport, method, *args, **kwargs)


CALLERS: dict[str, Callable[[httpx.MockTransport, str], Any]] = {
    caller: partial(by_name, caller) for caller in ("sync", "async")
}


@pytest.mark.parametrize("caller", list(CALLERS))
@pytest.mark.parametrize("name", list(CALLS))
def test_a_sign_in_page_answering_200_is_refused(caller: str, name: str) -> None:
    with pytest.raises(BlackOpsError) as refused:
        CALLERS[caller](answering("text/html", PAGE), name)
    assert refused.value.code == "internal_error"
    assert "text/html" in refused.value.message and "Please sign in" in refused.value.message


@pytest.mark.parametrize("caller", list(CALLERS))
def test_a_json_answer_that_is_no_document_is_internal_error_not_a_decode_error(
    caller: str,
) -> None:
    with pytest.raises(BlackOpsError) as refused:
        CALLERS[caller](answering("application/json", b"<html>"), "status")
    assert refused.value.code == "internal_error"


@pytest.mark.parametrize("caller", list(CALLERS))
def test_a_journal_page_without_its_next_position_is_refused(caller: str) -> None:
    """Its lines with no ``BlackOps-Next-After``: a raw ``KeyError`` before."""
    with pytest.raises(BlackOpsError, match="BlackOps-Next-After") as refused:
        CALLERS[caller](answering("application/jsonl", b'{"position":1}\n'), "journal")
    assert refused.value.code == "internal_error"


@pytest.mark.parametrize("caller", list(CALLERS))
def test_the_apis_own_answers_are_still_read(caller: str) -> None:
    status = b'{"operationId":"op-1","status":"accepted"}'
    assert CALLERS[caller](answering("application/json", status), "status") == {
        "operationId": "op-1",
        "status": "accepted",
    }
    note = b"example.com/r\n1\nabc=\n\n\xe2\x80\x94 example.com/r sig\n"
    assert CALLERS[caller](answering("text/plain; charset=utf-8", note), "checkpoint") == (
        note.decode()
    )


def one_line_stream() -> tuple[httpx.MockTransport, list[httpx.Request]]:
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        body = b'id: 7\ndata: {"position":7}\n\n'
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    return httpx.MockTransport(handler), sent


@pytest.mark.parametrize(
    "arguments",
    [
        {"max_seconds": 0},
        {"max_seconds": -5},
        {"max_seconds": math.nan},
        {"max_seconds": True},
        {"after": "5", "limit": 1},
        {"after": -1, "limit": 1},
        {"limit": 0},
        {"limit": 1.0},
        {"retry_seconds": 0, "limit": 1},
        {"retry_seconds": math.inf, "limit": 1},
    ],
)
@pytest.mark.parametrize("caller", ["sync", "async"])
def test_stream_arguments_the_server_refuses_are_refused_before_a_request(
    caller: str, arguments: dict[str, Any]
) -> None:
    """``max_seconds`` <= 0 was an empty journal with no request sent, a string ``after``
    a raw ``TypeError`` mid-stream (found by a defect hunt, stop 38)."""
    transport, sent = one_line_stream()
    options = {"after": 0, "reconnect": False, **arguments}

    def sync() -> list[Any]:
        with Client("http://api.example", "tok", transport=transport) as client:
            return list(client.stream(**options))

    async def asynchronous() -> list[Any]:
        async with AsyncClient("http://api.example", "tok", transport=transport) as client:
            return [line async for line in client.stream(**options)]

    with pytest.raises(InvalidRequest):
        sync() if caller == "sync" else asyncio.run(asynchronous())
    assert sent == []
    assert [line.position for line in sync_stream(transport)] == [7]  # a good one still works


def sync_stream(transport: httpx.MockTransport) -> list[Any]:
    with Client("http://api.example", "tok", transport=transport) as client:
        return list(client.stream(after=0, limit=1, reconnect=False))


@pytest.mark.parametrize(
    ("failure", "carried_out"),
    [
        (httpx.ConnectError("refused"), False),
        (httpx.ConnectTimeout("timed out"), False),
        (httpx.ReadTimeout("timed out"), True),
        (httpx.RemoteProtocolError("Server disconnected without sending a response."), True),
    ],
)
def test_no_answer_says_whether_the_request_may_have_been_carried_out(
    failure: httpx.TransportError, carried_out: bool
) -> None:
    """Both are ``backend_unavailable`` (P48); a read that timed out after the request left
    said "cannot be reached" though the operation ran (found by a defect hunt, stop 38)."""

    def handler(request: httpx.Request) -> httpx.Response:
        raise failure

    with pytest.raises(BackendUnavailable) as raised:
        CALLERS["sync"](httpx.MockTransport(handler), "submit")
    assert ("may have been carried out" in raised.value.message) is carried_out
    assert ("cannot be reached" in raised.value.message) is not carried_out
