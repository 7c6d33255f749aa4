"""Server-Sent Events, read incrementally from bytes (the WHATWG event-stream format).

Kept as bytes: a ``data:`` field of the journal stream is an Observed JSONL line whose
bytes must arrive unchanged (decoding and re-encoding could only lose that). Lines end at
CR LF, LF or CR, and nowhere else (a U+2028 inside a JSON string is not a line break).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ServerSentEvent:
    data: bytes
    id: str | None = None  # the last event id in force when this event was dispatched
    event: str = "message"


class SSEDecoder:
    """Feed chunks with :meth:`feed`; it yields each event once its blank line arrived.
    Comments (``: keep-alive``) are counted in :attr:`comments` and otherwise ignored."""

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[bytes] = []
        self._event = b""
        self.last_id: str | None = None
        self.comments = 0

    @property
    def partial(self) -> bool:
        """Whether part of an event has arrived whose end has not (a connection dropped
        now loses it, and the server sends it again after ``Last-Event-ID``)."""
        return bool(self._buffer or self._data)

    def feed(self, chunk: bytes) -> Iterator[ServerSentEvent]:
        self._buffer += chunk
        while True:
            line, found = self._next_line()
            if not found:
                return
            event = self._line(line)
            if event is not None:
                yield event

    def _next_line(self) -> tuple[bytes, bool]:
        buffer = self._buffer
        cr, lf = buffer.find(b"\r"), buffer.find(b"\n")
        if cr < 0 and lf < 0:
            return b"", False
        if cr < 0 or (0 <= lf < cr):
            self._buffer = buffer[lf + 1 :]
            return buffer[:lf], True
        if cr == len(buffer) - 1:
            return b"", False  # a CR at the end: an LF may follow in the next chunk
        end = cr + 2 if buffer[cr + 1 : cr + 2] == b"\n" else cr + 1
        self._buffer = buffer[end:]
        return buffer[:cr], True

    def _line(self, line: bytes) -> ServerSentEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(b":"):
            self.comments += 1
            return None
        name, colon, value = line.partition(b":")
        if colon and value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            self._data.append(value)
        elif name == b"id":
            if b"\x00" not in value:
                self.last_id = value.decode("utf-8", "replace")
        elif name == b"event":
            self._event = value
        # "retry" and unknown fields: nothing to do for this reader.
        return None

    def _dispatch(self) -> ServerSentEvent | None:
        data, event = self._data, self._event
        self._data, self._event = [], b""
        if not data:
            return None
        kind = event.decode("utf-8", "replace") or "message"
        return ServerSentEvent(b"\n".join(data), self.last_id, kind)
