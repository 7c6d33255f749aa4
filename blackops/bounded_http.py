"""A standard-library HTTP server that a flood or a slow client cannot exhaust: at most
``max_connections`` connections at once and ``max_per_client`` of them from one address
(past that a new one is answered 503 and closed at once, holding no thread), and every
request must arrive within ``socket_timeout`` seconds of its start, however its bytes
trickle in (an idle keep-alive wait included). The witness (`blackops.witness.server`)
and a worker's ``--metrics-port`` (`blackops.observability.server`) are both served so
(decisions T4; the metrics port had neither: 300 idle connections held 300 threads, found
by a defect hunt, stop 40)."""

from __future__ import annotations

import io
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_BUSY_TEXT = b"too many connections\n"
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(_BUSY_TEXT), _BUSY_TEXT)
)


class BoundedHTTPServer(ThreadingHTTPServer):
    """A threading server with the bounds above; ``refused(client)`` is told of each
    connection turned away (a log line)."""

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        *,
        socket_timeout: float,
        max_connections: int,
        max_per_client: int,
        refused: Callable[[str], None] | None = None,
        bind_and_activate: bool = True,
    ) -> None:
        super().__init__(address, handler, bind_and_activate=bind_and_activate)
        self.socket_timeout = socket_timeout
        self.max_connections = max_connections
        self.max_per_client = max(1, min(max_per_client, max_connections))
        self.refused = refused
        self._count_lock = threading.Lock()
        self._open = 0
        self._by_client: dict[str, int] = {}

    def process_request(self, request: Any, client_address: Any) -> None:
        client = str(client_address[0])
        if not self._take_slot(client):  # full: answer at once, hold no thread
            if self.refused is not None:
                self.refused(client)
            if isinstance(request, socket.socket):
                try:
                    request.settimeout(1.0)
                    request.sendall(_BUSY)
                except OSError:
                    pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:  # no thread started: its slot is free again
            self._free_slot(client)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._free_slot(str(client_address[0]))

    def _take_slot(self, client: str) -> bool:
        """A slot, unless all are taken or this client holds its share (one address may not
        take every slot from the others)."""
        with self._count_lock:
            held = self._by_client.get(client, 0)
            if self._open >= self.max_connections or held >= self.max_per_client:
                return False
            self._open += 1
            self._by_client[client] = held + 1
            return True

    def _free_slot(self, client: str) -> None:
        with self._count_lock:
            self._open -= 1
            held = self._by_client.pop(client, 1) - 1
            if held:
                self._by_client[client] = held


class DeadlineHandler(BaseHTTPRequestHandler):
    """Reads each request within the server's ``socket_timeout`` of its start: a client
    sending a byte now and then held its thread (and its connection slot) for ever. Call
    `writing` before answering: the reads left the socket's timeout shorter."""

    server: BoundedHTTPServer

    def setup(self) -> None:
        super().setup()
        self._reader = _DeadlineReader(self.connection)
        self.rfile = io.BufferedReader(self._reader)

    def handle_one_request(self) -> None:
        self._reader.deadline = time.monotonic() + self.server.socket_timeout
        super().handle_one_request()

    def writing(self) -> None:
        self.connection.settimeout(self.server.socket_timeout)


class _DeadlineReader(io.RawIOBase):
    """A socket's reads, each allowed only what is left until ``deadline`` (monotonic)."""

    def __init__(self, connection: socket.socket) -> None:
        self.connection = connection
        self.deadline = float("inf")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request took longer than the server allows")
        self.connection.settimeout(left)
        return self.connection.recv_into(buffer)
