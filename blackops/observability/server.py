"""A worker's ``--metrics-port``: a small HTTP server answering ``GET /metrics`` (the same
body and the same token rule as ``blackops serve``'s route: the metrics token or the
system token; anything else 401, and no figures), on a socket bound beforehand
(`blackops.observability.listening`, which also closes it in every forked child). Bounded
as the witness is (`blackops.bounded_http`): a scraper's request arrives within
``SOCKET_TIMEOUT`` seconds, and ``MAX_CONNECTIONS`` at once (``MAX_PER_CLIENT`` from one
address); it had no timeout and no limit, so idle connections held a thread each."""

from __future__ import annotations

import hmac
import socket
import threading
from collections.abc import Sequence

from blackops.bounded_http import BoundedHTTPServer, DeadlineHandler
from blackops.observability.metrics import CONTENT_TYPE, Metrics

SOCKET_TIMEOUT = 10.0
MAX_CONNECTIONS = 16
MAX_PER_CLIENT = 4


class MetricsServer:
    """Serves ``metrics`` on ``listening`` (a socket from `listening.listen`) in a daemon
    thread until :meth:`stop`."""

    def __init__(self, metrics: Metrics, tokens: Sequence[str], listening: socket.socket) -> None:
        allowed = [t.encode() for t in tokens if t]
        if not allowed:
            raise ValueError("a metrics server needs a token (--metrics-token or the system token)")

        class Handler(DeadlineHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server names it)
                if self.path.split("?")[0] != "/metrics":
                    self._answer(404, b'{"error":{"code":"not_found"}}', "application/json")
                    return
                supplied = self.headers.get("Authorization", "")
                scheme, _, token = supplied.partition(" ")
                if scheme.lower() != "bearer" or not any(
                    hmac.compare_digest(token.strip().encode(), t) for t in allowed
                ):
                    self._answer(401, b'{"error":{"code":"unauthorized"}}', "application/json")
                    return
                self._answer(200, metrics.render(), CONTENT_TYPE)

            def _answer(self, status: int, body: bytes, kind: str) -> None:
                self.writing()
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                if status == 401:
                    self.send_header("WWW-Authenticate", "Bearer")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass  # scrapes every few seconds would drown the worker's own lines

        self._server = BoundedHTTPServer(
            listening.getsockname()[:2], Handler, socket_timeout=SOCKET_TIMEOUT,
            max_connections=MAX_CONNECTIONS, max_per_client=MAX_PER_CLIENT,
            bind_and_activate=False,
        )  # fmt: skip
        self._server.socket.close()  # the one it made; it serves the socket bound before
        self._server.socket = listening
        self._server.server_address = listening.getsockname()[:2]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="blackops-metrics", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
