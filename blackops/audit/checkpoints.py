"""The checkpoint signer: signed C2SP checkpoints of the journal's tree, journaled.

One place signs (``CheckpointService.sign``), under the journal's cross-process ``signer``
lock (a PostgreSQL advisory lock, a ``flock`` beside a SQLite file), so processes sharing a
journal sign one at a time. Before signing it

1. gathers every checkpoint it knows: each ``journal.checkpoint`` whose note a key it
   trusts signed (its own, or an older one a journaled rotation hands over from), this
   process's last one, and the one saved beside the key file (``<key>.checkpoint``, with
   the compact range of its tree); two of the same size that disagree, or one the tree
   does not extend, mean a rewrite;
2. checks leaves against the store and re-hashes their events (decisions A11): all of
   them at the first signing of a process, then only the new ones, the last one signed
   over and a rotating window of older ones, so the cost does not grow with the journal;
3. extends the compact range of the last signed size with the new leaves; its root must
   be the tree's.

Any failure raises ``JournalRewritten`` (code ``journal_rewritten``) and nothing is signed.
The note is journaled as ``journal.checkpoint`` with ``{"tree_size", "root", "note",
"key"}`` (``verify`` re-checks tree_size/root like every tree head).

Hook for witnesses: ``service.listeners`` is a list of ``Callable[[str], None]``; each is
called with the signed note after every new checkpoint (outside the lock; an exception in
a listener is logged, never raised). ``service.add_cosignatures(note, lines)`` keeps
cosignature lines for a note, and ``published()`` is the newest note with them appended
(what ``GET /v1/checkpoint`` answers).

Readers (``latest``, ``recent``, ``named_keys``) share one incremental read of the journaled
checkpoints: each call reads only those journaled since the last one, by any process, and
keeps the newest ``RECENT_CHECKPOINTS`` of them (decisions U19). It never waits for a signing.
"""

from __future__ import annotations

import base64
import logging
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from blackops.audit.tree import JournalTree, LeafMismatch
from domain.clock import Clock, format_instant
from domain.context import Actor
from domain.errors import BlackOpsError, InvalidRequest, NotFound
from domain.events import NewEvent, RecordedEvent
from journal.store import Append, EventStore
from replay.merkle import Frontier
from replay.notes import (
    Checkpoint,
    NoteError,
    SigningKey,
    VerifierKey,
    add_signature_lines,
    open_note,
    parse_note,
    sign_note,
)

log = logging.getLogger("blackops.audit")
CHECKPOINT = "journal.checkpoint"
KEY_ROTATED = "journal.key_rotated"
#: How often the automatic signer looks for new events (decisions A3).
DEFAULT_CADENCE_SECONDS = 5.0
SYSTEM_ACTOR = Actor("blackops", "system")
#: Older leaves re-read (and their events re-hashed) at each signing, in rotation (A11).
RECHECK_PER_SIGNING = 4096
#: How long the cosignatures kept beside the journal for a note are reused before they are
#: read again (`CheckpointService.with_cosignatures`).
KEPT_READ_SECONDS = 2.0
#: Separates the note from its compact range in ``<key>.checkpoint``.
RANGE_HEADER = "compact-range"
#: Journaled checkpoints kept for readers, newest last: the console's history shows 50 and
#: checks the oldest of them against the one before it (decisions U10, U19).
RECENT_CHECKPOINTS = 64


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
        state_path: Path | None = None,
        actor: Actor = SYSTEM_ACTOR,
    ) -> None:
        """``state_path``: where the last signed checkpoint is saved between processes
        (default ``<key_path>.checkpoint``; neither: not saved)."""
        self.store = store
        self.key = key
        self.clock = clock
        self.actor = actor
        self.tree = JournalTree(store)
        self.listeners: list[Callable[[str], None]] = []
        self._state_path = state_path or (Path(f"{key_path}.checkpoint") if key_path else None)
        #: The files this signer reads and writes (its key, its saved checkpoint).
        self.files = tuple(p for p in (key_path, self._state_path) if p is not None)
        self._lock = threading.Lock()  # the signer's state
        self._reading = threading.Lock()  # the readers' state, below
        self._seen_after = 0  # journal.checkpoint events read up to this position
        #: The newest journaled checkpoints with a note (any signer's), oldest first.
        self._recent: deque[RecordedEvent] = deque(maxlen=RECENT_CHECKPOINTS)
        self._named: dict[str, VerifierKey | None] = {}  # keys they name (None: unreadable)
        self._ours: tuple[Checkpoint, int] | None = None  # last we trust, its event position
        self._cosignatures: dict[str, list[str]] = {}
        #: Reads the cosignature lines kept beside the journal for a checkpoint (the
        #: witnesses' book, ``blackops.witness.cosigned``: set by whoever builds this
        #: service), so receipts and exports carry those any process gathered; None: only
        #: those `add_cosignatures` gave this process.
        self.kept_cosignatures: Callable[[Checkpoint], list[str]] | None = None
        self._kept: dict[str, tuple[float, list[str]]] = {}  # note -> (read at, lines)
        self._kept_lock = threading.Lock()
        self._trusted: list[VerifierKey] = [key.verifier()] if key else []
        self._rotations: list[dict[str, Any]] = []  # journal.key_rotated data, read so far
        self._checked_after = 0  # journal.checkpoint events verified up to this position
        self._journaled: tuple[Checkpoint, int] | None = None  # largest we trust
        self._pending: list[tuple[Checkpoint, str]] = []  # journaled, not yet checked
        self._range: Frontier | None = None  # compact range of the last signed size
        self._checked_size = 0  # leaves checked against the store and their events
        self._cursor = 0  # next older leaf the rotating re-check reads
        self.recheck_per_signing = RECHECK_PER_SIGNING
        self.refusal: JournalRewritten | None = None  # the last refusal, while it stands

    # -- reading ----------------------------------------------------------------------------

    def latest(self) -> str | None:
        """The newest journaled checkpoint note (whoever signed it), or None."""
        newest = self.recent(1)
        return str(newest[0].data["note"]) if newest else None

    def recent(self, count: int) -> list[RecordedEvent]:
        """The newest ``count`` (at most ``RECENT_CHECKPOINTS``) journaled checkpoint events
        with a note, oldest first; reads only those journaled since the last read."""
        if not 0 < count <= RECENT_CHECKPOINTS:
            raise ValueError(f"count must be from 1 to {RECENT_CHECKPOINTS}")
        with self._reading:
            self._read_new_checkpoints()
            return list(self._recent)[-count:]

    def named_keys(self) -> list[VerifierKey]:
        """The verifier keys the journaled checkpoints name, first named first (whether
        to trust them is the caller's choice); reads only those journaled since."""
        with self._reading:
            self._read_new_checkpoints()
            return [key for key in self._named.values() if key is not None]

    def published(self) -> str:
        """The newest checkpoint with the cosignatures gathered for it."""
        note = self.latest()
        if note is None:
            raise NotFound("no checkpoint has been signed yet")
        return self.with_cosignatures(note)

    def with_cosignatures(self, note: str) -> str:
        """``note`` with the witnesses' cosignatures known for it: those this process was
        given and those kept beside the journal. Only the pushing process held any, so a
        receipt or an export made elsewhere (the CLI, a server restarted since, an older
        checkpoint) carried none and failed ``--witness-key`` (found by a defect hunt)."""
        extra = list(self._cosignatures.get(note, ()))
        extra += [line for line in self._kept_lines(note) if line not in extra]
        return add_signature_lines(note, extra) if extra else note

    def _kept_lines(self, note: str) -> list[str]:
        """The kept cosignature lines of ``note``, read at most every `KEPT_READ_SECONDS`
        per note: ``GET /v1/checkpoint`` and receipts must not cost a database read each
        (a witness cosigns once per checkpoint; a line read a few seconds late is what
        the pusher's own cadence gives anyway)."""
        if self.kept_cosignatures is None:
            return []
        now = time.monotonic()
        with self._kept_lock:
            cached = self._kept.get(note)
        if cached is not None and now - cached[0] < KEPT_READ_SECONDS:
            return cached[1]
        try:
            lines = self.kept_cosignatures(Checkpoint.parse(parse_note(note).text))
        except NoteError:
            lines = []
        with self._kept_lock:
            self._kept[note] = (now, lines)
            while len(self._kept) > RECENT_CHECKPOINTS:
                del self._kept[next(iter(self._kept))]
        return lines

    def add_cosignatures(self, note: str, lines: Sequence[str]) -> None:
        """Keep witness cosignature lines for ``note`` (published with it)."""
        with self._lock:
            have = self._cosignatures.setdefault(note, [])
            have.extend(line for line in lines if line not in have)
            # Only the newest notes are published: keep those of the newest RECENT_CHECKPOINTS
            # (insertion order: a note's first cosignatures come when it is the newest).
            while len(self._cosignatures) > RECENT_CHECKPOINTS:
                del self._cosignatures[next(iter(self._cosignatures))]

    def trusted_keys(self) -> list[VerifierKey]:
        """This signer's verifier key and every older one a journaled rotation hands over
        to it (``journal.key_rotated``: the statement signed by both keys, see
        :func:`_rotation_from`)."""
        if self.key is None:
            return []
        return _trusted_through(
            self.key.verifier(), [e.data for e in self.store.read_topics([KEY_ROTATED])]
        )

    def _read_new_checkpoints(self) -> None:
        """Fold in the checkpoints journaled since the last read (positions are gapless in
        commit order: nothing can appear behind ``_seen_after`` later)."""
        for event in self.store.read_topics([CHECKPOINT], after=self._seen_after):
            self._seen_after = event.position
            if isinstance(event.data.get("note"), str):
                self._recent.append(event)
            text = event.data.get("key")
            if isinstance(text, str) and text not in self._named:
                try:
                    self._named[text] = VerifierKey.parse(text)
                except NoteError:
                    self._named[text] = None

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
        previous, known = self._previous(key)
        try:
            self._check_leaves()
        except LeafMismatch as mismatch:
            raise self._refuse(
                f"position {mismatch.position}: {mismatch}; nothing signed"
            ) from None
        self._check_known(known)
        range_ = self._extend_range()
        self._pending = []  # every journaled checkpoint read so far agrees with the tree
        if previous is not None:
            newest = self.tree.position_of(self.tree.size - 1) if self.tree.size else 0
            if not force and newest <= previous[1]:
                self.refusal = None
                return None
        body = Checkpoint(key.name, range_.size, range_.root()).body()
        note = sign_note(body, key)
        at = format_instant(self.clock.now())
        data = {
            "tree_size": range_.size,
            "root": range_.root().hex(),
            "note": note,
            "key": key.verifier().encode(),
        }
        stream = f"custody:checkpoint:{uuid.uuid4()}"
        event = NewEvent(CHECKPOINT, at, {"actor": self.actor.to_dict()}, data)
        [[position]] = self.store.append(Append(stream, 0, [event]))
        self._ours = (Checkpoint.parse(body), position)
        self._range = range_
        self._save_state(note, range_)
        self.refusal = None
        return note

    def _check_leaves(self) -> None:
        """Fold in the new leaves and check them (decisions A11): every leaf at the first
        signing of this process, then the new ones, the last one signed over (a truncated
        tail) and the next ``recheck_per_signing`` older ones in rotation."""
        self.tree.sync()
        size = self.tree.size
        if self._checked_size == 0:
            self.tree.recheck(0, size)  # start-up: the whole tree, once per process
        else:
            checked = self._checked_size
            self.tree.recheck(checked - 1, size)  # the tail signed over and every new leaf
            start = self._cursor if self._cursor < checked else 0
            end = min(checked, start + self.recheck_per_signing)
            self.tree.recheck(start, end)
            self._cursor = end if end < checked else 0
        self._checked_size = size

    def _check_known(self, known: Sequence[tuple[Checkpoint, str]]) -> None:
        """Every checkpoint this signer knows must be the tree's at its size: two that
        disagree, or one the tree does not extend, mean a rewritten (or truncated) journal."""
        by_size: dict[int, tuple[Checkpoint, str]] = {}
        for checkpoint, source in known:
            other = by_size.setdefault(checkpoint.size, (checkpoint, source))
            if other[0].root != checkpoint.root:
                raise self._refuse(
                    f"two checkpoints of size {checkpoint.size} disagree ({other[1]} and "
                    f"{source}): history rewritten and re-signed; nothing signed"
                )
        for size, (checkpoint, source) in sorted(by_size.items()):
            if self.tree.size < size:
                raise self._refuse(
                    f"the journal has {self.tree.size} leaves, fewer than the {size} of a "
                    f"signed checkpoint ({source}; truncated); nothing signed"
                )
            if self.tree.root(size) != checkpoint.root:
                raise self._refuse(
                    f"the tree at size {size} no longer has the root of the checkpoint "
                    f"{source} (history rewritten); nothing signed"
                )

    def _extend_range(self) -> Frontier:
        """The compact range of the last signed size, extended with the leaves after it;
        its root must be the tree's (two computations that must agree)."""
        range_ = self._range
        if range_ is None or range_.size > self.tree.size:
            range_ = Frontier()
        else:
            range_ = Frontier.restore(range_.size, range_.nodes())
        for index in range(range_.size, self.tree.size):
            range_.append(self.tree.leaf(index))
        if range_.root() != self.tree.root():
            raise self._refuse(
                "the compact range of the last signed checkpoint does not extend to the "
                "tree's root (history rewritten); nothing signed"
            )
        return range_

    def _refuse(self, message: str) -> JournalRewritten:
        refusal = JournalRewritten(message)
        self.refusal = refusal
        log.error("checkpoint signer REFUSES: %s", message)
        return refusal

    def _previous(
        self, key: SigningKey
    ) -> tuple[tuple[Checkpoint, int] | None, list[tuple[Checkpoint, str]]]:
        """The largest checkpoint this signer trusts as its own, with its event position,
        and every checkpoint to check against the tree now (each journaled one once, this
        process's last, the one saved beside the key)."""
        # One pass over the checkpoints and rotations journaled since the last signing
        # (O(events since), never the whole journal); a rotation that widens the keys
        # trusted means reading every checkpoint again, with them.
        while True:
            for event in self.store.read_topics(
                [CHECKPOINT, KEY_ROTATED], after=self._checked_after
            ):
                self._checked_after = event.position
                if event.type == KEY_ROTATED:
                    self._rotations.append(event.data)
                else:
                    self._take_checkpoint(event.position, event.data)
            trusted = _trusted_through(key.verifier(), self._rotations)
            if trusted == self._trusted:
                break
            self._trusted, self._checked_after, self._journaled = trusted, 0, None
            self._pending, self._rotations = [], []
        trusted = self._trusted
        known = list(self._pending)
        found = self._journaled
        if found is not None:
            known.append((found[0], f"journaled at position {found[1]}"))
        if self._ours is not None:
            known.append((self._ours[0], "this process signed last"))
            if found is None or self._ours[0].size > found[0].size:
                found = self._ours
        saved = self._load_state(trusted)
        if saved is not None:
            known.append((saved, f"saved in {self._state_path}"))
            if found is None or saved.size > found[0].size:
                found = (saved, found[1] if found else 0)
        return found, known

    def _take_checkpoint(self, position: int, data: dict[str, Any]) -> None:
        note = data.get("note")
        if not isinstance(note, str):
            return  # a tree head recorded before checkpoints were signed
        try:
            opened, _ = open_note(note, self._trusted)
        except NoteError as error:
            if error.code == "bad_signature":
                # Looked at again next time: still refused.
                self._checked_after, self._journaled = 0, None
                self._pending, self._rotations = [], []
                raise self._refuse(
                    f"position {position}: a journaled checkpoint's signature no "
                    "longer verifies (rewritten); nothing signed"
                ) from None
            return  # signed by a key this signer does not know
        checkpoint = Checkpoint.parse(opened.text)
        self._pending.append((checkpoint, f"journaled at position {position}"))
        if self._journaled is None or checkpoint.size >= self._journaled[0].size:
            self._journaled = (checkpoint, position)

    def _save_state(self, note: str, range_: Frontier) -> None:
        """``<key>.checkpoint``: the note, then a blank line and the compact range of its
        tree (one base64 perfect-subtree root a line, largest first)."""
        if self._state_path is None:
            return
        nodes = "".join(base64.b64encode(node).decode() + "\n" for node in range_.nodes())
        partial = self._state_path.with_name(self._state_path.name + ".partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(f"{note}\n{RANGE_HEADER}\n{nodes}")
        os.replace(partial, self._state_path)

    def _load_state(self, trusted: Sequence[VerifierKey]) -> Checkpoint | None:
        if self._state_path is None or not self._state_path.exists():
            return None
        try:
            text = self._state_path.read_text(encoding="utf-8")
            note, _, nodes = text.partition(f"\n{RANGE_HEADER}\n")
            opened, _ = open_note(note, trusted)
            checkpoint = Checkpoint.parse(opened.text)
        except (NoteError, OSError, ValueError):
            log.warning("ignoring %s: not a checkpoint this key signed", self._state_path)
            return None
        if self._range is None and nodes:
            try:
                range_ = Frontier.restore(
                    checkpoint.size, [base64.b64decode(n, validate=True) for n in nodes.split()]
                )
            except ValueError:
                range_ = None
            if range_ is not None and range_.root() == checkpoint.root:
                self._range = range_  # continued from at the first signing of this process
            else:
                log.warning("ignoring the compact range in %s: not its note's", self._state_path)
        return checkpoint

    # -- proofs -----------------------------------------------------------------------------

    def covering(self, index: int) -> tuple[str, Checkpoint]:
        """A signed checkpoint whose tree includes leaf ``index`` (signing one now when the
        newest does not yet and this process holds the key)."""
        for attempt in range(2):
            newest = self._newest()
            if newest is not None and newest[1].size > index:
                self._reach(newest[1].size)
                return newest
            if attempt == 0 and self.key is not None:
                self.sign(force=True)
        raise NotFound("no signed checkpoint covers this event yet")

    def signed_through(self) -> int | None:
        """The position of the last event the newest journaled checkpoint signs (whoever
        signed it): 0 for a checkpoint of the empty journal, None when there is none."""
        newest = self._newest()
        if newest is None:
            return None
        size = newest[1].size
        if size == 0:
            return 0
        self._reach(size)
        return self.tree.position_of(size - 1)

    def _newest(self) -> tuple[str, Checkpoint] | None:
        """The newest journaled note and the checkpoint it signs (its body, before the
        signature lines)."""
        note = self.latest()
        if note is None:
            return None
        return note, Checkpoint.parse(note.split("\n\n")[0] + "\n")

    def _reach(self, size: int) -> None:
        """Sync the tree when a checkpoint another process signed since the caller synced
        it is larger (its proofs were asked of a tree too small: a ValueError, a 500; found
        by a defect hunt, stop 35). Its leaves were committed before it was journaled."""
        if size > self.tree.size and self.tree.sync() < size:
            raise JournalRewritten(f"the journal no longer has the {size} leaves it signed")

    def synced_tree(self) -> JournalTree:
        self.tree.sync()
        return self.tree


def _trusted_through(key: VerifierKey, rotations: Sequence[dict[str, Any]]) -> list[VerifierKey]:
    """``key`` and every older key the journaled ``rotations`` hand over from, in turn."""
    trusted = [key]
    changed = True
    while changed:
        changed = False
        for data in rotations:
            old = _rotation_from(data, trusted)
            if old is not None:
                trusted.append(old)
                changed = True
    return trusted


def _rotation_from(data: dict[str, Any], trusted: Sequence[VerifierKey]) -> VerifierKey | None:
    """The old key of a journaled rotation to a trusted key, if its statement is signed by
    both keys and both carry the trusted keys' name (the log's origin).

    The new key's signature is what makes an old key trusted: whoever can write the journal
    can make a key and sign a rotation with it, but only the holder of the key trusted now
    can sign over to it (found by a defect hunt). A statement signed by the old key alone,
    as journaled before, is therefore not trusted: journal the rotation again with both
    keys (``blackops keys rotate``)."""
    try:
        old = VerifierKey.parse(str(data["old"]))
        new = VerifierKey.parse(str(data["new"]))
        if new not in trusted or old in trusted:
            return None
        if not old.name == new.name == trusted[0].name:
            return None  # another log's key: a key name is the log's origin (decisions T2)
        opened, signers = open_note(str(data["statement"]), [old, new])
    except (KeyError, NoteError):
        return None
    if opened.text != rotation_text(old, new) or not {old, new} <= set(signers):
        return None
    return old


def rotation_text(old: VerifierKey, new: VerifierKey) -> str:
    """The statement a key rotation signs with both the old and the new key."""
    return f"blackops key rotation\nold {old.encode()}\nnew {new.encode()}\n"


def rotate_key(
    store: EventStore, old: SigningKey, new: SigningKey, *, actor: Actor, clock: Clock
) -> dict[str, Any]:
    """Journal ``journal.key_rotated``: the statement handing ``old`` over to ``new``,
    signed by the old key and then the new one (the new key's signature is what a signer
    holding it trusts, :func:`_rotation_from`)."""
    if old.name != new.name:
        raise InvalidRequest("a rotation keeps the key name (the log's origin)")
    text = rotation_text(old.verifier(), new.verifier())
    by_new = parse_note(sign_note(text, new)).signatures[0].line()
    statement = add_signature_lines(sign_note(text, old), [by_new])
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
