"""What both replays of a replay check share, light enough for the child process that
makes the second ones (``replay_child.py``): a host that is never asked, and another
wall clock for one thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class _NoHost:
    """The host of a replay: never asked (``replay_only`` stops first); if it ever were,
    the check fails loudly rather than deciding anything."""

    def request(self, message: tuple[Any, ...]) -> tuple[Any, ...]:
        raise RuntimeError(f"a replay check asked the host for {message[0]!r}")


NO_HOST = _NoHost()


_REAL = {name: getattr(time, name) for name in ("time", "time_ns", "localtime", "gmtime", "ctime")}
_shifts: dict[int, float] = {}
_patch_lock = threading.Lock()
_patch_users = 0


def _shift() -> float | None:
    return _shifts.get(threading.get_ident())


def _time() -> float:
    shift = _shift()
    now: float = _REAL["time"]()
    return now if shift is None else now + shift


def _time_ns() -> int:
    shift = _shift()
    now: int = _REAL["time_ns"]()
    return now if shift is None else now + int(shift * 1_000_000_000)


def _at(name: str) -> Callable[..., Any]:
    real = _REAL[name]

    def shifted(seconds: float | None = None) -> Any:
        if seconds is None and _shift() is not None:
            seconds = _time()
        return real(seconds)

    shifted.__name__ = name
    return shifted


_PATCHED: dict[str, Callable[..., Any]] = {
    "time": _time,
    "time_ns": _time_ns,
    **{name: _at(name) for name in ("localtime", "gmtime", "ctime")},
}


@contextmanager
def shifted_clock(seconds: float) -> Iterator[None]:
    """``time.time()`` (and ``time_ns``, ``localtime``, ``gmtime``, ``ctime``) read
    ``seconds`` later in this thread only; other threads read the real clock."""
    global _patch_users
    with _patch_lock:
        if _patch_users == 0:
            for name, patched in _PATCHED.items():
                setattr(time, name, patched)
        _patch_users += 1
    _shifts[threading.get_ident()] = seconds
    try:
        yield
    finally:
        _shifts.pop(threading.get_ident(), None)
        with _patch_lock:
            _patch_users -= 1
            if _patch_users == 0:
                for name, real in _REAL.items():
                    setattr(time, name, real)
