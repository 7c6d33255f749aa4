"""The journal's RFC 6962 tree, kept in memory beside the store: proofs in O(log n).

Leaf index i is the i-th recorded leaf in position order (``journal/leaves.py`` records
one per event at append time). Positions may skip numbers (a PostgreSQL sequence does),
and a retention purge deletes events but never their leaves, so a purged event keeps its
leaf index and a receipt for it still verifies. ``index_of(position)`` maps a position to
its leaf index; ``position_of(index)`` the other way.

Kept: every leaf (32 bytes), every position, and the hash of every complete aligned
subtree of 256 leaves and more. A subtree hash is then at most 255 hashings of leaves in
memory plus one lookup, and an audit path or a consistency proof costs O(log n) lookups
whatever the journal's length.
"""

from __future__ import annotations

import threading
from array import array
from bisect import bisect_left, bisect_right
from operator import attrgetter

from journal.backend_common import StoredRow
from journal.leaves import event_leaf, leaf_hashes, page_entries
from journal.store import EventStore
from replay.merkle import EMPTY_ROOT, consistency_in, node_hash, path_in, root_of
from replay.observed import canonical_faults

TILE = 256  # leaves under the smallest kept subtree hash
_TILE_BITS = 8
_PAGE = 5000


class LeafMismatch(Exception):
    """A leaf the store holds differs from the one this tree folded in earlier."""

    def __init__(self, position: int, message: str) -> None:
        super().__init__(message)
        self.position = position


class JournalTree:
    """The tree over a store's recorded leaves; ``sync()`` folds in what was appended."""

    def __init__(self, store: EventStore) -> None:
        self._store = store
        self._lock = threading.RLock()
        self._positions = array("q")
        self._leaves = bytearray()
        self._levels: list[list[bytes]] = [[]]  # levels[k][j]: subtree of TILE·2^k leaves

    @property
    def size(self) -> int:
        return len(self._positions)

    def sync(self, *, recheck: bool = False) -> int:
        """Fold in the leaves recorded since the last sync; returns the tree size.

        ``recheck`` first re-reads every leaf already folded in and raises
        ``LeafMismatch`` at the first one the store no longer holds as it was (rewritten,
        deleted, or a different position): what the checkpoint signer does before signing.
        """
        with self._lock:
            if recheck:
                self._recheck()
            after = self._positions[-1] if self._positions else 0
            while leaves := self._store.read_leaves(after, _PAGE):
                for position, leaf in leaves:
                    self._append(position, leaf)
                after = leaves[-1][0]
            return self.size

    def _recheck(self, start: int = 0, end: int | None = None) -> None:
        end = self.size if end is None else end
        index = start
        after = self._positions[start - 1] if start else 0
        while index < end:
            leaves = self._store.read_leaves(after, min(_PAGE, end - index))
            if not leaves:
                raise LeafMismatch(
                    self._positions[index], "leaves this tree holds are gone from the journal"
                )
            stop = index + len(leaves)
            same_positions = array("q", (p for p, _ in leaves)) == self._positions[index:stop]
            same_leaves = (
                b"".join(leaf for _, leaf in leaves) == self._leaves[32 * index : 32 * stop]
            )
            if not (same_positions and same_leaves):  # find the first difference
                for offset, (position, leaf) in enumerate(leaves):
                    here = index + offset
                    if position != self._positions[here] or leaf != self._leaf(here):
                        first = min(position, self._positions[here])
                        raise LeafMismatch(
                            first, "a recorded leaf differs from the one signed over"
                        )
            index = stop
            after = leaves[-1][0]

    def recheck(self, start: int, end: int) -> None:
        """Re-read the leaves of indexes ``[start, end)`` from the store, and re-hash the
        events still there (a purged event keeps its leaf: nothing to re-hash); raises
        ``LeafMismatch`` at the first that differs from what this tree folded in."""
        with self._lock:
            if not 0 <= start <= end <= self.size:
                raise ValueError("leaf range outside the tree")
            if start == end:
                return
            self._recheck(start, end)
            self._rehash(start, end)

    def _rehash(self, start: int, end: int) -> None:
        after = self._positions[start - 1] if start else 0
        last = self._positions[end - 1]
        while after < last:
            # At most one event a leaf in the range: read no more than the range needs.
            events = self._store.read_raw_after(after, min(_PAGE, end - start))
            if not events:
                return
            page = events[: bisect_right(events, last, key=attrgetter("id"))]
            if page and not self._rehashed_at_once(page):
                self._rehash_each(page)
            faults = canonical_faults(list(map(attrgetter("state"), page)))
            if faults:  # the offline check of an export, or of a receipt, refuses it
                first = min(faults)
                raise LeafMismatch(page[first].id, f"an event signed over is {faults[first]}")
            if len(page) < len(events):
                return
            after = events[-1].id

    def _rehashed_at_once(self, events: list[StoredRow]) -> bool:
        """Do ``events``, each with the leaf at the next index, all hash to those leaves
        (the usual journal: nothing purged among them)? ``False`` leaves the page to
        `_rehash_each`, which names the first that differs."""
        first = self.index_of(events[0].id)
        if first is None:
            return False
        stop = first + len(events)
        if array("q", map(attrgetter("id"), events)) != self._positions[first:stop]:
            return False
        entries = page_entries(events)
        if entries is None:
            return False
        return b"".join(leaf_hashes(entries)) == self._leaves[32 * first : 32 * stop]

    def _rehash_each(self, events: list[StoredRow]) -> None:
        for event in events:
            index = self.index_of(event.id)
            if index is None:
                continue  # an event without a leaf: ``blackops verify`` reports it
            try:
                leaf = event_leaf(
                    event.id,
                    str(event.originator_id),
                    event.originator_version,
                    event.topic,
                    event.state,
                )
            except ValueError:
                leaf = b""
            if leaf != self._leaf(index):
                raise LeafMismatch(event.id, "an event no longer hashes to the leaf signed over")

    def _append(self, position: int, leaf: bytes) -> None:
        self._positions.append(position)
        self._leaves += leaf
        size = self.size
        if size % TILE:
            return
        start = size - TILE
        node = root_of(self._leaf(i) for i in range(start, size))
        level = 0
        while True:
            self._levels[level].append(node)
            count = len(self._levels[level])
            if count % 2:
                return
            node = node_hash(self._levels[level][count - 2], node)
            level += 1
            if level == len(self._levels):
                self._levels.append([])

    def _leaf(self, index: int) -> bytes:
        return bytes(self._leaves[32 * index : 32 * index + 32])

    # -- reading ----------------------------------------------------------------------------

    def leaf(self, index: int) -> bytes:
        with self._lock:
            if not 0 <= index < self.size:
                raise IndexError("leaf index outside the tree")
            return self._leaf(index)

    def index_of(self, position: int) -> int | None:
        """The leaf index of the event at ``position`` (None: no leaf there)."""
        with self._lock:
            index = bisect_left(self._positions, position)
            if index < self.size and self._positions[index] == position:
                return index
            return None

    def position_of(self, index: int) -> int:
        with self._lock:
            return self._positions[index]

    def count_through(self, position: int) -> int:
        """How many leaves have positions up to ``position``."""
        with self._lock:
            return bisect_right(self._positions, position)

    def prefix_nodes(self, size: int) -> list[bytes]:
        """The perfect-subtree roots of the first ``size`` leaves, largest first
        (``replay.merkle.Frontier.restore`` continues the tree from them)."""
        with self._lock:
            nodes, start = [], 0
            for bit in range(size.bit_length() - 1, -1, -1):
                if size >> bit & 1:
                    nodes.append(self._subtree(start, start + (1 << bit)))
                    start += 1 << bit
            return nodes

    def root(self, size: int | None = None) -> bytes:
        with self._lock:
            size = self.size if size is None else size
            if not 0 <= size <= self.size:
                raise ValueError("size outside the tree")
            return EMPTY_ROOT if size == 0 else self._subtree(0, size)

    def inclusion(self, index: int, size: int) -> list[bytes]:
        """The audit path of leaf ``index`` in the tree of ``size`` leaves."""
        with self._lock:
            if not 0 <= index < size <= self.size:
                raise ValueError("index and size outside the tree")
            return path_in(index, size, self._subtree)

    def consistency(self, old_size: int, new_size: int) -> list[bytes]:
        with self._lock:
            if not 0 < old_size <= new_size <= self.size:
                raise ValueError("sizes outside the tree")
            return consistency_in(old_size, new_size, self._subtree)

    def _subtree(self, start: int, end: int) -> bytes:
        n = end - start
        if n & (n - 1) == 0 and start % n == 0:  # complete and aligned
            if n >= TILE:
                return self._levels[n.bit_length() - 1 - _TILE_BITS][start // n]
            return root_of(self._leaf(i) for i in range(start, end))
        k = 1 << ((n - 1).bit_length() - 1)  # the largest power of two below n
        return node_hash(self._subtree(start, start + k), self._subtree(start + k, end))
