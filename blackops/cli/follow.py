"""``blackops replay --follow URL``: a server's live journal stream as the lines of a file.

The stream is read by ``blackops.client`` in a thread (it reconnects with Last-Event-ID
after a drop) and handed over as Observed JSONL lines, so ``replay`` applies exactly the
checks it applies to a file (duplicates, reordering, stream version gaps). SIGINT and
SIGTERM end the lines cleanly: replay then saves ``--state`` and reports as at the end of
a file, and a later run resumes after that position.
"""

from __future__ import annotations

import os
import queue
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from urllib.parse import urlsplit, urlunsplit

from domain.errors import BlackOpsError, InvalidRequest

#: Lines read ahead of the observer at most (the reader waits when it is that far ahead).
AHEAD = 10_000


def stream_target(url: str, space: str | None) -> tuple[str, str | None]:
    """``(base URL, Space or None)`` from a server's base URL (and ``--space``), or from a
    ``.../v1/journal/stream`` or ``.../v1/spaces/S/journal/stream`` URL."""
    try:
        parts = urlsplit(url)
    except ValueError:  # "http://[::1": a traceback (found by a defect hunt, stop 40)
        raise InvalidRequest(f"--follow needs an http(s) URL, not {url!r}") from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidRequest(f"--follow needs an http(s) URL, not {url!r}")
    path = parts.path.rstrip("/")
    cut = path.find("/v1/")
    if cut < 0:
        return url.rstrip("/"), space
    base = urlunsplit((parts.scheme, parts.netloc, path[:cut], "", ""))
    rest = path[cut:].split("/")
    if rest == ["", "v1", "journal", "stream"]:
        named = None
    elif len(rest) == 6 and rest[1:3] == ["v1", "spaces"] and rest[4:] == ["journal", "stream"]:
        named = rest[3]
    else:
        raise InvalidRequest(f"{url!r} is not a journal stream URL (.../v1/journal/stream)")
    if space is not None and space != named:
        raise InvalidRequest("--space and the URL name different streams")
    return base, named


class FollowedStream:
    """Iterating it yields lines (bytes, with their newline) until a signal or a refusal."""

    def __init__(self, url: str, token: str | None, space: str | None, after: int) -> None:
        self.base, self.space = stream_target(url, space)
        # Stripped: a secret file or `$(cat token-file)` often ends with a newline.
        self.token = (token or os.environ.get("BLACKOPS_TOKEN") or "").strip() or None
        if self.token is None:
            raise InvalidRequest("--follow needs --token or $BLACKOPS_TOKEN")
        self.after = after
        self._stop = threading.Event()
        self._lines: queue.Queue[bytes | BaseException] = queue.Queue(AHEAD)

    def __iter__(self) -> Iterator[bytes]:
        previous = {
            number: signal.signal(number, self._on_signal)
            for number in (signal.SIGINT, signal.SIGTERM)
        }
        reader = threading.Thread(target=self._read, name="blackops-follow", daemon=True)
        reader.start()
        try:
            while not self._stop.is_set():
                try:
                    item = self._lines.get(timeout=0.2)
                except queue.Empty:
                    continue
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self._stop.set()
            for number, handler in previous.items():
                signal.signal(number, handler)

    def close(self) -> None:
        self._stop.set()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stop.set()

    def _read(self) -> None:
        from blackops.client import Client

        try:
            with Client(self.base, self.token) as client:
                for streamed in client.stream(self.after, space=self.space):
                    while not self._stop.is_set():
                        try:
                            self._lines.put(streamed.line, timeout=0.2)
                            break
                        except queue.Full:
                            continue
                    if self._stop.is_set():
                        return
        except BlackOpsError as refused:  # a revoked token, no such Space, ...
            self._lines.put(refused)
        except Exception as error:  # handed to the main thread, which raises it
            self._lines.put(error)
