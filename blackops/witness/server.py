"""``blackops witness serve``: a C2SP tlog-witness on the standard library's HTTP server.

``POST /add-checkpoint`` at the root of its port (replay/tlog_witness.py says what it checks
and which status each refusal has); ``GET /<hex SHA-256 of the origin>/checkpoint`` answers
the latest checkpoint it cosigned for that log, with the log's signature and its own
cosignature (the spec's monitoring path). Any other path or method is 404. A POST or GET
framed other than by at most one ``Content-Length`` (two of them, a ``Transfer-Encoding``)
is 400 and closes the connection, as is a GET with a body. Requests are served on threads,
at most ``MAX_CONNECTIONS`` connections at once (past that a new one is answered 503 and
closed), each socket read and write giving up after ``SOCKET_TIMEOUT`` seconds; every
check-and-update holds the state lock, so they are serialised per witness. A request whose
log signature alone proves the log misbehaved (a fork's 409, a size-0 checkpoint with
another root's 422) is kept in ``<state>/evidence/``: one file per distinct checkpoint,
named by the SHA-256 of its signed text (the same checkpoint resent with other proof or
signature lines is kept once, as first received), up to ``EVIDENCE_MAX_FILES`` files and
``EVIDENCE_MAX_BYTES`` bytes. A state it cannot read or write is a 500 and nothing is
cosigned.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from email.errors import MissingHeaderBodySeparatorDefect
from typing import Any

from blackops.bounded_http import BoundedHTTPServer, DeadlineHandler
from blackops.witness.state import WitnessState
from replay import cosignature, tlog_witness
from replay.notes import Checkpoint, SigningKey, VerifierKey, parse_note

SIZE_TYPE = "text/x.tlog.size"
#: Seconds a request may take from its start (an idle keep-alive connection's wait for
#: its next request included) to its last byte, however its bytes trickle in.
SOCKET_TIMEOUT = 30.0
#: Connections served at once; each holds a thread, so a flood must not grow them unbounded.
MAX_CONNECTIONS = 64
#: Of those, what one client address may hold.
MAX_PER_CLIENT = 8
#: The evidence kept per state directory (a log could otherwise fill the witness's disk).
EVIDENCE_MAX_FILES = 1000
EVIDENCE_MAX_BYTES = 256 << 20
_LENGTH = re.compile(r"[0-9]{1,16}")  # ASCII digits only: str.isdigit() also takes '²'
_ZERO = re.compile(r"0+")  # a GET's length: any number of zeros is none (no int(): 4300 digits)


class Witness:
    """The witness's logic over its state: one cosigning key, the logs it trusts."""

    def __init__(self, key: SigningKey, logs: Sequence[VerifierKey], state: WitnessState) -> None:
        self.key = cosignature.cosigner_key(key)
        self.logs: dict[str, list[VerifierKey]] = {}
        for log in logs:  # the log's key name is its origin (tlog-checkpoint)
            self.logs.setdefault(log.name, []).append(log)
        self.state = state
        self.evidence_max_files = EVIDENCE_MAX_FILES
        self.evidence_max_bytes = EVIDENCE_MAX_BYTES

    @property
    def verifier(self) -> VerifierKey:
        return self.key.verifier()

    def add_checkpoint(self, body: bytes, now: int | None = None) -> str:
        """The cosignature line for a request body, or a ``Refusal``."""
        request = tlog_witness.parse(body)
        origin = tlog_witness.origin_of(request.note)
        with self.state.locked():
            latest = self.state.latest(origin)
            try:
                checkpoint = tlog_witness.check(request, self.logs, latest)
            except tlog_witness.Refusal as refusal:
                if refusal.evidence:
                    self._keep_evidence(origin, parse_note(request.note).text, body)
                raise
            stamp = max(int(time.time()) if now is None else now, 1)
            line = cosignature.cosign(checkpoint.body(), self.key, stamp).line()
            self.state.save(origin, self._kept_note(request.note, checkpoint) + line)
        return line

    def _kept_note(self, note: str, checkpoint: Checkpoint) -> str:
        """The log's signature lines by trusted keys: each key's first, the one just verified
        (a later line by it is dropped unverified, as Go's note.Open drops it)."""
        trusted = {(k.name, k.key_id) for k in self.logs[checkpoint.origin]}
        parsed = parse_note(note)
        lines: dict[tuple[str, bytes], str] = {}
        for s in parsed.signatures:
            if (s.name, s.key_id) in trusted:
                lines.setdefault((s.name, s.key_id), s.line())
        return parsed.text + "\n" + "".join(lines.values())

    def _keep_evidence(self, origin: str, signed: str, body: bytes) -> None:
        """Keep the first refused body of each checkpoint (``signed``: its signed text) once
        (call under the state lock); failing to keep it never changes the answer, which is
        the refusal. Named by the checkpoint, not the body: the proof lines and any
        signature lines besides the log's are anyone's to change, and one fork resent with
        other ones filled the cap the log's other forks need (found by review)."""
        folder = self.state.directory / "evidence"
        path = folder / f"{hashlib.sha256(signed.encode('utf-8')).hexdigest()}.txt"
        try:
            folder.mkdir(exist_ok=True)
            if path.exists():
                return  # the same checkpoint again: kept already
            kept = [entry.stat().st_size for entry in folder.iterdir() if entry.is_file()]
            if (
                len(kept) >= self.evidence_max_files
                or sum(kept) + len(body) > self.evidence_max_bytes
            ):
                log_line(None, f"evidence for {origin!r} not kept: {folder} is full")
                return
            partial = folder / f".{path.name}.{uuid.uuid4().hex}.partial"
            partial.write_bytes(body)
            os.replace(partial, path)  # never a torn file under the final name
        except OSError as error:
            log_line(None, f"evidence for {origin!r} not kept: {error}")


def log_line(status: int | None, message: str) -> None:
    """One JSON line on stderr per decision (decisions T4); ``status`` None: none was sent."""
    record = {"at": time.time(), "status": status, "message": message}
    sys.stderr.write(json.dumps(record) + "\n")


class _Handler(DeadlineHandler):
    server: _Server
    protocol_version = "HTTP/1.1"  # keep-alive, as tlog-witness recommends
    disable_nagle_algorithm = True  # headers and body go out at once: no delayed-ACK stall

    def do_POST(self) -> None:  # noqa: N802 (http.server names it)
        # Answers before the body is read close the connection: its body would be read as
        # the next request.
        if self.path != "/add-checkpoint":
            self._answer(404, "not found\n", close=True)
            return
        if self._framing_refused():
            return
        length = self.headers.get("Content-Length")
        if length is None or not _LENGTH.fullmatch(length.strip()):
            status = 411 if length is None else 400
            self._answer(status, "a Content-Length is required\n", close=True)
            return
        size = int(length)
        if size > tlog_witness.MAX_BODY_BYTES:
            self._answer(400, "the request body is too large\n", close=True)
            return
        try:
            body = self.rfile.read(size)
        except OSError as error:  # a client that stalls past the timeout, or went away
            log_line(None, f"the request body was not received: {error}")
            self.close_connection = True
            return
        if len(body) != size:  # it closed early: an incomplete message is never acted on
            # (RFC 9112 §8; a cut body was cosigned: found by a defect hunt, stop 40). Told
            # so, for a client that only half-closed, and the connection is closed.
            why = f"the request body was cut short ({len(body)} of {size} bytes)"
            log_line(400, why)
            self._answer(400, why + "\n", close=True)
            return
        try:
            line = self.server.witness.add_checkpoint(body)
        except tlog_witness.Refusal as refusal:
            log_line(refusal.status, refusal.message)
            if refusal.status == 409 and refusal.size is not None:
                self._answer(409, f"{refusal.size}\n", SIZE_TYPE)
            else:  # a fork's 409 is plain text: no size to resend from
                self._answer(refusal.status, refusal.message + "\n")
            return
        except Exception as error:  # damaged state, a full disk: refuse, never forget
            self._failed(error)
            return
        log_line(200, "cosigned")
        self._answer(200, line)

    def do_GET(self) -> None:  # noqa: N802 (http.server names it)
        if self._framing_refused():
            return
        length = self.headers.get("Content-Length", "0").strip()
        if not _ZERO.fullmatch(length):
            # A GET's body is never read: it would be read as the next request. Any length
            # of zero is none ("00" was refused: found by review).
            self._answer(400, "a GET has no body\n", close=True)
            return
        parts = self.path.strip("/").split("/")
        if len(parts) == 2 and parts[1] == "checkpoint":
            try:
                note = self.server.witness.state.note_by_hash(parts[0])
            except Exception as error:
                self._failed(error)
                return
            if note is not None:
                self._answer(200, note)
                return
        self._answer(404, "not found\n")

    def _framing_refused(self) -> bool:
        """400 and close for a request framed other than by at most one Content-Length: a
        second one (``headers.get`` reads the first, so "0" then "5" had the body read as
        the next request: found by review) or a Transfer-Encoding, which the witness never
        decodes. Call before reading anything of the body."""
        lengths = self.headers.get_all("Content-Length") or []
        # A header line the parser could not read (a space before its colon, no colon)
        # ends the headers there: the fields after it, a Transfer-Encoding or a second
        # Content-Length among them, were never seen (RFC 9112 5.1: 400; found by review).
        # Only that defect counts: a multipart or message/* Content-Type has MIME defects
        # and a parsed payload of its own, which say nothing about the header lines.
        payload = self.headers.get_payload()
        malformed = any(
            isinstance(d, MissingHeaderBodySeparatorDefect) for d in self.headers.defects
        )
        if malformed or (isinstance(payload, str) and payload):
            why = "a header line is malformed"
        elif len(lengths) > 1 or "Transfer-Encoding" in self.headers:
            why = "one Content-Length and no Transfer-Encoding"
        else:
            return False
        log_line(400, why)
        self._answer(400, why + "\n", close=True)
        return True

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        if code == 501:  # a method without a do_ handler: 404 like any other (decisions T4)
            self._answer(404, "not found\n", close=True)  # its body, if any, is unread
            return
        super().send_error(code, message, explain)

    def _failed(self, error: Exception) -> None:
        detail = (
            str(error) if isinstance(error, RuntimeError) else f"{type(error).__name__}: {error}"
        )
        log_line(500, detail)
        self._answer(500, "the witness cannot read or write its state; see its log\n")

    def _answer(
        self, status: int, text: str, content_type: str = "text/plain; charset=utf-8",
        *, close: bool = False,
    ) -> None:  # fmt: skip
        data = text.encode("utf-8")
        self.writing()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        return  # one JSON line per decision instead (above)


class _Server(BoundedHTTPServer):
    def __init__(
        self,
        address: tuple[str, int],
        witness: Witness,
        *,
        socket_timeout: float = SOCKET_TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
        max_per_client: int = MAX_PER_CLIENT,
    ) -> None:
        super().__init__(
            address, _Handler, socket_timeout=socket_timeout, max_connections=max_connections,
            max_per_client=max_per_client,
            refused=lambda client: log_line(503, f"too many connections: {client} refused"),
        )  # fmt: skip
        self.witness = witness

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]  # a JSON line like every other, not a traceback
        log_line(None, f"connection from {client_address[0]} failed: {error!r}")


def make_server(witness: Witness, host: str, port: int, **limits: Any) -> _Server:
    """``limits``: ``_Server``'s keywords (``socket_timeout``, ``max_connections``,
    ``max_per_client``), their defaults there."""
    return _Server((host, port), witness, **limits)


def describe(witness: Witness, url: str) -> Mapping[str, Any]:
    return {
        "url": url,
        "name": witness.key.name,
        "verifierKey": witness.verifier.encode(),
        "keyId": witness.key.key_id.hex(),
        "logs": sorted(k.encode() for keys in witness.logs.values() for k in keys),
        "state": str(witness.state.directory),
    }


def serve_forever(server: _Server, stop: threading.Event | None = None) -> None:
    if stop is None:
        server.serve_forever()
        return
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    stop.wait()
    server.shutdown()
