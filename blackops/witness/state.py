"""A witness's memory: the latest checkpoint it cosigned for each origin, kept durably.

One file per origin in the state directory, named by SHA-256(origin) in hex (the tlog-witness
monitoring path), holding the cosigned note (the log's signature and the witness's). A write
goes to a temporary file, is fsynced, renamed over the old one and the directory fsynced: a
crash leaves the old checkpoint or the new one, never a torn one. :meth:`WitnessState.locked`
serialises every check-and-update, between threads and between processes sharing the
directory (an exclusive ``flock``), so two requests can never roll the size back (the race
tlog-witness describes).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from replay.notes import Checkpoint, NoteError, parse_note


class WitnessState:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    @staticmethod
    def origin_hash(origin: str) -> str:
        return hashlib.sha256(origin.encode()).hexdigest()

    def path(self, origin: str) -> Path:
        return self.directory / f"{self.origin_hash(origin)}.checkpoint"

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the state exclusively (this process's threads and other processes)."""
        with self._lock, open(self.directory / ".lock", "a") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def note(self, origin: str) -> str | None:
        """The cosigned note kept for ``origin``, or None if it never cosigned one."""
        return self._read(self.path(origin))

    def note_by_hash(self, origin_hash: str) -> str | None:
        if len(origin_hash) != 64 or any(c not in "0123456789abcdef" for c in origin_hash):
            return None
        return self._read(self.directory / f"{origin_hash}.checkpoint")

    @staticmethod
    def _read(path: Path) -> str | None:
        """A state file's text; one that is there but unreadable is a RuntimeError (the
        server answers 500: forgetting it would let a rolled-back log be cosigned)."""
        try:
            return path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as error:
            raise RuntimeError(f"witness state {path} cannot be read: {error}") from None

    def latest(self, origin: str) -> Checkpoint | None:
        """The checkpoint last cosigned for ``origin`` (a damaged file stops the witness:
        forgetting it would let a rolled-back log be cosigned)."""
        note = self.note(origin)
        if note is None:
            return None
        try:
            checkpoint = Checkpoint.parse(parse_note(note).text)
        except NoteError as error:
            raise RuntimeError(f"witness state {self.path(origin)} is damaged: {error}") from None
        if checkpoint.origin != origin:
            raise RuntimeError(f"witness state {self.path(origin)} names another origin")
        return checkpoint

    def save(self, origin: str, note: str) -> None:
        """Replace the note kept for ``origin`` atomically and durably (call under
        :meth:`locked`)."""
        path = self.path(origin)
        partial = path.with_name(path.name + ".partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        with os.fdopen(fd, "wb") as handle:
            handle.write(note.encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, path)
        directory = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
