"""A call bounded in time for tests of code that used to hang (a stream that never ended)."""

from __future__ import annotations

import threading
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
