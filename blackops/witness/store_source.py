"""The monitor's direct read of a store (``audit watch --store``): the latest signed
checkpoint journaled as ``journal.checkpoint`` and consistency proofs from the recorded
leaves. Whoever can read the database can run it; it trusts the store no more than the
service: every note is checked against the log's key, every proof against the saved root."""

from __future__ import annotations

from collections.abc import Sequence

from journal.store import EventStore
from replay.merkle import consistency_proof


class StoreSource:
    def __init__(self, store: str) -> None:
        self.store = EventStore(store, create=False)  # a reader: never makes a journal

    def note(self) -> str:
        events = self.store.read_topics(["journal.checkpoint"])
        for event in reversed(events):
            note = event.data.get("note")
            if isinstance(note, str):
                return note
        raise LookupError("the journal holds no signed checkpoint yet")

    def proof(self, old: int, new: int) -> Sequence[bytes]:
        leaves: list[bytes] = []
        after = 0
        while len(leaves) < new:
            page = self.store.read_leaves(after, 5000)
            if not page:
                break
            leaves.extend(leaf for _, leaf in page)
            after = page[-1][0]
        if len(leaves) < new:
            raise LookupError(f"the journal has {len(leaves)} leaves, fewer than {new}")
        return consistency_proof(old, leaves[:new])
