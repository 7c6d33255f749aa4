"""Answers a gateway or a middlebox changed are refused with the client's own errors, never
read (found by a defect hunt, stop 39):

* a success whose JSON has another shape (a gateway's ``{"ok": true}``, ``[]``) raised a raw
  ``KeyError`` / ``TypeError`` or was returned as the result;
* a compressed body: the server never compresses, the client asks for none
  (``Accept-Encoding: identity``), and httpx's decoders do not check that a gzip stream
  ended, so a cut body read as a shorter whole one (a journal page without its last lines,
  an export saved partial); a corrupt one raised a raw ``httpx.DecodingError``;
* a listing filter of another type than in process was sent as ``str(value)``.
"""

from __future__ import annotations

import enum
import gzip
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from client_calls import call_client

from blackops import BackendUnavailable, BlackOpsError, InvalidRequest, NotFound

Handler = Callable[[httpx.Request], httpx.Response]

#: Calls whose answer is a JSON object, with a shape of their own.
CALLS: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {
    "status": (("op-1",), {}),
    "outcome": (("op-1",), {}),
    "outcome_record": (("op-1",), {}),
    "events": (("op-1",), {}),
    "submit": (("t.echo", {}), {}),
    "run": (("t.echo", {}), {}),
    "redrive": (("op-1",), {}),
    "hold": (("op-1",), {"reason": "r"}),
    "list_operations": ((), {}),
    "operation_counts": ((), {}),
    "receipt": (("op-1",), {}),
    "list_instances": (("Flow",), {}),
}


#: Answers whose object has no fixed member (counts by tenant, a receipt read as it comes).
FREE_FORM = ("operation_counts", "receipt")


def call(caller: str, handler: Handler, method: str, *args: Any, **kwargs: Any) -> Any:
    return call_client(caller, httpx.MockTransport(handler), method, *args, **kwargs)


def answering(body: bytes, status: int = 200, **headers: str) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            status, content=body, headers={"content-type": "application/json", **headers}
        )

    return handler


SHAPES = [
    (name, body)
    for name in CALLS
    for body in (b'{"ok":true}', b"[]", b'"accepted"')
    if not (body == b'{"ok":true}' and name in FREE_FORM)
]


@pytest.mark.parametrize(("name", "body"), SHAPES)
@pytest.mark.parametrize("caller", ["sync", "async"])
def test_a_json_answer_of_another_shape_is_internal_error(
    caller: str, name: str, body: bytes
) -> None:
    args, kwargs = CALLS[name]
    with pytest.raises(BlackOpsError) as refused:
        call(caller, answering(body), name, *args, **kwargs)
    assert refused.value.code == "internal_error"


@pytest.mark.parametrize(
    "body",
    [
        b'{"operationId":"op-1","status":"rejected","rejection":"no"}',
        b'{"operationId":"op-1","status":"failed","failure":{"type":"E"}}',
        b'{"operationId":7,"status":"completed"}',
        b'{"operationId":"op-1","status":"completed","attempt":"1"}',
    ],
)
@pytest.mark.parametrize("caller", ["sync", "async"])
def test_an_inline_answer_of_another_shape_is_internal_error(caller: str, body: bytes) -> None:
    with pytest.raises(BlackOpsError) as refused:
        call(caller, answering(body, 422), "run", "t.echo", {})
    assert refused.value.code == "internal_error"


@pytest.mark.parametrize("caller", ["sync", "async"])
def test_the_shapes_the_server_answers_are_still_read(caller: str) -> None:
    record = b'{"operationId":"op-1","outcome":{"n":1},"type":"T","schemaVersion":1}'
    assert call(caller, answering(record), "outcome", "op-1") == {"n": 1}
    assert call(caller, answering(b'{"operationId":"op-2"}', 202), "submit", "t", {}) == "op-2"
    rejected = (
        b'{"operationId":"op-3","status":"rejected","attempt":1,'
        b'"rejection":{"category":"validation","code":"bad","message":"no"}}'
    )
    result = call(caller, answering(rejected, 422), "run", "t.echo", {})
    assert result.status == "rejected" and result.rejection.code == "bad"


def page(lines: int) -> bytes:
    return b"".join(b'{"position":%d}\n' % n for n in range(1, lines + 1))


def compressed(body: bytes, media_type: str, cut: bool = False, **headers: str) -> Handler:
    packed = gzip.compress(body)
    if cut:
        packed = packed[: len(packed) // 2]  # the framing ends cleanly; the gzip stream does not

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["accept-encoding"] == "identity"
        return httpx.Response(
            200,
            content=packed,
            headers={"content-type": media_type, "content-encoding": "gzip", **headers},
        )

    return handler


@pytest.mark.parametrize("cut", [False, True])
@pytest.mark.parametrize("caller", ["sync", "async"])
def test_a_compressed_journal_page_is_refused_not_read_short(caller: str, cut: bool) -> None:
    """A whole page or one cut short: 490 of 1,000 lines were returned with the position
    after the last one, so a reader going on from it skipped the rest."""
    handler = compressed(page(1000), "application/jsonl", cut, **{"BlackOps-Next-After": "1000"})
    with pytest.raises(BlackOpsError, match="Content-Encoding 'gzip'") as refused:
        call(caller, handler, "journal", after=0)
    assert refused.value.code == "internal_error"


@pytest.mark.parametrize("caller", ["sync", "async"])
def test_a_compressed_export_leaves_the_files_as_they_were(caller: str, tmp_path: Path) -> None:
    target = tmp_path / "journal.jsonl"
    target.write_bytes(b"the old export\n")
    handler = compressed(page(1000), "application/jsonl", cut=True)
    with pytest.raises(BlackOpsError, match="Content-Encoding") as refused:
        call(caller, handler, "export", str(target))
    assert refused.value.code == "internal_error"
    assert target.read_bytes() == b"the old export\n"


@pytest.mark.parametrize("caller", ["sync", "async"])
def test_a_corrupt_compressed_body_is_internal_error_not_a_decoding_error(caller: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200,
            content=b"no gzip at all",
            headers={"content-type": "application/json", "content-encoding": "gzip"},
        )

    with pytest.raises(BlackOpsError) as refused:
        call(caller, handler, "status", "op-1")
    assert refused.value.code == "internal_error"


@pytest.mark.parametrize(
    "filters",
    [
        {"limit": "5"},
        {"limit": True},
        {"limit": 2.0},
        {"tenant": 5},
        {"status": b"completed"},
        {"since": object()},
    ],
)
@pytest.mark.parametrize("caller", ["sync", "async"])
def test_a_filter_of_another_type_than_in_process_is_refused_before_sending(
    caller: str, filters: dict[str, Any]
) -> None:
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"items": [], "next": None})

    with pytest.raises(InvalidRequest):
        call(caller, handler, "list_operations", **filters)
    assert sent == []


@pytest.mark.parametrize("caller", ["sync", "async"])
def test_a_compressed_error_answer_is_still_the_error_it_says(caller: str) -> None:
    """Only a success must come whole: a 503 a gateway compressed is still
    ``backend_unavailable`` (retried), a 404 with its error body still ``not_found``."""

    def gateway(status: int, body: bytes) -> Handler:
        def handler(request: httpx.Request) -> httpx.Response:
            headers = {"content-type": "application/json", "content-encoding": "gzip"}
            return httpx.Response(status, content=gzip.compress(body), headers=headers)

        return handler

    with pytest.raises(BackendUnavailable):
        call(caller, gateway(503, b"<html>busy</html>"), "status", "op-1")
    missing = b'{"error":{"code":"not_found","message":"operation op-1 does not exist"}}'
    with pytest.raises(NotFound):
        call(caller, gateway(404, missing), "status", "op-1")


class Status(str, enum.Enum):  # noqa: UP042 (str() of this mixin is its name)
    COMPLETED = "completed"


class Size(enum.IntEnum):
    TEN = 10


@pytest.mark.parametrize("caller", ["sync", "async"])
def test_enum_filters_are_sent_as_the_text_and_number_they_are(caller: str) -> None:
    """As in process, where ``isinstance`` decides: a str enum is its text (``str()`` of
    one is its name), an int enum its number."""
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"items": [], "next": None})

    call(caller, handler, "list_operations", status=Status.COMPLETED, limit=Size.TEN)
    assert dict(sent[0].url.params) == {"status": "completed", "limit": "10"}
