"""C2SP signed notes, note keys and tlog checkpoints, byte for byte (pure: no I/O).

Formats: c2sp.org/signed-note (the format of Go's golang.org/x/mod/sumdb/note) and
c2sp.org/tlog-checkpoint. A note is a text ending in "\\n", a blank line, then one line per
signature, ``— <key name> <base64(key ID[4] ‖ signature)>``. Keys are Ed25519:

- key ID = SHA-256(name ‖ 0x0A ‖ key type ‖ public key)[:4];
- verifier key text ``<name>+<hex key ID>+<base64(key type ‖ public key)>``;
- private key text ``PRIVATE+KEY+<name>+<hex key ID>+<base64(key type ‖ seed)>``.

Key type 0x01 signs note texts (checkpoints). Key type 0x04 is a witness's cosignature key
(c2sp.org/tlog-cosignature): its raw signature is ``u64be timestamp ‖ Ed25519 signature`` over
``cosignature/v1\\ntime <timestamp>\\n`` + the note text; ``open_note`` verifies both kinds.

Every refusal is a ``NoteError`` with a stable ``code``: ``malformed_note``,
``malformed_key``, ``malformed_checkpoint``, ``bad_signature``, ``unknown_key``,
``ambiguous_key``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

NOTE_KEY = 0x01
"""Ed25519 signature over the note text (c2sp.org/signed-note)."""
COSIGNATURE_KEY = 0x04
"""Timestamped Ed25519 checkpoint cosignature (c2sp.org/tlog-cosignature)."""

_KEY_TYPES = frozenset({NOTE_KEY, COSIGNATURE_KEY})
_MAX_SIGNATURES = 100  # as Go's note.Open; the spec asks for at least 16
_SIGNATURE_PREFIX = "— "
_HEX8 = re.compile(r"[0-9a-f]{8}")
_DECIMAL = re.compile(r"0|[1-9][0-9]{0,19}")  # ASCII digits, no leading zeros, at most 20
MAX_TREE_SIZE = 2**64 - 1
"""A tree size is a uint64 (c2sp.org/tlog-checkpoint; Go's ``tlog`` parses it as one)."""


class NoteError(ValueError):
    """A note, key or checkpoint refused; ``code`` says why."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def key_id(name: str, key_type: int, public: bytes) -> bytes:
    """SHA-256(name ‖ 0x0A ‖ key type ‖ public key)[:4]."""
    return hashlib.sha256(name.encode() + b"\n" + bytes([key_type]) + public).digest()[:4]


def valid_key_name(name: str) -> bool:
    """Non-empty, no Unicode space, no '+' (signed-note: key names)."""
    return (
        name != ""
        and "+" not in name
        and not any(ch.isspace() for ch in name)
        and _encodable(name)
        and not _has_control(name)
    )


@dataclass(frozen=True)
class VerifierKey:
    """A public note key: who signed (name, key ID) and how to check it."""

    name: str
    key_id: bytes
    key_type: int
    public: bytes

    def __post_init__(self) -> None:
        if not valid_key_name(self.name):
            raise NoteError("malformed_key", f"invalid key name {self.name!r}")
        if self.key_type not in _KEY_TYPES:
            raise NoteError("malformed_key", f"unknown key type 0x{self.key_type:02x}")
        if len(self.public) != 32:
            raise NoteError("malformed_key", "an Ed25519 public key is 32 bytes")
        if self.key_id != key_id(self.name, self.key_type, self.public):
            raise NoteError("malformed_key", "the key ID does not match the key")

    @classmethod
    def parse(cls, text: str) -> VerifierKey:
        """``<name>+<hex key ID>+<base64(type ‖ public key)>``."""
        parts = text.split("+", 2)  # base64 may hold '+'
        if len(parts) != 3:
            raise NoteError("malformed_key", "a verifier key is name+keyid+key")
        name, hex_id, encoded = parts
        ident = _parse_hex_id(hex_id)
        raw = _b64(encoded, "malformed_key")
        if len(raw) < 2:
            raise NoteError("malformed_key", "the key material is empty")
        return cls(name=name, key_id=ident, key_type=raw[0], public=raw[1:])

    def encode(self) -> str:
        material = base64.b64encode(bytes([self.key_type]) + self.public).decode()
        return f"{self.name}+{self.key_id.hex()}+{material}"

    def verify(self, message: bytes, signature: bytes) -> bool:
        """Ed25519 (RFC 8032) over ``message``; ``signature`` is the raw 64 bytes."""
        if len(signature) != 64:
            return False
        # cryptography (~6 MB resident) is imported when a key is used, not with the module:
        # a worker that signs nothing and verifies nothing never loads it.
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        try:
            Ed25519PublicKey.from_public_bytes(self.public).verify(signature, message)
        except InvalidSignature:
            return False
        return True

    def __str__(self) -> str:
        return self.encode()


@dataclass(frozen=True)
class SigningKey:
    """A private note key (the 32-byte Ed25519 seed) with its name and key ID."""

    name: str
    key_id: bytes
    key_type: int
    seed: bytes

    def __post_init__(self) -> None:
        if not valid_key_name(self.name):
            raise NoteError("malformed_key", f"invalid key name {self.name!r}")
        if self.key_type not in _KEY_TYPES:
            raise NoteError("malformed_key", f"unknown key type 0x{self.key_type:02x}")
        if len(self.seed) != 32:
            raise NoteError("malformed_key", "an Ed25519 seed is 32 bytes")
        if self.key_id != key_id(self.name, self.key_type, self._public()):
            raise NoteError("malformed_key", "the key ID does not match the key")

    @classmethod
    def generate(cls, name: str, key_type: int = NOTE_KEY) -> SigningKey:
        seed = os.urandom(32)
        public = _public_of(seed)
        return cls(name=name, key_id=key_id(name, key_type, public), key_type=key_type, seed=seed)

    @classmethod
    def parse(cls, text: str) -> SigningKey:
        """``PRIVATE+KEY+<name>+<hex key ID>+<base64(type ‖ seed)>``."""
        parts = text.strip("\n").split("+", 4)  # base64 may hold '+'
        if len(parts) != 5 or parts[0] != "PRIVATE" or parts[1] != "KEY":
            raise NoteError("malformed_key", "a private key is PRIVATE+KEY+name+keyid+key")
        _, _, name, hex_id, encoded = parts
        ident = _parse_hex_id(hex_id)
        raw = _b64(encoded, "malformed_key")
        if len(raw) < 2:
            raise NoteError("malformed_key", "the key material is empty")
        return cls(name=name, key_id=ident, key_type=raw[0], seed=raw[1:])

    def encode(self) -> str:
        material = base64.b64encode(bytes([self.key_type]) + self.seed).decode()
        return f"PRIVATE+KEY+{self.name}+{self.key_id.hex()}+{material}"

    def verifier(self) -> VerifierKey:
        return VerifierKey(self.name, self.key_id, self.key_type, self._public())

    def sign(self, message: bytes) -> bytes:
        """The raw 64-byte Ed25519 signature of ``message``."""
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        return Ed25519PrivateKey.from_private_bytes(self.seed).sign(message)

    def _public(self) -> bytes:
        return _public_of(self.seed)

    def __repr__(self) -> str:  # never print the seed
        return f"SigningKey(name={self.name!r}, key_id={self.key_id.hex()!r})"


@dataclass(frozen=True)
class Signature:
    """One signature line: key name, key ID and the raw signature (without the key ID)."""

    name: str
    key_id: bytes
    signature: bytes

    def line(self) -> str:
        encoded = base64.b64encode(self.key_id + self.signature).decode()
        return f"{_SIGNATURE_PREFIX}{self.name} {encoded}\n"


@dataclass(frozen=True)
class Note:
    """A parsed note: its text (ending in "\\n") and every signature line, in order."""

    text: str
    signatures: tuple[Signature, ...]


def sign_note(text: str, key: SigningKey) -> str:
    """The signed note: text, a blank line, and ``key``'s signature line."""
    _check_text(text)
    if key.key_type != NOTE_KEY:
        raise NoteError("malformed_key", "only a note key (type 0x01) signs a note text")
    signature = Signature(key.name, key.key_id, key.sign(text.encode()))
    return text + "\n" + signature.line()


def add_signature_lines(note: str, lines: Sequence[str]) -> str:
    """``note`` with more signature lines appended (each well formed; exact repeats dropped)."""
    parsed = parse_note(note)
    have = {signature.line() for signature in parsed.signatures}
    out = [note]
    for raw in lines:
        line = raw if raw.endswith("\n") else raw + "\n"
        signature = _parse_signature_line(line[:-1])
        if signature.line() != line:
            raise NoteError("malformed_note", "a signature line is not in canonical form")
        if line not in have:
            have.add(line)
            out.append(line)
    result = "".join(out)
    if len(parse_note(result).signatures) > _MAX_SIGNATURES:
        raise NoteError("malformed_note", f"more than {_MAX_SIGNATURES} signatures")
    return result


def parse_note(note: str) -> Note:
    """Split a signed note into text and signature lines, checking the format only."""
    if not _encodable(note) or _has_control(note):
        raise NoteError("malformed_note", "a note is UTF-8 without control characters")
    split = note.rfind("\n\n")
    if split < 0:
        raise NoteError("malformed_note", "a note has a blank line before its signatures")
    text, block = note[: split + 1], note[split + 2 :]
    if not block or not block.endswith("\n"):
        raise NoteError("malformed_note", "a note ends with signature lines")
    signatures = tuple(_parse_signature_line(line) for line in block[:-1].split("\n"))
    if len(signatures) > _MAX_SIGNATURES:
        raise NoteError("malformed_note", f"more than {_MAX_SIGNATURES} signatures")
    return Note(text=text, signatures=signatures)


def open_note(note: str, keys: Sequence[VerifierKey]) -> tuple[Note, tuple[VerifierKey, ...]]:
    """Parse ``note`` and verify every signature made by one of ``keys``.

    Signatures by other keys are ignored (signed-note: verifiers MUST ignore unknown keys), and
    so are a known key's after its first. Raises ``bad_signature`` when a known key's first
    signature fails, ``unknown_key`` when none of ``keys`` signed the note, ``ambiguous_key``
    when two of ``keys`` share name and key ID.
    Returns the note and the keys whose signatures verified, in signature order.
    """
    parsed = parse_note(note)
    known: dict[tuple[str, bytes], VerifierKey] = {}
    for key in keys:
        slot = (key.name, key.key_id)
        if slot in known and known[slot] != key:
            raise NoteError("ambiguous_key", f"two keys are named {key.name}+{key.key_id.hex()}")
        known[slot] = key
    verified: list[VerifierKey] = []
    seen: set[tuple[str, bytes]] = set()
    message = parsed.text.encode()
    for signature in parsed.signatures:
        slot = (signature.name, signature.key_id)
        signer = known.get(slot)
        if signer is None:
            continue
        # As Go's note.Open: a known key's first signature decides, later lines by it are
        # dropped (one appended junk line made a genuine note refused: stop 35's hunt).
        if slot in seen:
            continue
        seen.add(slot)
        if not _verify(signer, message, signature.signature):
            raise NoteError(
                "bad_signature", f"invalid signature for key {signer.name}+{signer.key_id.hex()}"
            )
        verified.append(signer)
    if not verified:
        raise NoteError("unknown_key", "no signature on the note is by a known key")
    return parsed, tuple(verified)


@dataclass(frozen=True)
class Checkpoint:
    """A tlog checkpoint body: origin, tree size, RFC 6962 root, optional extension lines."""

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.origin or "\n" in self.origin or _has_control(self.origin):
            raise NoteError("malformed_checkpoint", "the origin is one non-empty line")
        if isinstance(self.size, bool) or not isinstance(self.size, int):
            raise NoteError("malformed_checkpoint", "the tree size is an integer")
        if not 0 <= self.size <= MAX_TREE_SIZE:
            raise NoteError("malformed_checkpoint", "the tree size is within 0 .. 2^64 - 1")
        if len(self.root) != 32:
            raise NoteError("malformed_checkpoint", "the root hash is 32 bytes")
        for line in self.extensions:
            if not line or "\n" in line or _has_control(line):
                raise NoteError("malformed_checkpoint", "an extension is one non-empty line")

    def body(self) -> str:
        lines = [self.origin, str(self.size), base64.b64encode(self.root).decode()]
        return "\n".join([*lines, *self.extensions]) + "\n"

    @classmethod
    def parse(cls, text: str) -> Checkpoint:
        """Read a checkpoint body (the note text), e.g. ``Checkpoint.parse(note.text)``."""
        if not text.endswith("\n"):
            raise NoteError("malformed_checkpoint", "a checkpoint body ends in a newline")
        lines = text[:-1].split("\n")
        if len(lines) < 3:
            raise NoteError("malformed_checkpoint", "a checkpoint has origin, size and root")
        origin, size, root, *extensions = lines
        if not _DECIMAL.fullmatch(size):
            raise NoteError(
                "malformed_checkpoint",
                "the tree size is a decimal uint64 without leading zeros",
            )
        raw = _b64(root, "malformed_checkpoint")
        return cls(origin=origin, size=int(size), root=raw, extensions=tuple(extensions))


def _verify(key: VerifierKey, message: bytes, raw: bytes) -> bool:
    if key.key_type == COSIGNATURE_KEY:
        if len(raw) != 8 + 64:
            return False
        timestamp = int.from_bytes(raw[:8], "big")
        signed = f"cosignature/v1\ntime {timestamp}\n".encode() + message
        return key.verify(signed, raw[8:])
    return key.verify(message, raw)


def parse_signature_line(line: str) -> Signature:
    """One signature line without its newline (``malformed_note`` if it is not one)."""
    return _parse_signature_line(line)


def _parse_signature_line(line: str) -> Signature:
    if not line.startswith(_SIGNATURE_PREFIX):
        raise NoteError("malformed_note", "a signature line starts with an em dash and a space")
    name, space, encoded = line[len(_SIGNATURE_PREFIX) :].partition(" ")
    if not space or not encoded or not valid_key_name(name):
        raise NoteError("malformed_note", "a signature line is '— <name> <base64>'")
    raw = _b64(encoded, "malformed_note")
    if len(raw) < 5:
        raise NoteError("malformed_note", "a signature holds a key ID and signature bytes")
    return Signature(name=name, key_id=raw[:4], signature=raw[4:])


def _check_text(text: str) -> None:
    if not text.endswith("\n"):
        raise NoteError("malformed_note", "a note text ends in a newline")
    if not _encodable(text) or _has_control(text):
        raise NoteError("malformed_note", "a note text is UTF-8 without control characters")


def _parse_hex_id(text: str) -> bytes:
    if not _HEX8.fullmatch(text):
        raise NoteError("malformed_key", "a key ID is 8 lowercase hex digits")
    return bytes.fromhex(text)


def _b64(text: str, code: str) -> bytes:
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as error:
        raise NoteError(code, "not standard base64") from error
    if base64.b64encode(raw).decode() != text:  # one spelling per value
        raise NoteError(code, "not canonical base64")
    return raw


def _public_of(seed: bytes) -> bytes:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    private = Ed25519PrivateKey.from_private_bytes(seed)
    return private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _has_control(text: str) -> bool:
    return any(ord(ch) < 0x20 and ch != "\n" for ch in text)
