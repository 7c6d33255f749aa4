"""Time bounds for tests: a call bounded in time (code that used to hang: a stream that never
ended), and a wait for a condition."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


def within(seconds: float, target: Callable[[], Any]) -> list[Any]:
    """``[result]`` or ``[exception]`` of ``target`` in a thread; ``[]`` if it still runs
    after ``seconds`` (the old stream never ended: the test must not hang with it)."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(target())
        except BaseException as raised:
            outcome.append(raised)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    return outcome


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``condition`` every 20 ms; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)
