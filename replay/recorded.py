"""The Merkle leaves recorded at append time, read in position order a page at a time: what
an export and a live verification walk beside the events (one leaf per event, and the
leaves of purged events, whose rows are gone). `RecordedLeaves.take_matching` takes a page
of rows' leaves at once when every row's event hashes to its own (decisions F162)."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter

from journal.backend_common import StoredRow
from journal.leaves import leaf_hashes, page_entries
from journal.store import EventStore


@dataclass(frozen=True, slots=True)
class MatchedPage:
    """A page of rows whose recorded leaves all matched (`RecordedLeaves.take_matching`)."""

    positions: list[int]  # each row's position
    entries: list[bytes]  # each row's Merkle entry (its Observed line without the newline)
    leaves: list[bytes]  # each row's leaf, equal to the one recorded
    every: list[bytes]  # every leaf taken, in order: the rows' and purged positions' (to fold)


@dataclass(slots=True)
class RecordedLeaves:
    store: EventStore
    page: int  # leaves read at a time
    after: int = 0  # the position of the last leaf taken
    buffer: list[tuple[int, bytes]] = field(default_factory=list)
    next: int = 0  # the first leaf of ``buffer`` not taken yet (a pop(0) would move the rest)

    def _refilled(self) -> bool:
        """Read the next page of leaves once the buffer is used up; ``False`` past the last."""
        if self.next == len(self.buffer):
            self.buffer, self.next = self.store.read_leaves(self.after, self.page), 0
        return self.next < len(self.buffer)

    def peek(self) -> tuple[int, bytes] | None:
        """The next leaf, not taken; ``None`` past the last."""
        return self.buffer[self.next] if self._refilled() else None

    def ahead(self, count: int) -> list[tuple[int, bytes]]:
        """The next ``count`` leaves (fewer past the last), not taken."""
        if len(self.buffer) - self.next < count:
            rest = self.buffer[self.next :]
            last = rest[-1][0] if rest else self.after
            more = self.store.read_leaves(last, max(count, self.page))
            self.buffer, self.next = rest + more, 0
        return self.buffer[self.next : self.next + count]

    def for_rows(
        self, positions: list[int], purged: Collection[int]
    ) -> tuple[list[bytes], list[bytes]] | None:
        """The next recorded leaves through the row at ``positions[-1]``, not taken, when
        they are the rows' own, one each and in order, with only leaves of ``purged``
        positions between them (a retention purge deletes events, never their leaves):
        every one of them in order (to fold and take) and the rows' own (to compare with
        their events). ``None`` otherwise, or when more than a page of other leaves lies
        between them."""
        recorded = self.ahead(len(positions))
        if list(map(itemgetter(0), recorded)) == positions:  # the usual journal
            leaves = list(map(itemgetter(1), recorded))
            return leaves, leaves
        if not purged:
            return None
        # Read on through the last row, doubling, but past at most a page of other leaves:
        # rows far apart (much purged between them) go row by row, a page of leaves at a time.
        last, count, most = positions[-1], len(positions), len(positions) + self.page
        while len(recorded) == count and recorded[-1][0] < last:
            if count == most:
                return None
            count = min(2 * count, most)
            recorded = self.ahead(count)
        recorded = recorded[: bisect_right(recorded, last, key=itemgetter(0))]
        rows = set(positions)
        own = [(position, leaf) for position, leaf in recorded if position in rows]
        if list(map(itemgetter(0), own)) != positions:
            return None
        if any(position not in purged for position, _ in recorded if position not in rows):
            return None
        return list(map(itemgetter(1), recorded)), list(map(itemgetter(1), own))

    def take_matching(self, rows: list[StoredRow], purged: Collection[int]) -> MatchedPage | None:
        """Take a page's leaves when they are its rows' own (`for_rows`) and each row's event
        hashes to its own; else ``None`` and nothing is taken (go row by row)."""
        positions = list(map(attrgetter("id"), rows))
        recorded = self.for_rows(positions, purged)
        if recorded is None:
            return None
        every, own = recorded
        entries = page_entries(rows)
        if entries is None:
            return None
        leaves = leaf_hashes(entries)
        if own != leaves:
            return None
        self.take(len(every))
        return MatchedPage(positions, entries, leaves, every)

    def before(self, position: int) -> Iterator[list[tuple[int, bytes]]]:
        """Take every leaf before ``position``, a list per page read (what lies between one
        event and the next: the leaves of purged events, or of events gone)."""
        while self._refilled():
            end = bisect_left(self.buffer, position, lo=self.next, key=itemgetter(0))
            if end == self.next:
                return
            taken = self.buffer[self.next : end]
            self.next, self.after = end, taken[-1][0]
            yield taken
            if end < len(self.buffer):
                return

    def take(self, count: int = 1) -> None:
        """Move past the next ``count`` leaves, which `peek` or `ahead` has just shown."""
        if not 0 < count <= len(self.buffer) - self.next:
            raise ValueError("take only what peek or ahead has shown")
        self.next += count
        self.after = self.buffer[self.next - 1][0]
