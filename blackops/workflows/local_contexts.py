"""Contexts running in a thread of this process (``work_until_idle``): such code cannot be
killed, so its lease running out proves nothing about its stop (see ``terminate()``)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

_RUNNING: set[str] = set()
_LOCK = threading.Lock()


def running_inline(stream: str) -> bool:
    """Whether a context of ``stream`` runs in a thread of this process now."""
    with _LOCK:
        return stream in _RUNNING


@contextlib.contextmanager
def running_here(stream: str) -> Iterator[None]:
    with _LOCK:
        _RUNNING.add(stream)
    try:
        yield
    finally:
        with _LOCK:
            _RUNNING.discard(stream)
