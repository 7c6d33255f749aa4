"""The error every whole-journal reader raises when the journal no longer says what was
appended (an export, the Observed JSONL pages and stream): a ``conflict`` naming the first
position where it does not."""

from __future__ import annotations

from domain.errors import BlackOpsError


class IntegrityError(BlackOpsError):
    """The journal no longer says what was appended; ``position`` is the first place."""

    def __init__(self, position: int, message: str) -> None:
        super().__init__("conflict", f"journal integrity: position {position}: {message}")
        self.position = position
