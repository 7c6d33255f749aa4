"""``blackops witness serve`` over HTTP (blackops/witness/server.py): a fork's 409 carries no
size, every other method is 404, a state it cannot read or write is a 500 (never a dropped
connection, never a cosignature), and a client that stalls or a flood of connections cannot
hold the server's threads."""

from __future__ import annotations

import base64
import errno
import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from transparency_log import ToyLog

from blackops.witness import server as witness_server
from blackops.witness.server import Witness, make_server
from blackops.witness.state import WitnessState
from replay import tlog_witness
from replay.notes import COSIGNATURE_KEY, SigningKey


class Served:
    def __init__(self, witness: Witness, **options: float) -> None:
        self.witness = witness
        self.server = make_server(witness, "127.0.0.1", 0, **options)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def post(self, body: bytes) -> httpx.Response:
        return httpx.post(f"{self.url}/add-checkpoint", content=body, timeout=10)


@pytest.fixture
def log() -> ToyLog:
    return ToyLog().grow(4)


@pytest.fixture
def witness(tmp_path: Path, log: ToyLog) -> Witness:
    key = SigningKey.generate("w1.example", COSIGNATURE_KEY)
    return Witness(key, [log.key.verifier()], WitnessState(tmp_path / "state"))


@pytest.fixture
def served(witness: Witness) -> Iterator[Served]:
    running = Served(witness)
    yield running
    running.server.shutdown()
    running.server.server_close()


def test_a_fork_is_409_in_plain_text_and_a_stale_size_409_names_the_size(
    served: Served, log: ToyLog
) -> None:
    assert served.post(tlog_witness.encode(0, [], log.note())).status_code == 200
    fork = ToyLog(log.origin, log.key).grow(3).append("another entry")
    answer = served.post(tlog_witness.encode(4, [], fork.note()))
    assert answer.status_code == 409
    assert answer.headers["content-type"].startswith("text/plain")
    assert "forked" in answer.text
    stale = served.post(tlog_witness.encode(0, [], log.note()))
    assert (stale.status_code, stale.headers["content-type"], stale.text) == (
        409,
        "text/x.tlog.size",
        "4\n",
    )
    assert len(list((served.witness.state.directory / "evidence").iterdir())) == 1


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "BREW"])
def test_any_other_method_is_404(served: Served, method: str) -> None:
    answer = httpx.request(method, f"{served.url}/add-checkpoint", content=b"x", timeout=10)
    assert answer.status_code == 404
    assert answer.content == (b"" if method == "HEAD" else b"not found\n")


def test_a_state_file_it_cannot_read_is_500_on_post_and_get(served: Served, log: ToyLog) -> None:
    path = served.witness.state.path(log.origin)
    path.write_bytes(b"\xff\xfe not UTF-8")
    answer = served.post(tlog_witness.encode(0, [], log.note()))
    assert answer.status_code == 500
    origin_hash = WitnessState.origin_hash(log.origin)
    assert httpx.get(f"{served.url}/{origin_hash}/checkpoint", timeout=10).status_code == 500
    assert path.read_bytes() == b"\xff\xfe not UTF-8"  # nothing was overwritten


def test_a_state_it_cannot_save_is_500_and_nothing_is_cosigned(
    served: Served, log: ToyLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(origin: str, note: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(served.witness.state, "save", full)
    answer = served.post(tlog_witness.encode(0, [], log.note()))
    assert answer.status_code == 500
    assert "w1.example" not in answer.text  # no cosignature line went out
    assert served.witness.state.latest(log.origin) is None
    monkeypatch.undo()
    assert served.post(tlog_witness.encode(0, [], log.note())).status_code == 200


def read_answer(conn: socket.socket) -> bytes:
    """Everything until the server closes (b"" if it closes without answering)."""
    answer = b""
    while chunk := conn.recv(4096):
        answer += chunk
    return answer


def stalled(port: int) -> socket.socket:
    """A client that announces a body and never sends it."""
    conn = socket.create_connection(("127.0.0.1", port), timeout=10)
    conn.sendall(b"POST /add-checkpoint HTTP/1.1\r\nHost: w\r\nContent-Length: 1000\r\n\r\nold 0\n")
    return conn


def test_a_client_that_stalls_is_dropped_after_the_socket_timeout(witness: Witness) -> None:
    running = Served(witness, socket_timeout=0.3)
    try:
        conn = stalled(running.port)
        started = time.monotonic()
        assert read_answer(conn) == b""  # the server hung up; before, recv timed out here
        assert time.monotonic() - started < 5
        conn.close()
        assert witness_server.SOCKET_TIMEOUT == 30.0  # the default (decisions T4)
    finally:
        running.server.shutdown()
        running.server.server_close()


def test_connections_past_the_bound_are_answered_503_at_once(witness: Witness, log: ToyLog) -> None:
    running = Served(witness, socket_timeout=2.0, max_connections=2)
    try:
        held = [stalled(running.port), stalled(running.port)]
        time.sleep(0.2)  # both are being served (each holds a slot)
        with socket.create_connection(("127.0.0.1", running.port), timeout=5) as extra:
            assert read_answer(extra).startswith(b"HTTP/1.1 503 ")
        for conn in held:
            conn.close()
        deadline = time.monotonic() + 10
        while True:  # the slots come back once those connections end
            try:
                answer = running.post(tlog_witness.encode(0, [], log.note()))
            except httpx.TransportError:
                answer = None
            if answer is not None and answer.status_code == 200:
                break
            assert time.monotonic() < deadline, answer
            time.sleep(0.1)
        assert witness_server.MAX_CONNECTIONS == 64  # the default (decisions T4)
    finally:
        running.server.shutdown()
        running.server.server_close()


def trickle(conn: socket.socket, data: bytes, pause: float = 0.2) -> float | None:
    """Send ``data`` a byte at a time; the seconds until the server hung up (a reset or a
    broken pipe), or None if it read it all."""
    started = time.monotonic()
    for byte in data:
        try:
            conn.sendall(bytes([byte]))
        except OSError:
            return time.monotonic() - started
        time.sleep(pause)
    return None


def test_a_request_that_trickles_in_is_dropped_at_its_deadline(witness: Witness) -> None:
    """The timeout bounds the whole request, not each read: a byte now and then held a
    thread and a connection slot for ever (found by review)."""
    running = Served(witness, socket_timeout=1.0)
    try:
        conn = socket.create_connection(("127.0.0.1", running.port), timeout=10)
        hung_up_after = trickle(conn, b"POST /add-checkpoint HTTP/1.1\r\nHost: w\r\n")
        assert hung_up_after is not None and hung_up_after < 4, hung_up_after
        conn.close()
    finally:
        running.server.shutdown()
        running.server.server_close()


def test_one_client_address_may_not_take_every_slot(witness: Witness, log: ToyLog) -> None:
    running = Served(witness, socket_timeout=5.0, max_connections=10, max_per_client=2)
    try:
        held = [stalled(running.port), stalled(running.port)]
        time.sleep(0.2)
        with socket.create_connection(("127.0.0.1", running.port), timeout=5) as extra:
            assert read_answer(extra).startswith(b"HTTP/1.1 503 ")
        # Another address is still served (all of 127/8 is this machine's loopback).
        other = httpx.HTTPTransport(local_address="127.0.0.2")
        with httpx.Client(transport=other, timeout=10) as client:
            body = tlog_witness.encode(0, [], log.note())
            assert client.post(f"{running.url}/add-checkpoint", content=body).status_code == 200
        for conn in held:
            conn.close()
        assert witness_server.MAX_PER_CLIENT == 8  # the default (decisions T4)
    finally:
        running.server.shutdown()
        running.server.server_close()


def test_a_get_with_a_body_is_refused_and_its_body_never_read_as_a_request(
    served: Served,
) -> None:
    smuggled = b"PUT /zzz HTTP/1.1\r\nHost: w\r\nContent-Length: 0\r\n\r\n"
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as conn:
        conn.sendall(
            b"GET /%s/checkpoint HTTP/1.1\r\nHost: w\r\nContent-Length: %d\r\n\r\n%s"
            % (b"0" * 64, len(smuggled), smuggled)
        )
        answer = read_answer(conn)
    assert answer.startswith(b"HTTP/1.1 400 ") and answer.count(b"HTTP/1.1 ") == 1


NEXT = b"PUT /zzz HTTP/1.1\r\nHost: w\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


def answers(port: int, request: bytes) -> list[bytes]:
    """The status lines answered to ``request`` followed by a PUT the server must not read."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(request + NEXT)
        answer = read_answer(conn)
    return re.findall(rb"HTTP/1\.1 ([0-9]{3}) ", answer)


@pytest.mark.parametrize(
    "framing",
    [
        b"Content-Length: 0\r\nContent-Length: 5\r\n",
        b"Content-Length: 0\r\ncontent-length: 0\r\n",
        b"Transfer-Encoding: identity\r\n",
        b"Transfer-Encoding: chunked\r\n",
        b"Transfer-Encoding:\r\n",
        b"Content-Length: 1\r\n",
        b"Content-Length: +0\r\n",  # not a Content-Length (RFC 9110: 1*DIGIT)
        b"Content-Length: 0x0\r\n",
        b"Content-Length: %s1\r\n" % (b"0" * 5000),  # past int()'s 4,300 digits
        # Lines the header parser stops at: the fields after them were never seen.
        b"Transfer-Encoding : chunked\r\n",
        b"X-Junk\r\nTransfer-Encoding: chunked\r\n",
        b"Content-Length: 0\r\nX-Junk\r\nContent-Length: 5\r\n",
        b"Content-Length : 5\r\n",
    ],
)
def test_a_get_framed_with_a_body_is_400_and_closes(served: Served, framing: bytes) -> None:
    # Two Content-Lengths: headers.get read the first ("0") and the PUT was answered as
    # the next request, two answers to one (found by review).
    request = b"GET /%s/checkpoint HTTP/1.1\r\nHost: w\r\n%s\r\n" % (b"0" * 64, framing)
    assert answers(served.port, request) == [b"400"]


@pytest.mark.parametrize("length", [b"0", b"00", b"0" * 5000, b" 0 "])
def test_a_get_with_any_length_of_zero_is_served(served: Served, length: bytes) -> None:
    request = b"GET /%s/checkpoint HTTP/1.1\r\nHost: w\r\nContent-Length: %s\r\n\r\n" % (
        b"0" * 64,
        length,
    )
    assert answers(served.port, request) == [b"404", b"404"]  # nothing kept; then the PUT


@pytest.mark.parametrize(
    "framing",
    [
        b"Content-Length: %d\r\nContent-Length: %d\r\n",
        b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n",
        b"Transfer-Encoding: identity\r\nContent-Length: %d\r\n",
    ],
)
def test_a_post_framed_twice_is_400_and_closes(served: Served, log: ToyLog, framing: bytes) -> None:
    body = tlog_witness.encode(0, [], log.note())
    counts = (len(body),) * framing.count(b"%d")
    head = b"POST /add-checkpoint HTTP/1.1\r\nHost: w\r\n" + framing % counts + b"\r\n"
    assert answers(served.port, head + body) == [b"400"]
    assert served.witness.state.latest(log.origin) is None  # nothing was cosigned
    assert served.post(body).status_code == 200


@pytest.mark.parametrize(
    "content_type",
    [b"multipart/form-data; boundary=x", b"multipart/mixed", b"message/rfc822", b"text/plain"],
)
def test_a_content_type_the_mime_parser_reads_is_no_framing_defect(
    served: Served, log: ToyLog, content_type: bytes
) -> None:
    """Only a header line the parser stopped at is malformed framing: a multipart or
    message Content-Type's own MIME defects were refused as such (found by review)."""
    body = tlog_witness.encode(0, [], log.note())
    head = b"POST /add-checkpoint HTTP/1.1\r\nHost: w\r\nContent-Type: %s\r\n" % content_type
    head += b"Content-Length: %d\r\n\r\n" % len(body)
    assert answers(served.port, head + body) == [b"200", b"404"]  # then the PUT after it


def test_a_body_cut_short_is_never_cosigned(served: Served, log: ToyLog) -> None:
    """A client that announces a length and closes early sent an incomplete message (RFC
    9112 §8): it was parsed and cosigned when the cut left whole lines (found by a defect
    hunt, stop 40). Here the cut leaves a valid request: the log's signature, without
    another key's signature line after it."""
    other = "\u2014 other.example " + base64.b64encode(os.urandom(68)).decode() + "\n"
    body = tlog_witness.encode(0, [], log.note() + other)
    cut = body[: body.rindex(other.encode())]
    conn = socket.create_connection(("127.0.0.1", served.port), timeout=10)
    conn.sendall(
        b"POST /add-checkpoint HTTP/1.1\r\nHost: w\r\nContent-Length: %d\r\n\r\n" % len(body) + cut
    )
    conn.shutdown(socket.SHUT_WR)
    answer = read_answer(conn)  # then closed
    assert answer.startswith(b"HTTP/1.1 400") and b"cut short" in answer
    conn.close()
    assert served.witness.state.latest(log.origin) is None
    assert served.post(body).status_code == 200  # the whole request is cosigned


def test_an_unknown_origin_is_named_only_in_part(
    served: Served, log: ToyLog, capfd: pytest.CaptureFixture[str]
) -> None:
    """The origin line is the caller's: a megabyte one was answered and logged whole."""
    stranger = ToyLog("x" * 100_000).grow(1)
    answer = served.post(tlog_witness.encode(0, [], stranger.note()))
    assert answer.status_code == 404 and len(answer.content) < 300
    logged = capfd.readouterr().err
    assert "unknown log origin" in logged and len(logged) < 1000
