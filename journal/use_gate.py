"""A store's calls in flight, so that closing the store waits for them.

eventsourcing's connection pools close the connections in use as well as the idle ones.
A SQLite connection closed while another thread's statement runs on it frees memory that
statement still uses: the process dies of SIGSEGV (a stream's tail thread reading while a
test closed its application did). The gate makes a close wait for the calls already
inside and refuses the ones that come after it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from domain.errors import BackendUnavailable


class UseGate:
    """Counts, per thread, the calls inside the store; ``close`` waits for the others."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._inside: dict[int, int] = {}  # thread ident -> calls it has inside (nested)
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """Inside the store for the block; ``backend_unavailable`` once it is closing."""
        me = threading.get_ident()
        with self._changed:
            if self._closed:
                raise BackendUnavailable("the journal store is closed")
            self._inside[me] = self._inside.get(me, 0) + 1
        try:
            yield
        finally:
            with self._changed:
                left = self._inside[me] - 1
                if left:
                    self._inside[me] = left
                else:
                    del self._inside[me]
                    self._changed.notify_all()

    def close(self, wait: float) -> bool:
        """Refuse new calls and wait up to ``wait`` seconds for the other threads' calls to
        leave (a call of the closing thread itself cannot leave before it returns); False:
        some were still inside when the time was up."""
        me = threading.get_ident()
        with self._changed:
            self._closed = True
            return self._changed.wait_for(lambda: not self._inside.keys() - {me}, timeout=wait)
