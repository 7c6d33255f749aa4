"""The cosignatures ``serve`` publishes with its checkpoints are kept only for the newest
notes (blackops/audit/checkpoints.py): a long-running service does not grow them forever."""

from __future__ import annotations

from transparency_log import ToyLog

from blackops.audit.checkpoints import RECENT_CHECKPOINTS, CheckpointService
from blackops.testing import FakeClock
from journal.store import EventStore
from replay import cosignature
from replay.notes import COSIGNATURE_KEY, SigningKey


def test_only_the_newest_notes_keep_their_cosignatures() -> None:
    store = EventStore("memory://")
    service = CheckpointService(store, None, FakeClock())
    log = ToyLog()
    witness = SigningKey.generate("w1.example", COSIGNATURE_KEY)
    published: list[tuple[str, str]] = []
    for _ in range(RECENT_CHECKPOINTS + 5):  # one cosigned checkpoint after another
        log.grow(1)
        line = cosignature.cosign(log.checkpoint().body(), witness, 1_700_000_000).line()
        service.add_cosignatures(log.note(), [line])
        published.append((log.note(), line))
    assert len(service._cosignatures) == RECENT_CHECKPOINTS  # before: one per checkpoint
    for note, _ in published[:5]:
        assert service.with_cosignatures(note) == note
    for note, line in published[5:]:
        assert service.with_cosignatures(note) == note + line
    # More lines for a note it keeps are added to it, not counted as another note.
    newest, line = published[-1]
    other = SigningKey.generate("w2.example", COSIGNATURE_KEY)
    extra = cosignature.cosign(log.checkpoint().body(), other, 1_700_000_001).line()
    service.add_cosignatures(newest, [line, extra])
    assert service.with_cosignatures(newest) == newest + line + extra
    assert service.with_cosignatures(published[5][0]) == published[5][0] + published[5][1]
