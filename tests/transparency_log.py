"""A tiny signed log for witness and monitor tests: leaves, RFC 6962 roots and proofs, and
checkpoints signed as C2SP notes (replay/merkle.py, replay/notes.py)."""

from __future__ import annotations

import hashlib

from replay.merkle import consistency_proof, root_of
from replay.notes import Checkpoint, SigningKey, sign_note


def observed_entry(n: int) -> str:
    """An Observed JSONL line as the journal writes it (RFC 8785): the entry a receipt
    proves, which its verifier reads as one (decisions A16)."""
    return (
        f'{{"at":"2026-11-30T09:00:00.000000Z","context":{{}},"data":{{"n":{n}}},'
        f'"position":{n + 1},"stream":"s","type":"t.created","version":{n + 1}}}'
    )


class ToyLog:
    def __init__(self, origin: str = "example.com/log", key: SigningKey | None = None) -> None:
        self.key = key or SigningKey.generate(origin)
        self.origin = origin
        self.leaves: list[bytes] = []

    def append(self, *entries: str) -> ToyLog:
        for entry in entries:
            self.leaves.append(hashlib.sha256(b"\x00" + entry.encode()).digest())
        return self

    def grow(self, n: int) -> ToyLog:
        return self.append(*(f"entry {len(self.leaves) + i}" for i in range(n)))

    def checkpoint(self, size: int | None = None) -> Checkpoint:
        size = len(self.leaves) if size is None else size
        return Checkpoint(self.origin, size, root_of(self.leaves[:size]))

    def note(self, size: int | None = None) -> str:
        return sign_note(self.checkpoint(size).body(), self.key)

    def proof(self, old: int, new: int | None = None) -> list[bytes]:
        new = len(self.leaves) if new is None else new
        if old == 0 or old == new:
            return []
        return consistency_proof(old, self.leaves[:new])
