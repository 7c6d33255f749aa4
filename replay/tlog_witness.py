"""C2SP tlog-witness ``add-checkpoint``: the request body and the witness's rules (pure).

Request body: ``old <size>\\n``, zero to 63 lines of one base64 hash each (the RFC 6962
consistency proof from ``old`` to the checkpoint's size), an empty line, then the signed
checkpoint. :func:`check` applies the spec's rules in its order and either returns the
checkpoint to cosign or raises a :class:`Refusal` carrying the HTTP status the spec names:

- 400 a malformed body, or an old size above the checkpoint's;
- 404 an origin the witness does not know;
- 403 no signature by a trusted key, or a trusted key's signature that fails;
- 409 the old size is not the size the witness last cosigned (``size`` says which: the
  server answers it as ``text/x.tlog.size``);
- 409 the size the witness last cosigned with another root: the log forked (``size`` is
  None: the server answers plain text, so a client never takes it for a stale size);
- 422 a size-0 checkpoint whose root is not the empty tree's, a proof that does not verify,
  a proof sent with old size 0, or a proof sent with the size already cosigned.

:attr:`Refusal.evidence` marks the refusals that prove the log misbehaved by its signature
alone: a fork, a size-0 checkpoint with another root. A proof that does not verify (or one
sent where none goes) proves nothing about the log: anyone may send its genuine checkpoint
with a wrong proof, and keeping those would let anyone fill the evidence kept for a fork.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from replay.merkle import EMPTY_ROOT, verify_consistency
from replay.notes import (
    MAX_TREE_SIZE,
    Checkpoint,
    NoteError,
    VerifierKey,
    open_note,
    parse_note,
)

MAX_PROOF_LINES = 63
MAX_BODY_BYTES = 1 << 20
_OLD = re.compile(r"old (0|[1-9][0-9]{0,19})")


class Refusal(Exception):
    """The witness will not cosign; ``status`` is the spec's HTTP status."""

    def __init__(
        self, status: int, message: str, size: int | None = None, *, evidence: bool = False
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.size = size  # a stale-size 409 only: the size of the latest cosigned checkpoint
        #: The log's signature on this request proves it misbehaved (worth keeping).
        self.evidence = evidence


@dataclass(frozen=True)
class AddCheckpoint:
    old_size: int
    proof: tuple[bytes, ...]
    note: str


def encode(old_size: int, proof: Sequence[bytes], note: str) -> bytes:
    """The request body a log sends."""
    lines = [f"old {old_size}", *(base64.b64encode(h).decode() for h in proof)]
    return ("\n".join(lines) + "\n\n" + note).encode()


def parse(body: bytes) -> AddCheckpoint:
    """Read a request body; a malformed one is a 400 refusal."""
    if len(body) > MAX_BODY_BYTES:
        raise Refusal(400, "the request body is too large")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise Refusal(400, "the request body is not UTF-8") from None
    head, blank, note = text.partition("\n\n")
    if not blank:
        raise Refusal(400, "an empty line must separate the proof from the checkpoint")
    lines = head.split("\n")
    matched = _OLD.fullmatch(lines[0])
    if matched is None:
        raise Refusal(400, "the first line must be 'old <size>' (decimal, no leading zeros)")
    if len(lines) - 1 > MAX_PROOF_LINES:
        raise Refusal(400, f"more than {MAX_PROOF_LINES} consistency proof lines")
    old_size = int(matched.group(1))
    if old_size > MAX_TREE_SIZE:
        raise Refusal(400, "the old size is a uint64 (at most 2^64 - 1)")
    proof = tuple(_hash(line) for line in lines[1:])
    return AddCheckpoint(old_size=old_size, proof=proof, note=note)


def check(
    request: AddCheckpoint,
    logs: Mapping[str, Sequence[VerifierKey]],
    latest: Checkpoint | None,
) -> Checkpoint:
    """The checkpoint to cosign, or a :class:`Refusal`. ``logs`` maps each known origin to
    its trusted keys; ``latest`` is what the witness last cosigned for that origin (read it
    with :func:`origin_of` first, under the same lock as the update)."""
    checkpoint = _checkpoint(request.note)
    keys = logs.get(checkpoint.origin)
    if not keys:
        # Named up to 128 characters: the line is the caller's, and a megabyte one was
        # answered and logged whole (found by a defect hunt, stop 40).
        shown = checkpoint.origin[:128] + ("…" if len(checkpoint.origin) > 128 else "")
        raise Refusal(404, f"unknown log origin {shown!r}")
    try:
        open_note(request.note, keys)
    except NoteError as error:
        raise Refusal(403, f"the checkpoint is not signed by the log's key ({error})") from None
    if request.old_size > checkpoint.size:
        raise Refusal(400, "the old size is larger than the checkpoint's size")
    known = latest.size if latest is not None else 0
    if request.old_size != known:
        raise Refusal(409, f"the latest cosigned size is {known}", size=known)
    if checkpoint.size == 0 and checkpoint.root != EMPTY_ROOT:
        raise Refusal(422, "a checkpoint of size 0 has the root of the empty tree", evidence=True)
    if request.old_size == 0:
        if request.proof:
            raise Refusal(422, "no consistency proof goes with old size 0")
        return checkpoint
    assert latest is not None
    if checkpoint.size == latest.size:
        if checkpoint.root != latest.root:  # tlog-witness: 409, without a size
            raise Refusal(409, "the same size with another root: the log forked", evidence=True)
        if request.proof:
            raise Refusal(422, "no consistency proof goes with the size already cosigned")
        return checkpoint
    if not verify_consistency(
        latest.size, checkpoint.size, latest.root, checkpoint.root, request.proof
    ):
        raise Refusal(422, "the consistency proof does not verify")
    return checkpoint


def origin_of(note: str) -> str:
    """The origin line of a request's note (400 if the note is not a checkpoint)."""
    return _checkpoint(note).origin


def _checkpoint(note: str) -> Checkpoint:
    try:
        return Checkpoint.parse(parse_note(note).text)
    except NoteError as error:
        raise Refusal(400, f"the checkpoint is malformed ({error})") from None


def _hash(line: str) -> bytes:
    try:
        raw = base64.b64decode(line.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise Refusal(400, "a consistency proof line is not base64") from None
    if len(raw) != 32:
        raise Refusal(400, "a consistency proof hash is 32 bytes")
    return raw
