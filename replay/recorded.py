"""The Merkle leaves recorded at append time, read in position order a page at a time: what
an export and a live verification walk beside the events (one leaf per event, and the
leaves of purged events, whose rows are gone)."""

from __future__ import annotations

from dataclasses import dataclass, field

from journal.store import EventStore

PAGE = 2000


@dataclass(slots=True)
class RecordedLeaves:
    store: EventStore
    page: int = PAGE
    after: int = 0  # the position of the last leaf taken
    buffer: list[tuple[int, bytes]] = field(default_factory=list)
    next: int = 0  # the first leaf of ``buffer`` not taken yet (a pop(0) would move the rest)

    def peek(self) -> tuple[int, bytes] | None:
        """The next leaf, not taken; ``None`` past the last."""
        if self.next == len(self.buffer):
            self.buffer, self.next = self.store.read_leaves(self.after, self.page), 0
            if not self.buffer:
                return None
        return self.buffer[self.next]

    def ahead(self, count: int) -> list[tuple[int, bytes]]:
        """The next ``count`` leaves (fewer past the last), not taken."""
        if len(self.buffer) - self.next < count:
            rest = self.buffer[self.next :]
            last = rest[-1][0] if rest else self.after
            more = self.store.read_leaves(last, max(count, self.page))
            self.buffer, self.next = rest + more, 0
        return self.buffer[self.next : self.next + count]

    def take(self, count: int = 1) -> None:
        """Move past the next ``count`` leaves (seen by `peek` or `ahead`)."""
        self.next += count
        self.after = self.buffer[self.next - 1][0]
