"""Threads for reads whose cost one caller chooses, apart from the API's own thread pool.

``run_in_threadpool`` borrows from anyio's default limiter (40 threads), which every API
route shares: a tenant that keeps many journal scans or streams busy there made every
other tenant's requests queue behind them. A :class:`Capacity` runs such work in worker
threads of its own count (``total`` at once), and at most ``per_key`` at once for one key,
the tenant the reads are for (`reader_key`: the Space read), so one tenant queues behind
itself, not others behind it. Keyed by principal, a Space admin's few extra principals
(made over HTTP) filled every thread and slowed another Space's pages ten times (found by
a defect hunt, stop 40).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import anyio
import anyio.to_thread

T = TypeVar("T")


@dataclass(slots=True)
class _Key:
    semaphore: asyncio.Semaphore
    users: int = 0


@dataclass(slots=True)
class _Loop:
    """One event loop's share: anyio's limiter and asyncio's semaphores are bound to a loop
    (a server has one; a TestClient without ``with`` runs a loop per request)."""

    limiter: anyio.CapacityLimiter
    keys: dict[str, _Key] = field(default_factory=dict)


class Capacity:
    """At most ``total`` threads at once for this kind of work, ``per_key`` for one key."""

    def __init__(self, total: int, per_key: int) -> None:
        if not 1 <= per_key <= total:
            raise ValueError("need 1 <= per_key <= total")
        self.total, self.per_key = total, per_key
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Loop] = (
            weakref.WeakKeyDictionary()
        )

    def _share(self) -> _Loop:
        loop = asyncio.get_running_loop()
        share = self._loops.get(loop)
        if share is None:
            share = self._loops[loop] = _Loop(anyio.CapacityLimiter(self.total))
        return share

    async def run(self, key: str, work: Callable[..., T], *args: object) -> T:
        share = self._share()
        entry = share.keys.get(key)
        if entry is None:
            entry = share.keys[key] = _Key(asyncio.Semaphore(self.per_key))
        entry.users += 1
        try:
            async with entry.semaphore:
                return await anyio.to_thread.run_sync(work, *args, limiter=share.limiter)
        finally:
            entry.users -= 1
            if entry.users == 0:  # no map that grows with every principal ever seen
                share.keys.pop(key, None)

    def borrowed(self) -> int:
        """Threads this loop's share has in use now (tests, metrics)."""
        share = self._loops.get(asyncio.get_running_loop())
        return 0 if share is None else int(share.limiter.borrowed_tokens)


def reader_key(principal: str, space: str | None) -> str:
    """Whose share a read takes: the Space it reads (whichever of its principals asks), or,
    for the whole journal (system principals only), the principal's own."""
    return f"space:{space}" if space is not None else f"principal:{principal}"


#: The journal streams' reads (catch-up pages, start checks, access re-checks).
STREAM_READS = Capacity(total=8, per_key=2)
#: One Space's journal pages (a scan among every Space's lines).
SPACE_READS = Capacity(total=4, per_key=2)
#: Exports (a whole range read, hashed and held in memory): one at a time per Space.
EXPORT_READS = Capacity(total=2, per_key=1)
