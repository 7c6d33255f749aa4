"""The monitor's direct read of a store (``audit watch --store``): the latest signed
checkpoint journaled as ``journal.checkpoint``, with the witnesses' cosignatures kept for it
beside the journal (``blackops_cosignatures``, decisions T5: never in the journal), the
recorded leaves (the monitor recomputes each signed root from them: a journal truncated or
rewritten under a checkpoint already seen is found at the next check, decisions T9), and
consistency proofs from them. Whoever can read the database can run it; it
trusts the store no more than the service: every note is checked against the log's key,
every proof against the saved root, every cosignature against the witness's key."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress

from blackops.audit.tree import JournalTree
from blackops.witness.cosigned import CosignatureBook
from blackops.witness.sources import LogUnreadable
from domain.errors import BackendUnavailable
from journal.store import EventStore
from replay.notes import Checkpoint, NoteError, add_signature_lines, parse_note


@contextmanager
def _reading() -> Iterator[None]:
    """A store that cannot be reached is no finding about the log (decisions T7)."""
    try:
        yield
    except BackendUnavailable as error:
        raise LogUnreadable(f"the store cannot be read: {error}") from None


class StoreSource:
    def __init__(self, store: str) -> None:
        self.store = EventStore(store, create=False)  # a reader: never makes a journal
        self.book = CosignatureBook(self.store, read_only=True)  # nor the cosignatures table
        self._tree: JournalTree | None = None  # the leaves as read for this check

    def close(self) -> None:
        self.store.close()

    def note(self) -> str:
        self._tree = None  # a new check reads the leaves again: they may have been rewritten
        with _reading():
            events = self.store.read_topics(["journal.checkpoint"])
        for event in reversed(events):
            note = event.data.get("note")
            if isinstance(note, str):
                return self._cosigned(note)
        raise LookupError("the journal holds no signed checkpoint yet")

    def _cosigned(self, note: str) -> str:
        """``note`` with the cosignature lines kept for its checkpoint (checked by the
        monitor like every other line; a note that does not parse goes as it is)."""
        try:
            checkpoint = Checkpoint.parse(parse_note(note).text)
        except NoteError:
            return note
        with _reading():
            lines = self.book.lines(checkpoint)
        for line in lines:
            with suppress(NoteError):  # a malformed kept line is skipped, the others kept
                note = add_signature_lines(note, [line])
        return note

    def leaves(self) -> JournalTree:
        """Every leaf the store records, read once per check (a page at a time) into a fresh
        tree: the monitor recomputes the signed roots from it (decisions T9). O(n) reads
        and 40 bytes a leaf each check, as a consistency proof from the leaves already was."""
        if self._tree is None:
            tree = JournalTree(self.store)
            with _reading():
                tree.sync()
            self._tree = tree
        return self._tree

    def proof(self, old: int, new: int) -> Sequence[bytes]:
        tree = self.leaves()
        if tree.size < new:  # fewer leaves than a signed checkpoint: a finding, not an outage
            raise LookupError(f"the journal has {tree.size} leaves, fewer than {new}")
        return tree.consistency(old, new)
