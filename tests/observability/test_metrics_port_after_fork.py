"""A worker's ``--metrics-port`` socket is not inherited by the executors it forks: once the
worker's server stops (or the worker is killed), the port is free even while a child that
was forked with it still runs."""

from __future__ import annotations

import multiprocessing
import socket
from multiprocessing.connection import Connection
from pathlib import Path

import httpx

from blackops import Application
from blackops.observability.listening import listen
from blackops.observability.metrics import Metrics
from blackops.observability.server import MetricsServer


def _child(ready: Connection, done: Connection) -> None:
    ready.send("forked")
    done.recv()  # live until the parent has tried the port


def _bindable(port: int) -> bool:
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # past a scrape's TIME_WAIT, but never beside a socket still listening (Linux)
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        probe.bind(("127.0.0.1", port))
        probe.listen()
        return True
    except OSError:
        return False
    finally:
        probe.close()


def test_a_forked_child_does_not_keep_the_metrics_port_bound(tmp_path: Path) -> None:
    app = Application(f"sqlite:///{tmp_path / 'journal.sqlite3'}")
    server = MetricsServer(Metrics(app.runtime), ["token"], listen("127.0.0.1", 0)).start()
    port = server.port
    assert not _bindable(port)  # listening
    context = multiprocessing.get_context("fork")  # as executors are started
    ready_child, ready_parent = context.Pipe()
    done_parent, done_child = context.Pipe()
    child = context.Process(target=_child, args=(ready_child, done_child))
    child.start()
    try:
        assert ready_parent.recv() == "forked"
        scrape = httpx.get(
            f"http://127.0.0.1:{port}/metrics", headers={"Authorization": "Bearer token"}
        )
        assert scrape.status_code == 200  # the worker itself still serves
        server.stop()
        assert _bindable(port), "the forked child still holds the metrics socket"
    finally:
        done_parent.send("exit")
        child.join(30)
        app.close()
