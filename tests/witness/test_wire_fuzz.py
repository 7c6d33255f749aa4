"""Every parser on the witness's wire raises only its own error: arbitrary bytes into the
request parser are a 4xx ``Refusal``, a checkpoint body is a ``NoteError`` or a checkpoint,
and the server over HTTP answers every malformed request with a 4xx (never 5xx, never a
dropped connection)."""

from __future__ import annotations

import base64
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transparency_log import ToyLog

from blackops.witness.server import Witness, make_server
from blackops.witness.state import WitnessState
from replay import tlog_witness
from replay.notes import COSIGNATURE_KEY, MAX_TREE_SIZE, Checkpoint, NoteError, SigningKey

LOG = ToyLog().grow(3)
ROOT = base64.b64encode(bytes(32)).decode()
SEEDS = [
    b"old 0\n\n" + LOG.note().encode(),
    b"old 0\n\nexample.com/log\n"
    + b"1" * 5000
    + b"\n"
    + ROOT.encode()
    + b"\n\n\xe2\x80\x94 x AAAAAAAAAAA=\n",
    b"old 18446744073709551616\n\n" + LOG.note().encode(),
    b"old 99999999999999999999\n\n" + LOG.note().encode(),
]
SETTINGS = settings(
    max_examples=200, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)  # fmt: skip


def request_bytes() -> st.SearchStrategy[bytes]:
    def mangle(seed: bytes, edits: list[tuple[int, bytes]]) -> bytes:
        out = bytearray(seed)
        for at, chunk in edits:
            at %= len(out) + 1
            out[at : at + len(chunk) % 3] = chunk
        return bytes(out)

    edits = st.lists(st.tuples(st.integers(0, 10_000), st.binary(max_size=6)), max_size=4)
    return st.one_of(st.binary(max_size=300), st.builds(mangle, st.sampled_from(SEEDS), edits))


@pytest.fixture
def witness(tmp_path: Path) -> Witness:
    key = SigningKey.generate("w1.example", COSIGNATURE_KEY)
    return Witness(key, [LOG.key.verifier()], WitnessState(tmp_path / "w"))


@SETTINGS
@given(body=request_bytes())
def test_the_request_parser_only_refuses_with_a_4xx(witness: Witness, body: bytes) -> None:
    status = 200
    try:
        witness.add_checkpoint(body, now=1_700_000_000)
    except tlog_witness.Refusal as refusal:
        status = refusal.status
    assert status == 200 or 400 <= status < 500


@given(text=st.text(max_size=80) | st.sampled_from(["o\n" + "1" * 5000 + f"\n{ROOT}\n"]))
def test_a_checkpoint_body_parses_or_is_a_note_error(text: str) -> None:
    for candidate in (text, f"o\n{text}\n{ROOT}\n"):
        checkpoint, code = parsed(candidate)
        if checkpoint is None:
            assert code == "malformed_checkpoint"
        else:
            assert 0 <= checkpoint.size <= MAX_TREE_SIZE
            assert checkpoint.body() == candidate


def parsed(text: str) -> tuple[Checkpoint | None, str]:
    try:
        return Checkpoint.parse(text), ""
    except NoteError as error:
        return None, error.code


@pytest.mark.parametrize(
    ("size", "ok"),
    [("18446744073709551615", True), ("18446744073709551616", False), ("01", False),
     ("1" * 5000, False), ("²", False), ("-1", False), ("0", True)],
)  # fmt: skip
def test_a_tree_size_is_a_uint64_without_leading_zeros(size: str, ok: bool) -> None:
    text = f"o\n{size}\n{ROOT}\n"
    if ok:
        assert Checkpoint.parse(text).size == int(size)
    else:
        with pytest.raises(NoteError, match=r"uint64|2\^64"):
            Checkpoint.parse(text)


@pytest.fixture
def server(witness: Witness) -> Iterator[int]:
    running = make_server(witness, "127.0.0.1", 0)
    thread = threading.Thread(target=running.serve_forever, daemon=True)
    thread.start()
    yield running.server_address[1]
    running.shutdown()
    running.server_close()


def status_of(port: int, raw: bytes) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(raw)
        conn.shutdown(socket.SHUT_WR)  # a short body ends here, never waits
        answer = b""
        while b"\r\n" not in answer:
            chunk = conn.recv(4096)
            assert chunk, f"the connection was dropped without an answer to {raw[:80]!r}"
            answer += chunk
    return int(answer.split(b" ", 2)[1])


@SETTINGS
@given(body=request_bytes())
def test_the_server_answers_every_malformed_body_with_a_4xx(server: int, body: bytes) -> None:
    head = b"POST /add-checkpoint HTTP/1.1\r\nHost: w\r\nContent-Length: %d\r\n\r\n" % len(body)
    status = status_of(server, head + body)
    assert status == 200 or 400 <= status < 500


lengths = st.one_of(
    st.sampled_from(["²", "1" * 5000, "-1", " 5", "5 ", "0x10", "１", "99999999999999999999"]),
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF), max_size=12),
)


@SETTINGS
@given(length=lengths)
def test_the_server_answers_every_content_length_with_a_4xx(server: int, length: str) -> None:
    head = f"POST /add-checkpoint HTTP/1.1\r\nHost: w\r\nContent-Length: {length}\r\n\r\n"
    status = status_of(server, head.encode("utf-8") + b"old 0\n\n")
    assert 400 <= status < 500
