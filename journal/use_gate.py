"""A store's calls in flight, so that closing the store waits for them.

eventsourcing's connection pools close the connections in use as well as the idle ones.
A SQLite connection closed while another thread's statement runs on it frees memory that
statement still uses: the process dies of SIGSEGV (a stream's tail thread reading while a
test closed its application did). The gate makes a close wait for the calls already
inside and refuses the ones that come after it.
"""

from __future__ import annotations

import threading

from domain.errors import BackendUnavailable


class UseGate:
    """Counts, per thread, the calls inside the store; ``close`` waits for the others.

    ``enter`` and ``leave`` are plain methods, not a generator context manager: they run
    around every store call (a generator's frames cost more than the count itself)."""

    def __init__(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._inside: dict[int, int] = {}  # thread ident -> calls it has inside (nested)
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def enter(self) -> None:
        """A call begins; ``backend_unavailable`` once the store is closing."""
        me = threading.get_ident()
        with self._changed:
            if self._closed:
                raise BackendUnavailable("the journal store is closed")
            inside = self._inside
            inside[me] = inside.get(me, 0) + 1

    def leave(self) -> None:
        """The call `enter` began has returned (or raised)."""
        me = threading.get_ident()
        with self._changed:
            inside = self._inside
            left = inside[me] - 1
            if left:
                inside[me] = left
            else:
                del inside[me]
                if self._closed:
                    self._changed.notify_all()

    def close(self, wait: float) -> bool:
        """Refuse new calls and wait up to ``wait`` seconds for the other threads' calls to
        leave (a call of the closing thread itself cannot leave before it returns); False:
        some were still inside when the time was up."""
        me = threading.get_ident()
        with self._changed:
            self._closed = True
            return self._changed.wait_for(lambda: not self._inside.keys() - {me}, timeout=wait)
