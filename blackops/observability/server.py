"""A worker's ``--metrics-port``: a small HTTP server answering ``GET /metrics`` (the same
body and the same token rule as ``blackops serve``'s route: the metrics token or the
system token; anything else 401, and no figures).

A worker forks its executors (and replacements, at any time) while the server listens: a
child closes its copy of every listening socket at once, or the port would stay bound by
the executors after the worker is killed.
"""

from __future__ import annotations

import hmac
import os
import threading
import weakref
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from blackops.observability.metrics import CONTENT_TYPE, Metrics

#: The servers listening in this process, whose sockets a forked child closes.
_LISTENING: weakref.WeakSet[MetricsServer] = weakref.WeakSet()


def _close_in_child() -> None:
    for server in list(_LISTENING):
        server._server.socket.close()  # the child's descriptor only; the parent still listens
    _LISTENING.clear()


os.register_at_fork(after_in_child=_close_in_child)


class MetricsServer:
    """Serves ``metrics`` on ``host:port`` in a daemon thread until :meth:`stop`."""

    def __init__(self, metrics: Metrics, tokens: Sequence[str], host: str, port: int) -> None:
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

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        _LISTENING.add(self)
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
        _LISTENING.discard(self)
        self._server.shutdown()
        self._server.server_close()
