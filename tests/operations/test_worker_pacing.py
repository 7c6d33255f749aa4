"""The busy Deferred coordinator's pause (decisions F111) against a stop and the lease."""

from __future__ import annotations

import queue
import threading
import time

from blackops.worker import Worker


class BusyCoordinator:
    """What `Worker._work` reads of its worker, with every turn claiming something."""

    def __init__(self, wake_delay: float, lease_seconds: float = 30.0) -> None:
        self.wake_delay, self.lease_seconds = wake_delay, lease_seconds
        self._stop_requested = threading.Event()
        self._wake, self._notified = threading.Event(), threading.Event()
        self._finished: queue.Queue[object] = queue.Queue()
        self.completed, self._next_due = 0, None
        self.turns: list[tuple[float, bool, bool]] = []  # (when, claim, stop requested)

    def _turn(self, *, claim: bool) -> int:
        self.turns.append((time.monotonic(), claim, self._stop_requested.is_set()))
        return 1

    def _heartbeat(self) -> None:
        pass

    def _idle_timeout(self) -> float:
        return 1.0


def run(coordinator: BusyCoordinator, seconds: float) -> None:
    thread = threading.Thread(target=Worker._work, args=(coordinator,))
    thread.start()
    time.sleep(seconds)
    coordinator._stop_requested.set()  # what request_stop() does
    coordinator._wake.set()
    thread.join(5)
    assert not thread.is_alive()


def test_a_stop_during_the_pause_claims_nothing_more() -> None:
    coordinator = BusyCoordinator(wake_delay=0.5)
    run(coordinator, 0.1)  # the first turn is done; the stop comes during the pause
    assert [(claim, stop) for _, claim, stop in coordinator.turns if stop] in ([], [(False, True)])
    assert all(claim for _, claim, stop in coordinator.turns if not stop)


def test_the_pause_never_outlasts_a_tenth_of_the_lease() -> None:
    coordinator = BusyCoordinator(wake_delay=60.0, lease_seconds=1.0)
    run(coordinator, 0.55)
    starts = [at for at, _, stop in coordinator.turns if not stop]
    assert len(starts) >= 4, starts  # about one turn every 0.1 s, not one a minute
