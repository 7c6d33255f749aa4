"""The monitor's direct read of a store (``audit watch --store``): the latest signed
checkpoint journaled as ``journal.checkpoint``, with the witnesses' cosignatures kept for it
beside the journal (``blackops_cosignatures``, decisions T5: never in the journal), and
consistency proofs from the recorded leaves. Whoever can read the database can run it; it
trusts the store no more than the service: every note is checked against the log's key,
every proof against the saved root, every cosignature against the witness's key."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress

from blackops.witness.cosigned import CosignatureBook
from blackops.witness.sources import LogUnreadable
from domain.errors import BackendUnavailable
from journal.store import EventStore
from replay.merkle import consistency_proof
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

    def close(self) -> None:
        self.store.close()

    def note(self) -> str:
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

    def proof(self, old: int, new: int) -> Sequence[bytes]:
        leaves: list[bytes] = []
        after = 0
        while len(leaves) < new:
            with _reading():
                page = self.store.read_leaves(after, 5000)
            if not page:
                break
            leaves.extend(leaf for _, leaf in page)
            after = page[-1][0]
        if len(leaves) < new:  # fewer leaves than a signed checkpoint: a finding, not an outage
            raise LookupError(f"the journal has {len(leaves)} leaves, fewer than {new}")
        return consistency_proof(old, leaves[:new])
