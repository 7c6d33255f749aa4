"""Listening sockets bound before the process forks: a worker binds its ``--metrics-port``
before it opens anything (a port that is taken then changes nothing), and it forks its
executors (and replacements, at any time) while the socket is open. A forked child closes
its copy of each at once, or the port would stay bound by the executors after the worker
is killed. Light on purpose: it is imported before the executors fork."""

from __future__ import annotations

import os
import socket
import weakref

#: The sockets listening in this process, which a forked child closes.
_OPEN: weakref.WeakSet[socket.socket] = weakref.WeakSet()


def listen(host: str, port: int) -> socket.socket:
    """A TCP socket listening on ``host:port`` (IPv4; port 0: one the system chooses)."""
    listening = socket.create_server((host, port))
    _OPEN.add(listening)
    return listening


def _close_in_child() -> None:
    for listening in list(_OPEN):
        listening.close()  # the child's descriptor only; the parent still listens
    _OPEN.clear()


os.register_at_fork(after_in_child=_close_in_child)
