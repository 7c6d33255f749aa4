"""The witnesses of a running service: push its checkpoints, publish their cosignatures.

:func:`start_witnessing` hangs a :class:`WitnessPusher` on the checkpoint signer (a new
checkpoint wakes it) and, each round, hands the cosignatures the book holds for the newest
checkpoint to the signer, so ``GET /v1/checkpoint`` publishes them — also when another
process of the service (a worker with ``--witness``) collected them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from blackops.witness.cosigned import CosignatureBook
from blackops.witness.push import WitnessPusher, WitnessTarget
from replay.notes import Checkpoint, NoteError, parse_note

if TYPE_CHECKING:
    from blackops.audit.checkpoints import CheckpointService


def start_witnessing(
    service: CheckpointService, targets: Sequence[WitnessTarget], *, poll_seconds: float = 5.0
) -> WitnessPusher:
    book = CosignatureBook(service.store)

    def proof(old: int, new: int) -> list[bytes]:
        return list(service.synced_tree().consistency(old, new))

    def publish() -> None:
        note = service.latest()
        if note is None:
            return
        with contextlib.suppress(NoteError):
            lines = book.lines(Checkpoint.parse(parse_note(note).text))
            if lines:
                service.add_cosignatures(note, lines)

    pusher = WitnessPusher(
        book, targets, service.latest, proof, poll_seconds=poll_seconds, after_round=publish
    )
    service.listeners.append(lambda _note: pusher.notify())
    return pusher.start()
