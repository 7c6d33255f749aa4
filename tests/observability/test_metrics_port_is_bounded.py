"""A worker's ``--metrics-port`` cannot be held by idle or slow connections: each request
must arrive within its timeout and connections past the limit are answered 503 at once
(it had neither: 300 idle connections held 300 of the worker's threads for good; found by
a defect hunt, stop 40). The bounds are the witness's (`blackops.bounded_http`)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from blackops import Application
from blackops.observability import server as metrics_server
from blackops.observability.listening import listen
from blackops.observability.metrics import Metrics
from blackops.observability.server import MetricsServer


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    monkeypatch.setattr(metrics_server, "SOCKET_TIMEOUT", 0.5)
    monkeypatch.setattr(metrics_server, "MAX_CONNECTIONS", 4)
    monkeypatch.setattr(metrics_server, "MAX_PER_CLIENT", 3)
    app = Application(f"sqlite:///{tmp_path / 'journal.sqlite3'}")
    server = MetricsServer(Metrics(app.runtime), ["token"], listen("127.0.0.1", 0)).start()
    try:
        yield server.port
    finally:
        server.stop()
        app.close()


def _idle(port: int) -> socket.socket:
    connection = socket.create_connection(("127.0.0.1", port), timeout=5)
    return connection


def test_idle_connections_are_dropped_and_extra_ones_refused(served: int) -> None:
    idle = [_idle(served) for _ in range(3)]  # one address's share (3 of 4)
    time.sleep(0.1)  # each has its slot
    extra = _idle(served)
    extra.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert extra.recv(1024).startswith(b"HTTP/1.1 503")  # at once, no thread taken
    extra.close()
    other = socket.create_connection(
        ("127.0.0.1", served), timeout=5, source_address=("127.0.0.2", 0)
    )  # another address
    other.sendall(b"GET /metrics HTTP/1.0\r\nAuthorization: Bearer token\r\n\r\n")
    assert other.recv(1024).startswith(b"HTTP/1.0 200")  # the fourth slot was still free
    other.close()
    trickle = idle[0]
    trickle.sendall(b"GET /met")  # a byte now and then does not keep it
    for connection in idle:
        connection.settimeout(5)
        assert connection.recv(1024) == b""  # closed by the server after its timeout
        connection.close()
    scrape = httpx.get(
        f"http://127.0.0.1:{served}/metrics", headers={"Authorization": "Bearer token"}
    )
    assert scrape.status_code == 200 and b"blackops" in scrape.content
