"""A worker's ``--metrics-port``: a small HTTP server answering ``GET /metrics`` (the same
body and the same token rule as ``blackops serve``'s route: the metrics token or the
system token; anything else 401, and no figures), on a socket bound beforehand
(`blackops.observability.listening`, which also closes it in every forked child)."""

from __future__ import annotations

import hmac
import socket
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from blackops.observability.metrics import CONTENT_TYPE, Metrics


class MetricsServer:
    """Serves ``metrics`` on ``listening`` (a socket from `listening.listen`) in a daemon
    thread until :meth:`stop`."""

    def __init__(self, metrics: Metrics, tokens: Sequence[str], listening: socket.socket) -> None:
        allowed = [t.encode() for t in tokens if t]
        if not allowed:
            raise ValueError("a metrics server needs a token (--metrics-token or the system token)")

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
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
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                if status == 401:
                    self.send_header("WWW-Authenticate", "Bearer")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass  # scrapes every few seconds would drown the worker's own lines

        self._server = ThreadingHTTPServer(
            listening.getsockname()[:2], Handler, bind_and_activate=False
        )
        self._server.socket.close()  # the one it made; it serves the socket bound before
        self._server.socket = listening
        self._server.server_address = listening.getsockname()[:2]
        self._server.daemon_threads = True
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
