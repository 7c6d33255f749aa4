"""Receipts: an event's entry with a C2SP tlog-proof@v1 text, verified offline (pure).

A receipt is ``{"entry": "<Observed JSONL line>", "index": i, "proof": "<text>"}``; the
proof text is ``c2sp.org/tlog-proof@v1``, ``index <i>``, the audit path (one base64 hash a
line, from the leaf's sibling upward), a blank line, then the signed checkpoint verbatim.
Verifying needs nothing but the log's verifier key: the checkpoint's signature, the leaf
SHA-256(0x00 ‖ entry) and the audit path up to the signed root.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from journal.leaves import leaf_hash
from replay.cosignature import cosignatures
from replay.merkle import Frontier, verify_consistency, verify_inclusion
from replay.notes import MAX_TREE_SIZE, Checkpoint, NoteError, VerifierKey, open_note
from replay.observed import ObservedLineError, parse_line_entry

HEADER = "c2sp.org/tlog-proof@v1"
REQUIRED_KEYS = frozenset({"entry", "index", "proof"})
_DECIMAL = re.compile(r"0|[1-9][0-9]{0,19}")


class ReceiptError(ValueError):
    """A receipt, proof or checkpoint that does not verify; ``code`` says which check."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class TlogProof:
    index: int
    path: tuple[bytes, ...]
    checkpoint: str  # the signed note, verbatim
    extra: bytes | None = None

    def text(self) -> str:
        lines = [HEADER]
        if self.extra is not None:
            lines.append("extra " + base64.b64encode(self.extra).decode())
        lines.append(f"index {self.index}")
        lines += [base64.b64encode(h).decode() for h in self.path]
        return "\n".join(lines) + "\n\n" + self.checkpoint

    @classmethod
    def parse(cls, text: str) -> TlogProof:
        head, blank, checkpoint = text.partition("\n\n")
        if not blank or not checkpoint:
            raise ReceiptError("malformed_proof", "a tlog proof ends with a blank line and a note")
        lines = head.split("\n")
        if lines[0] != HEADER:
            raise ReceiptError("malformed_proof", f"a tlog proof starts with {HEADER}")
        rest = lines[1:]
        extra = None
        if rest and rest[0].startswith("extra "):
            extra = _b64(rest.pop(0)[len("extra ") :])
        if not rest or not rest[0].startswith("index "):
            raise ReceiptError("malformed_proof", "the index line is missing")
        digits = rest.pop(0)[len("index ") :]
        if not _DECIMAL.fullmatch(digits) or int(digits) > MAX_TREE_SIZE:
            raise ReceiptError(
                "malformed_proof", "the index is a decimal uint64 without leading zeros"
            )
        path = tuple(_b64(line) for line in rest)
        if any(len(h) != 32 for h in path):
            raise ReceiptError("malformed_proof", "every proof line is one 32-byte hash")
        return cls(index=int(digits), path=path, checkpoint=checkpoint, extra=extra)


def open_checkpoint(
    note: str, keys: Sequence[VerifierKey], witnesses: Sequence[VerifierKey] = ()
) -> Checkpoint:
    """The checkpoint of a signed note, after checking a log key of ``keys`` signed it and
    its origin is that key's name, and that each of ``witnesses`` cosigned it: a log that
    signs two trees of one size (a fork) can show each reader its own, and only a witness
    every reader requires sees both (`missing_cosignature` without its cosignature, as
    ``blackops audit watch --witness-key`` says)."""
    try:
        opened, signers = open_note(note, keys)
        checkpoint = Checkpoint.parse(opened.text)
        cosigned = cosignatures(note, witnesses)
    except NoteError as error:
        raise ReceiptError(error.code, str(error)) from None
    if not any(k.name == checkpoint.origin for k in signers):
        raise ReceiptError("bad_signature", "no key named like the origin signed the checkpoint")
    if cosigned.invalid:
        raise ReceiptError("bad_signature", f"witness {cosigned.invalid[0]}'s cosignature fails")
    if cosigned.missing:
        raise ReceiptError(
            "missing_cosignature", f"witness {cosigned.missing[0]} did not cosign the checkpoint"
        )
    return checkpoint


def verify_receipt(
    receipt: Any, keys: Sequence[VerifierKey], witnesses: Sequence[VerifierKey] = ()
) -> Checkpoint:
    """Check a receipt document offline; returns the checkpoint it is included in (signed by
    a log key of ``keys``, cosigned by every one of ``witnesses``: `open_checkpoint`)."""
    if not isinstance(receipt, dict) or not receipt.keys() >= REQUIRED_KEYS:
        raise ReceiptError("malformed_receipt", 'a receipt is {"entry", "index", "proof"}')
    entry, index, text = receipt["entry"], receipt["index"], receipt["proof"]
    if not isinstance(entry, str) or not isinstance(text, str):
        raise ReceiptError("malformed_receipt", "entry and proof are strings")
    if isinstance(index, bool) or not isinstance(index, int):
        raise ReceiptError("malformed_receipt", "index is an integer")
    proof = TlogProof.parse(text)
    if proof.index != index:
        raise ReceiptError("malformed_receipt", "the receipt's index is not its proof's index")
    checkpoint = open_checkpoint(proof.checkpoint, keys, witnesses)
    leaf = leaf_hash(_canonical_entry(entry))
    if not verify_inclusion(index, checkpoint.size, leaf, proof.path, checkpoint.root):
        raise ReceiptError("not_included", "the audit path does not lead to the signed root")
    return checkpoint


def _canonical_entry(entry: str) -> bytes:
    """The bytes the leaf hashes: the JSONL line without its newline. One trailing newline
    is allowed (the line as an export file holds it); any other newline is refused, and so
    is a line that is not an Observed event in RFC 8785's spelling: a duplicate key reads as
    one value to a parser keeping the first and as another to one keeping the last, so
    such an entry proved nothing (found by a defect hunt against the operator, stop 37)."""
    line = entry[:-1] if entry.endswith("\n") else entry
    if "\n" in line:
        raise ReceiptError("malformed_receipt", "the entry is one JSONL line")
    try:
        raw = line.encode("utf-8")
    except UnicodeEncodeError:
        raise ReceiptError("malformed_receipt", "the entry is not valid UTF-8 text") from None
    try:
        canonical = parse_line_entry(raw, 1)[1]
    except ObservedLineError as error:
        raise ReceiptError("malformed_receipt", f"the entry: {error.message}") from None
    if canonical != raw:
        raise ReceiptError("malformed_receipt", "the entry is not spelled as RFC 8785 writes it")
    return raw


def verify_consistency_text(old: Checkpoint, new: Checkpoint, proof_text: str) -> bool:
    """A consistency proof given as one base64 hash a line, between two checkpoints."""
    try:
        path = [_b64(line) for line in proof_text.split("\n") if line]
    except ReceiptError:
        return False
    return verify_consistency(old.size, new.size, old.root, new.root, path)


def _b64(text: str) -> bytes:
    if type(text) is not str:  # a manifest or receipt is hostile input: any JSON value
        raise ReceiptError("malformed_proof", "not a base64 string")
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise ReceiptError("malformed_proof", "not standard base64") from None
    return raw


def verify_signed_export(
    found: Sequence[tuple[int, bytes]],
    manifest: Any,
    keys: Sequence[VerifierKey],
    witnesses: Sequence[VerifierKey] = (),
) -> Checkpoint:
    """Check an export's lines (``(position, leaf)`` recomputed from the file) against the
    signed checkpoint its manifest names; returns that checkpoint.

    The root at the export's end is rebuilt from the prefix nodes, the file's leaves and the
    hidden leaves (nothing the manifest says about the file's own lines is used), then the
    consistency proof must lead from it to the signed root. What the manifest says of the
    range must agree with that: every position above ``after``, ``firstPosition`` and
    ``lastPosition`` the file's first and last line, ``journalRoot`` the rebuilt root, and a
    prefix of at most ``after`` leaves (positions are distinct whole numbers from 1). (That
    no leaf between ``after`` and the first line was folded into the prefix instead cannot
    be told from the file beyond that bound: the prefix is hashes, and PostgreSQL's
    positions skip numbers; the journal's ``journal.exported`` record of the export says
    where its range began.)"""
    try:
        attestation = manifest["attestation"]
        size, after = manifest["journalTreeSize"], manifest["after"]
        claimed = manifest["firstPosition"], manifest["lastPosition"], manifest["journalRoot"]
        first = attestation["firstIndex"]
        prefix = [_b64(h) for h in attestation["prefix"]]
        hidden = [(p, bytes.fromhex(h)) for p, h in attestation["hidden"]]
        proof = [_b64(h) for h in attestation["consistency"]]
        note = str(attestation["checkpoint"])
    except (KeyError, TypeError, ValueError):
        raise ReceiptError("malformed_manifest", "the manifest has no usable attestation") from None
    # Plain JSON integers only: int() took "7", 7.5 and true as well.
    if not all(type(n) is int and n >= 0 for n in (size, after, first)):
        raise ReceiptError(
            "malformed_manifest", "journalTreeSize, after and firstIndex are whole numbers"
        )
    if first > after:
        # At most ``after`` leaves lie at positions up to ``after``: a prefix holding more
        # folded lines of the range away (a whole-journal export, after 0, whose first lines
        # were dropped verified complete; found by a defect hunt against the operator, stop 37).
        raise ReceiptError(
            "malformed_manifest", f"firstIndex {first} is more leaves than positions up to {after}"
        )
    if not all(type(p) is int and p >= 1 for p, _ in hidden):
        raise ReceiptError("malformed_manifest", "a hidden leaf's position is a whole number")
    # A 64-byte and an empty "leaf" in place of two would fold into the same nodes.
    if not all(len(h) == 32 for _, h in hidden):
        raise ReceiptError("malformed_manifest", "every hidden leaf is one 32-byte hash")
    fault = range_fault([p for p, _ in found], [p for p, _ in hidden], after, claimed[:2])
    if fault is not None:
        raise ReceiptError("malformed_manifest", fault)
    checkpoint = open_checkpoint(note, keys, witnesses)
    try:
        frontier = Frontier.restore(first, prefix)
    except ValueError as error:
        raise ReceiptError("malformed_manifest", str(error)) from None
    merged = sorted([*found, *hidden])
    if len({p for p, _ in merged}) != len(merged):
        raise ReceiptError("not_in_signed_log", "a position appears twice (file and hidden)")
    for _, leaf in merged:
        frontier.append(leaf)
    if frontier.size != size:
        raise ReceiptError("not_in_signed_log", "the leaves do not make the exported tree size")
    root = frontier.root()
    if size == checkpoint.size:
        ok = not proof and root == checkpoint.root
    else:
        ok = verify_consistency(size, checkpoint.size, root, checkpoint.root, proof)
    if not ok:
        raise ReceiptError("not_in_signed_log", "the export's lines are not in the signed tree")
    if claimed[2] != root.hex():
        raise ReceiptError(
            "malformed_manifest", "journalRoot is not the root of the tree the export ends at"
        )
    return checkpoint


def range_fault(
    lines: Sequence[int], hidden: Sequence[int], after: int, ends: tuple[object, object]
) -> str | None:
    """What an export's manifest says of its range that its positions contradict, or
    ``None``: every position (the file's lines and any hidden leaf) above ``after``, and
    ``ends`` (``firstPosition``, ``lastPosition``) the lines' first and last, ``null`` for
    none. Shared by the offline check (`replay.verify.verify_export`) and this one."""
    if min([*lines, *hidden], default=after + 1) <= after:
        return f"a position is not after {after}, where it begins"
    expected = (min(lines), max(lines)) if lines else (None, None)
    if any(type(c) is not type(e) or c != e for c, e in zip(ends, expected, strict=True)):
        return "firstPosition and lastPosition are not the file's first and last"
    return None
