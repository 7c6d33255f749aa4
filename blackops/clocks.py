"""The real clock; tests inject ``blackops.testing.FakeClock`` instead."""

from __future__ import annotations

import time
from datetime import UTC, datetime


class SystemClock:
    """Wall-clock UTC time."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)
