"""Listening sockets of a process that forks: ``serve``'s HTTP socket and a worker's
``--metrics-port`` are bound before anything opens (a port that is taken then changes
nothing), and the executors fork (replacements at any time) while they are open. A forked
child closes its copy of each at once: else the port stayed bound by the executors after
the server closed it or was killed, and the kernel still accepted connections nobody would
answer (``serve``'s was, found by review, stop 36). Light on purpose: it is imported before
the executors fork."""

from __future__ import annotations

import os
import socket
import weakref

#: The sockets listening in this process, which a forked child closes.
_OPEN: weakref.WeakSet[socket.socket] = weakref.WeakSet()


def listen(host: str, port: int, backlog: int = 128) -> socket.socket:
    """A TCP socket listening on ``host:port`` (IPv6 when the host has a colon; port 0:
    one the system chooses), closed in every child forked while it is open. Raises what
    binding raises: an ``OSError`` (a port in use, a host this machine does not have), a
    ``UnicodeError``, ``ValueError`` or ``TypeError`` (a host that is no name: a NUL, a
    label IDNA cannot encode)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listening = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listening.bind((host, port))
        listening.listen(backlog)
    except BaseException:
        listening.close()
        raise
    _OPEN.add(listening)
    return listening


def _close_in_child() -> None:
    for listening in list(_OPEN):
        listening.close()  # the child's descriptor only; the parent still listens
    _OPEN.clear()


os.register_at_fork(after_in_child=_close_in_child)
