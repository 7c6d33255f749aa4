"""C2SP tlog-cosignature v1 (Ed25519, key type 0x04), byte for byte (pure: no I/O).

A cosignature is a signed-note signature line ``— <witness name> <base64(key ID[4] ‖
u64be timestamp ‖ Ed25519 signature[64])>`` where the key ID is SHA-256(name ‖ 0x0A ‖ 0x04 ‖
public key)[:4] and the signed message is

    cosignature/v1\\n
    time <timestamp, decimal, no leading zeros>\\n
    <the whole checkpoint body, extension lines included>

It states that, as of ``timestamp``, the checkpoint is the largest consistent tree head the
witness has seen for its origin (c2sp.org/tlog-cosignature).

A witness key may be written with key type 0x04, or be an ordinary note key (type 0x01, as
Go's ``note.GenerateKey`` writes): :func:`cosigner_key` turns the latter into the former (the
same Ed25519 key under the cosignature key ID), as transparency-dev's witness does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from replay.notes import (
    COSIGNATURE_KEY,
    NOTE_KEY,
    NoteError,
    Signature,
    SigningKey,
    VerifierKey,
    key_id,
    parse_note,
)

MAX_TIMESTAMP = 2**63 - 1
HEADER = "cosignature/v1\n"


def cosigned_message(body: str, timestamp: int) -> bytes:
    """The bytes a v1 cosignature signs: header, time line, then the checkpoint body."""
    _check_timestamp(timestamp)
    if not body.endswith("\n"):
        raise NoteError("malformed_checkpoint", "a checkpoint body ends in a newline")
    return f"{HEADER}time {timestamp}\n{body}".encode()


def cosigner_key(key: SigningKey) -> SigningKey:
    """``key`` as a cosigning key (type 0x04); a note key (0x01) gets the 0x04 key ID."""
    if key.key_type == COSIGNATURE_KEY:
        return key
    if key.key_type != NOTE_KEY:
        raise NoteError("malformed_key", f"key type 0x{key.key_type:02x} cannot cosign")
    public = key.verifier().public
    return SigningKey(
        name=key.name,
        key_id=key_id(key.name, COSIGNATURE_KEY, public),
        key_type=COSIGNATURE_KEY,
        seed=key.seed,
    )


def cosigner_verifier(key: VerifierKey) -> VerifierKey:
    """``key`` as a cosignature verifier (type 0x04), as :func:`cosigner_key` does."""
    if key.key_type == COSIGNATURE_KEY:
        return key
    if key.key_type != NOTE_KEY:
        raise NoteError("malformed_key", f"key type 0x{key.key_type:02x} cannot cosign")
    return VerifierKey(
        name=key.name,
        key_id=key_id(key.name, COSIGNATURE_KEY, key.public),
        key_type=COSIGNATURE_KEY,
        public=key.public,
    )


def cosign(body: str, key: SigningKey, timestamp: int) -> Signature:
    """The cosignature of checkpoint ``body`` by ``key`` at ``timestamp`` (POSIX seconds)."""
    signer = cosigner_key(key)
    raw = signer.sign(cosigned_message(body, timestamp))
    return Signature(signer.name, signer.key_id, timestamp.to_bytes(8, "big") + raw)


def timestamp_of(signature: Signature) -> int:
    """The timestamp a cosignature carries (``malformed_note`` if it is not one)."""
    if len(signature.signature) != 8 + 64:
        raise NoteError("malformed_note", "a cosignature is an 8-byte time and 64 bytes")
    timestamp = int.from_bytes(signature.signature[:8], "big")
    if timestamp > MAX_TIMESTAMP:
        raise NoteError("malformed_note", "a cosignature time exceeds 2^63 - 1")
    return timestamp


def verify(body: str, signature: Signature, key: VerifierKey) -> bool:
    """Whether ``signature`` is ``key``'s valid v1 cosignature of ``body``."""
    verifier = cosigner_verifier(key)
    if (signature.name, signature.key_id) != (verifier.name, verifier.key_id):
        return False
    try:
        timestamp = timestamp_of(signature)
    except NoteError:
        return False
    if timestamp == 0:  # tlog-witness: the timestamp MUST NOT be zero
        return False
    return verifier.verify(cosigned_message(body, timestamp), signature.signature[8:])


@dataclass(frozen=True)
class Cosigned:
    """What :func:`cosignatures` found: each trusted witness's verdict on one note."""

    valid: dict[str, int]  # witness key name -> timestamp of its valid cosignature
    invalid: tuple[str, ...]  # witness key names whose matching line does not verify
    missing: tuple[str, ...]  # trusted witnesses with no line on the note


def cosignatures(note: str, keys: Sequence[VerifierKey]) -> Cosigned:
    """Check each of ``keys``' first cosignature line on ``note`` (other lines are ignored,
    as signed-note requires of unknown keys and Go's note.Open does of a key's repeats)."""
    parsed = parse_note(note)
    valid: dict[str, int] = {}
    invalid: list[str] = []
    missing: list[str] = []
    for key in keys:
        verifier = cosigner_verifier(key)
        label = f"{verifier.name}+{verifier.key_id.hex()}"
        slot = (verifier.name, verifier.key_id)
        first = next((s for s in parsed.signatures if (s.name, s.key_id) == slot), None)
        # A key's first line decides, later ones are dropped, as `open_note` and Go's
        # note.Open do (a junk line appended after a genuine cosignature made it `invalid`).
        if first is None:
            missing.append(label)
        elif verify(parsed.text, first, verifier):
            valid[label] = timestamp_of(first)
        else:
            invalid.append(label)
    return Cosigned(valid=valid, invalid=tuple(invalid), missing=tuple(missing))


def _check_timestamp(timestamp: int) -> None:
    if isinstance(timestamp, bool) or not isinstance(timestamp, int):
        raise NoteError("malformed_note", "a cosignature time is an integer")
    if not 0 <= timestamp <= MAX_TIMESTAMP:
        raise NoteError("malformed_note", "a cosignature time is within 0 .. 2^63 - 1")
