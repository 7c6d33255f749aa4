"""The checkpoint signer: signed C2SP checkpoints of the journal's tree, journaled.

One place signs (``CheckpointService.sign``), under the journal's cross-process ``signer``
lock (a PostgreSQL advisory lock, a ``flock`` beside a SQLite file), so processes sharing a
journal sign one at a time. Before signing it

1. finds its own last signed checkpoint: the newest ``journal.checkpoint`` whose note a
   key it trusts signed (its own, or an older one a journaled rotation hands over from),
   this process's last one, and the one saved beside the key file (``<key>.checkpoint``);
2. re-reads every recorded leaf (``JournalTree.sync(recheck=True)``): a leaf rewritten or
   deleted under a tree it already folded in is found here;
3. checks the current tree extends that checkpoint (not smaller, same root at its size).

Any failure raises ``JournalRewritten`` (code ``journal_rewritten``) and nothing is signed.
The note is journaled as ``journal.checkpoint`` with ``{"tree_size", "root", "note",
"key"}`` (``verify`` re-checks tree_size/root like every tree head).

Hook for witnesses: ``service.listeners`` is a list of ``Callable[[str], None]``; each is
called with the signed note after every new checkpoint (outside the lock; an exception in
a listener is logged, never raised). ``service.add_cosignatures(note, lines)`` keeps
cosignature lines for a note, and ``published()`` is the newest note with them appended
(what ``GET /v1/checkpoint`` answers).
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from blackops.audit.tree import JournalTree, LeafMismatch
from domain.clock import Clock, format_instant
from domain.context import Actor
from domain.errors import BlackOpsError, NotFound
from domain.events import NewEvent
from journal.store import Append, EventStore
from replay.notes import (
    Checkpoint,
    NoteError,
    SigningKey,
    VerifierKey,
    add_signature_lines,
    open_note,
    sign_note,
)

log = logging.getLogger("blackops.audit")
CHECKPOINT = "journal.checkpoint"
KEY_ROTATED = "journal.key_rotated"
#: How often the automatic signer looks for new events (decisions A3).
DEFAULT_CADENCE_SECONDS = 5.0
SYSTEM_ACTOR = Actor("blackops", "system")


class JournalRewritten(BlackOpsError):
    """The journal under the last signed checkpoint changed; nothing was signed."""

    def __init__(self, message: str) -> None:
        super().__init__("journal_rewritten", message)


class CheckpointService:
    """Signs, journals and publishes checkpoints of one store (``key`` None: read only)."""

    def __init__(
        self,
        store: EventStore,
        key: SigningKey | None,
        clock: Clock,
        *,
        key_path: Path | None = None,
        actor: Actor = SYSTEM_ACTOR,
    ) -> None:
        self.store = store
        self.key = key
        self.clock = clock
        self.actor = actor
        self.tree = JournalTree(store)
        self.listeners: list[Callable[[str], None]] = []
        self._state_path = Path(f"{key_path}.checkpoint") if key_path else None
        self._lock = threading.Lock()
        self._seen_after = 0  # journal.checkpoint events read up to this position
        self._newest: tuple[int, str] | None = None  # (event position, note), any signer
        self._ours: tuple[Checkpoint, int] | None = None  # last we trust, its event position
        self._cosignatures: dict[str, list[str]] = {}
        self._trusted: list[VerifierKey] = []
        self._checked_after = 0  # journal.checkpoint events verified up to this position
        self._journaled: tuple[Checkpoint, int] | None = None  # largest we trust
        self.refusal: JournalRewritten | None = None  # the last refusal, while it stands

    # -- reading ----------------------------------------------------------------------------

    def latest(self) -> str | None:
        """The newest journaled checkpoint note (whoever signed it), or None."""
        with self._lock:
            self._read_new_checkpoints()
            return self._newest[1] if self._newest else None

    def published(self) -> str:
        """The newest checkpoint with the cosignatures gathered for it."""
        note = self.latest()
        if note is None:
            raise NotFound("no checkpoint has been signed yet")
        return self.with_cosignatures(note)

    def with_cosignatures(self, note: str) -> str:
        extra = self._cosignatures.get(note)
        return add_signature_lines(note, extra) if extra else note

    def add_cosignatures(self, note: str, lines: Sequence[str]) -> None:
        """Keep witness cosignature lines for ``note`` (published with it)."""
        with self._lock:
            have = self._cosignatures.setdefault(note, [])
            have.extend(line for line in lines if line not in have)

    def trusted_keys(self) -> list[VerifierKey]:
        """This signer's verifier key and every older one a journaled rotation signed over
        to it (``journal.key_rotated``: the new key, signed with the old)."""
        if self.key is None:
            return []
        trusted = [self.key.verifier()]
        rotations = self.store.read_topics([KEY_ROTATED])
        changed = True
        while changed:
            changed = False
            for event in rotations:
                old = _rotation_from(event.data, trusted)
                if old is not None:
                    trusted.append(old)
                    changed = True
        return trusted

    def _read_new_checkpoints(self) -> None:
        for event in self.store.read_topics([CHECKPOINT], after=self._seen_after):
            self._seen_after = event.position
            note = event.data.get("note")
            if isinstance(note, str):
                self._newest = (event.position, note)

    # -- signing ----------------------------------------------------------------------------

    def sign(self, *, force: bool = False) -> str | None:
        """Sign a checkpoint of the current tree if events were appended since the last
        one (``force``: even if not); returns the new note, or None when nothing is new."""
        if self.key is None:
            raise NotFound("no signing key is configured (--signing-key, BLACKOPS_SIGNING_KEY)")
        with self.store.exclusive("signer"), self._lock:
            note = self._sign_locked(self.key, force)
        if note is not None:
            for listener in list(self.listeners):
                try:
                    listener(note)
                except Exception:  # a witness being down never stops the journal
                    log.exception("checkpoint listener failed")
        return note

    def _sign_locked(self, key: SigningKey, force: bool) -> str | None:
        previous = self._previous(key)
        try:
            self.tree.sync(recheck=True)
        except LeafMismatch as mismatch:
            raise self._refuse(
                f"position {mismatch.position}: {mismatch}; nothing signed"
            ) from None
        if previous is not None:
            checkpoint, event_position = previous
            if self.tree.size < checkpoint.size:
                raise self._refuse(
                    f"the journal has {self.tree.size} leaves, fewer than the "
                    f"{checkpoint.size} of the last signed checkpoint (truncated); nothing signed"
                )
            if self.tree.root(checkpoint.size) != checkpoint.root:
                raise self._refuse(
                    f"the tree at size {checkpoint.size} no longer has the signed root "
                    "(history rewritten); nothing signed"
                )
            newest = self.tree.position_of(self.tree.size - 1) if self.tree.size else 0
            if not force and newest <= event_position:
                self.refusal = None
                return None
        body = Checkpoint(key.name, self.tree.size, self.tree.root()).body()
        note = sign_note(body, key)
        at = format_instant(self.clock.now())
        data = {
            "tree_size": self.tree.size,
            "root": self.tree.root().hex(),
            "note": note,
            "key": key.verifier().encode(),
        }
        stream = f"custody:checkpoint:{uuid.uuid4()}"
        event = NewEvent(CHECKPOINT, at, {"actor": self.actor.to_dict()}, data)
        [[position]] = self.store.append(Append(stream, 0, [event]))
        self._ours = (Checkpoint.parse(body), position)
        self._save_state(note)
        self.refusal = None
        return note

    def _refuse(self, message: str) -> JournalRewritten:
        refusal = JournalRewritten(message)
        self.refusal = refusal
        log.error("checkpoint signer REFUSES: %s", message)
        return refusal

    def _previous(self, key: SigningKey) -> tuple[Checkpoint, int] | None:
        """The largest checkpoint this signer trusts as its own, with its event position."""
        trusted = self.trusted_keys()
        if trusted != self._trusted:  # a rotation arrived: read every checkpoint again
            self._trusted, self._checked_after, self._journaled = trusted, 0, None
        for event in self.store.read_topics([CHECKPOINT], after=self._checked_after):
            self._checked_after = event.position
            note = event.data.get("note")
            if not isinstance(note, str):
                continue  # a tree head recorded before checkpoints were signed
            try:
                opened, _ = open_note(note, trusted)
            except NoteError as error:
                if error.code == "bad_signature":
                    self._checked_after = 0  # looked at again next time: still refused
                    raise self._refuse(
                        f"position {event.position}: a journaled checkpoint's signature no "
                        "longer verifies (rewritten); nothing signed"
                    ) from None
                continue  # signed by a key this signer does not know
            checkpoint = Checkpoint.parse(opened.text)
            if self._journaled is None or checkpoint.size >= self._journaled[0].size:
                self._journaled = (checkpoint, event.position)
        found = self._journaled
        if self._ours is not None and (found is None or self._ours[0].size > found[0].size):
            found = self._ours
        saved = self._load_state(trusted)
        if saved is not None and (found is None or saved.size > found[0].size):
            found = (saved, found[1] if found else 0)
        return found

    def _save_state(self, note: str) -> None:
        if self._state_path is None:
            return
        partial = self._state_path.with_name(self._state_path.name + ".partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(note)
        os.replace(partial, self._state_path)

    def _load_state(self, trusted: Sequence[VerifierKey]) -> Checkpoint | None:
        if self._state_path is None or not self._state_path.exists():
            return None
        try:
            opened, _ = open_note(self._state_path.read_text(encoding="utf-8"), trusted)
            return Checkpoint.parse(opened.text)
        except (NoteError, OSError):
            log.warning("ignoring %s: not a checkpoint this key signed", self._state_path)
            return None

    # -- proofs -----------------------------------------------------------------------------

    def covering(self, index: int) -> tuple[str, Checkpoint]:
        """A signed checkpoint whose tree includes leaf ``index`` (signing one now when the
        newest does not yet and this process holds the key)."""
        for attempt in range(2):
            note = self.latest()
            if note is not None:
                checkpoint = Checkpoint.parse(note.split("\n\n")[0] + "\n")
                if checkpoint.size > index:
                    return note, checkpoint
            if attempt == 0 and self.key is not None:
                self.sign(force=True)
        raise NotFound("no signed checkpoint covers this event yet")

    def synced_tree(self) -> JournalTree:
        self.tree.sync()
        return self.tree


def _rotation_from(data: dict[str, Any], trusted: list[VerifierKey]) -> VerifierKey | None:
    """The old key of a rotation to a trusted key, if its statement verifies."""
    try:
        old = VerifierKey.parse(str(data["old"]))
        new = VerifierKey.parse(str(data["new"]))
        if new not in trusted or old in trusted:
            return None
        opened, _ = open_note(str(data["statement"]), [old])
    except (KeyError, NoteError):
        return None
    return old if opened.text == rotation_text(old, new) else None


def rotation_text(old: VerifierKey, new: VerifierKey) -> str:
    """The statement a key rotation signs with the old key."""
    return f"blackops key rotation\nold {old.encode()}\nnew {new.encode()}\n"


def rotate_key(
    store: EventStore, old: SigningKey, new: SigningKey, *, actor: Actor, clock: Clock
) -> dict[str, Any]:
    """Journal ``journal.key_rotated``: the new verifier key, signed with the old key."""
    statement = sign_note(rotation_text(old.verifier(), new.verifier()), old)
    data = {"old": old.verifier().encode(), "new": new.verifier().encode(), "statement": statement}
    at = format_instant(clock.now())
    stream = f"custody:key-rotation:{uuid.uuid4()}"
    [[position]] = store.append(
        Append(stream, 0, [NewEvent(KEY_ROTATED, at, {"actor": actor.to_dict()}, data)])
    )
    return {**data, "position": position}


class AutoCheckpointer:
    """A thread that signs a checkpoint at most every ``cadence`` seconds, when events were
    appended since the last one (by any process)."""

    def __init__(self, service: CheckpointService, cadence: float = DEFAULT_CADENCE_SECONDS):
        self.service = service
        self.cadence = cadence
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="checkpoint-signer", daemon=True)

    def start(self) -> AutoCheckpointer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.wait(self.cadence):
            try:
                self.service.sign()
            except JournalRewritten:
                continue  # logged loudly by the signer; refused again at every tick
            except BlackOpsError as error:
                log.warning("checkpoint not signed: %s", error)
            except Exception:
                log.exception("checkpoint signer failed")
