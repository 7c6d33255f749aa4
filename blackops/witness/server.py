"""``blackops witness serve``: a C2SP tlog-witness on the standard library's HTTP server.

``POST /add-checkpoint`` at the root of its port (replay/tlog_witness.py says what it checks
and which status each refusal has); ``GET /<hex SHA-256 of the origin>/checkpoint`` answers
the latest checkpoint it cosigned for that log, with the log's signature and its own
cosignature (the spec's monitoring path). Requests are served on threads; every
check-and-update holds the state lock, so they are serialised per witness. A request refused
with 422 was signed by the log yet is inconsistent with what the witness cosigned: it is
kept in ``<state>/evidence/`` as proof of the log's misbehaviour.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from blackops.witness.state import WitnessState
from replay import cosignature, tlog_witness
from replay.notes import Checkpoint, SigningKey, VerifierKey, parse_note

SIZE_TYPE = "text/x.tlog.size"
_LENGTH = re.compile(r"[0-9]{1,16}")  # ASCII digits only: str.isdigit() also takes '²'


class Witness:
    """The witness's logic over its state: one cosigning key, the logs it trusts."""

    def __init__(self, key: SigningKey, logs: Sequence[VerifierKey], state: WitnessState) -> None:
        self.key = cosignature.cosigner_key(key)
        self.logs: dict[str, list[VerifierKey]] = {}
        for log in logs:  # the log's key name is its origin (tlog-checkpoint)
            self.logs.setdefault(log.name, []).append(log)
        self.state = state

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
                if refusal.status == 422:
                    self._keep_evidence(origin, body)
                raise
            stamp = max(int(time.time()) if now is None else now, 1)
            line = cosignature.cosign(checkpoint.body(), self.key, stamp).line()
            self.state.save(origin, self._kept_note(request.note, checkpoint) + line)
        return line

    def _kept_note(self, note: str, checkpoint: Checkpoint) -> str:
        """The log's signature lines by trusted keys (the ones just verified)."""
        trusted = {(k.name, k.key_id) for k in self.logs[checkpoint.origin]}
        parsed = parse_note(note)
        lines = [s.line() for s in parsed.signatures if (s.name, s.key_id) in trusted]
        return parsed.text + "\n" + "".join(lines)

    def _keep_evidence(self, origin: str, body: bytes) -> None:
        folder = self.state.directory / "evidence"
        folder.mkdir(exist_ok=True)
        name = f"{time.time_ns()}-{WitnessState.origin_hash(origin)[:16]}.txt"
        (folder / name).write_bytes(body)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"  # keep-alive, as tlog-witness recommends
    disable_nagle_algorithm = True  # headers and body go out at once: no delayed-ACK stall

    def do_POST(self) -> None:
        if self.path != "/add-checkpoint":
            self._answer(404, "not found\n")
            return
        length = self.headers.get("Content-Length")
        if length is None or not _LENGTH.fullmatch(length.strip()):
            self._answer(411 if length is None else 400, "a Content-Length is required\n")
            return
        size = int(length)
        if size > tlog_witness.MAX_BODY_BYTES:
            self._answer(400, "the request body is too large\n", close=True)
            return
        body = self.rfile.read(size)
        try:
            line = self.server.witness.add_checkpoint(body)
        except RuntimeError as error:  # damaged state: refuse rather than forget it
            self._log(500, str(error))
            self._answer(500, "the witness's state is damaged; see its log\n")
            return
        except tlog_witness.Refusal as refusal:
            self._log(refusal.status, refusal.message)
            if refusal.status == 409:
                self._answer(409, f"{refusal.size}\n", SIZE_TYPE)
            else:
                self._answer(refusal.status, refusal.message + "\n")
            return
        self._log(200, "cosigned")
        self._answer(200, line)

    def do_GET(self) -> None:
        parts = self.path.strip("/").split("/")
        if len(parts) == 2 and parts[1] == "checkpoint":
            note = self.server.witness.state.note_by_hash(parts[0])
            if note is not None:
                self._answer(200, note)
                return
        self._answer(404, "not found\n")

    def _answer(
        self, status: int, text: str, content_type: str = "text/plain; charset=utf-8",
        *, close: bool = False,
    ) -> None:  # fmt: skip
        data = text.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(data)

    def _log(self, status: int, message: str) -> None:
        record = {"at": time.time(), "status": status, "message": message}
        sys.stderr.write(json.dumps(record) + "\n")

    def log_message(self, format: str, *args: Any) -> None:
        return  # one JSON line per decision instead (above)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], witness: Witness) -> None:
        super().__init__(address, _Handler)
        self.witness = witness


def make_server(witness: Witness, host: str, port: int) -> _Server:
    return _Server((host, port), witness)


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


def default_state() -> Path:
    return Path(".blackops") / "witness"
