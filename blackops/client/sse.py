"""Server-Sent Events, read incrementally from bytes (the WHATWG event-stream format).

Kept as bytes: a ``data:`` field of the journal stream is an Observed JSONL line whose
bytes must arrive unchanged (decoding and re-encoding could only lose that). Lines end at
CR LF, LF or CR, and nowhere else (a U+2028 inside a JSON string is not a line break).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True, slots=True)
class ServerSentEvent:
    data: bytes
    id: str | None = None  # the last event id in force when this event was dispatched
    event: str = "message"
    #: Whether the event carried an ``id:`` field itself (``id`` may be an earlier one's:
    #: the WHATWG last event id stays in force). Not compared: two events are equal by
    #: what a reader of the WHATWG interface sees.
    has_id: bool = field(default=False, compare=False)


class SSEDecoder:
    """Feed chunks with :meth:`feed`; it yields each event once its blank line arrived.
    Comments (``: keep-alive``) are counted in :attr:`comments` and otherwise ignored."""

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[bytes] = []
        self._event = b""
        self._has_id = False
        self._started = False  # the stream's first bytes were looked at (a BOM)
        self._after_cr = False  # the last line ended at a CR: an LF next belongs to it
        self.last_id: str | None = None
        self.comments = 0

    @property
    def partial(self) -> bool:
        """Whether part of an event has arrived whose end has not (a connection dropped
        now loses it, and the server sends it again after ``Last-Event-ID``)."""
        return bool(self._buffer or self._data)

    def feed(self, chunk: bytes) -> Iterator[ServerSentEvent]:
        self._buffer += chunk
        if not self._started:  # WHATWG: one leading BOM is ignored
            if len(self._buffer) < len(_BOM) and _BOM.startswith(self._buffer):
                return  # maybe a BOM, split across chunks
            self._started = True
            if self._buffer.startswith(_BOM):
                self._buffer = self._buffer[len(_BOM) :]
        while True:
            line, found = self._next_line()
            if not found:
                return
            event = self._line(line)
            if event is not None:
                yield event

    def _next_line(self) -> tuple[bytes, bool]:
        if self._after_cr and self._buffer:
            self._after_cr = False
            if self._buffer.startswith(b"\n"):  # the CR LF a chunk boundary split
                self._buffer = self._buffer[1:]
        buffer = self._buffer
        cr, lf = buffer.find(b"\r"), buffer.find(b"\n")
        if cr < 0 and lf < 0:
            return b"", False
        if cr < 0 or (0 <= lf < cr):
            self._buffer = buffer[lf + 1 :]
            return buffer[:lf], True
        if cr == len(buffer) - 1:
            # A CR ends a line now (an event must not wait for the next chunk, which may be
            # a keep-alive many seconds away); an LF that starts the next chunk is its pair.
            self._after_cr = True
            self._buffer = b""
            return buffer[:cr], True
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
            if b"\x00" not in value:  # WHATWG: an empty id resets the last event id
                self.last_id = value.decode("utf-8", "replace")
                self._has_id = True
        elif name == b"event":
            self._event = value
        # "retry" and unknown fields: nothing to do for this reader.
        return None

    def _dispatch(self) -> ServerSentEvent | None:
        data, event, has_id = self._data, self._event, self._has_id
        self._data, self._event, self._has_id = [], b"", False
        if not data:
            return None
        kind = event.decode("utf-8", "replace") or "message"
        return ServerSentEvent(b"\n".join(data), self.last_id, kind, has_id)
