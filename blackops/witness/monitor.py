"""``blackops audit watch``: the auditor's monitor, as Go's checksum-database client keeps its
``latest`` note. Each check fetches the log's current signed checkpoint, verifies its
signature and the cosignatures of the required witnesses, proves it consistent with the
checkpoint saved by the previous check, and only then saves it.

Findings (exit status 1 when there is any; the saved checkpoint is then left as it was, so
the evidence stays):

- ``bad_signature``: the note is not validly signed by the log's key, or a required witness's
  cosignature line does not verify;
- ``missing_cosignature``: a required witness did not cosign this checkpoint;
- ``rolled_back``: the tree is smaller than one seen before (the tail was cut off);
- ``inconsistent``: no valid consistency proof from the saved checkpoint (history rewritten),
  or the same size with another root (a fork), or (``--store``) a store whose leaves do not
  hash to the signed root of the current or the saved checkpoint (too few: truncated).

A log it cannot read (the service down or answering 5xx, the store unreachable), also while
fetching the proof, is no finding but :class:`LogUnreadable`: ``backend_unavailable``, and
``--follow`` tries again. A damaged ``--state`` file is ``invalid_request``: it stops, since
checking against a guessed tree head would prove nothing.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from blackops.witness.sources import (
    HttpSource,
    LeafSource,
    LogUnreadable,
    RecordedLeaves,
    Source,
)
from domain.errors import InvalidRequest
from replay.cosignature import cosignatures
from replay.merkle import verify_consistency
from replay.notes import Checkpoint, NoteError, VerifierKey, open_note

ProofSource = Callable[[int, int], Sequence[bytes]]


@dataclass
class Report:
    ok: bool
    findings: list[dict[str, str]] = field(default_factory=list)
    checkpoint: Checkpoint | None = None
    previous: Checkpoint | None = None
    cosigned_by: dict[str, int] = field(default_factory=dict)

    def add(self, kind: str, message: str) -> None:
        self.ok = False
        self.findings.append({"kind": kind, "message": message})

    def document(self) -> dict[str, Any]:
        def head(c: Checkpoint | None) -> dict[str, Any] | None:
            if c is None:
                return None
            return {"origin": c.origin, "size": c.size, "root": base64.b64encode(c.root).decode()}

        return {
            "ok": self.ok,
            "findings": self.findings,
            "checkpoint": head(self.checkpoint),
            "previous": head(self.previous),
            "cosignedBy": self.cosigned_by,
        }


def assess(
    note: str,
    key: VerifierKey,
    witnesses: Sequence[VerifierKey],
    previous: Checkpoint | None,
    proof: ProofSource,
    leaves: RecordedLeaves | None = None,
) -> Report:
    """What one check finds; pure but for ``proof`` (asked only when the tree grew) and
    ``leaves``, the log's leaves when the source holds them (the store): the signed root of
    the checkpoint and of the saved one must be those of their first ``size`` leaves."""
    report = Report(ok=True, previous=previous)
    try:
        parsed, _ = open_note(note, [key])
        checkpoint = Checkpoint.parse(parsed.text)
    except NoteError as error:
        report.add("bad_signature", f"the checkpoint is not validly signed by {key.name}: {error}")
        return report
    report.checkpoint = checkpoint
    if checkpoint.origin != key.name:
        report.add("bad_signature", f"the checkpoint's origin is {checkpoint.origin!r}")
        return report
    found = cosignatures(note, witnesses)
    report.cosigned_by = found.valid
    for label in found.invalid:
        report.add("bad_signature", f"the cosignature of witness {label} does not verify")
    for label in found.missing:
        report.add("missing_cosignature", f"witness {label} did not cosign size {checkpoint.size}")
    held = leaves is None or _holds(leaves, checkpoint, previous, report)
    if previous is None:
        return report
    if checkpoint.size < previous.size:
        report.add(
            "rolled_back",
            f"the tree has {checkpoint.size} leaves; {previous.size} were seen before",
        )
    elif checkpoint.size == previous.size:
        if checkpoint.root != previous.root:
            report.add("inconsistent", f"two roots for tree size {checkpoint.size}: a fork")
    elif previous.size == 0:
        pass  # the empty tree is a prefix of every tree
    elif not held:
        pass  # found already; a proof from leaves that are not the signed ones proves nothing
    else:
        try:
            path = list(proof(previous.size, checkpoint.size))
            valid = all(len(h) == 32 for h in path) and verify_consistency(
                previous.size, checkpoint.size, previous.root, checkpoint.root, path
            )
        except LogUnreadable:
            raise  # a log we cannot read is not a log that lied (decisions T7)
        except Exception as error:  # a malformed proof, a 4xx, too few leaves
            valid, path = False, []
            detail = f" ({error})"
        else:
            detail = ""
        if not valid:
            report.add(
                "inconsistent",
                f"no valid consistency proof from size {previous.size} to "
                f"{checkpoint.size}: the history seen before was rewritten{detail}",
            )
    return report


def _holds(
    leaves: RecordedLeaves, checkpoint: Checkpoint, previous: Checkpoint | None, report: Report
) -> bool:
    """Do ``leaves`` hash to the root of ``checkpoint`` and of ``previous`` at their sizes?
    Each that does not is ``inconsistent``: at an unchanged size no proof is asked, so this
    is what finds a journal truncated or rewritten under a checkpoint seen before."""
    heads = [(checkpoint, "current checkpoint")]
    if previous is not None and previous.root != checkpoint.root:  # else the same tree
        heads.append((previous, "checkpoint saved by the last check"))
    held = True
    for head, label in heads:
        if leaves.size < head.size:
            report.add(
                "inconsistent",
                f"the journal has {leaves.size} leaves, fewer than the {head.size} of the "
                f"{label}: it was truncated",
            )
            held = False
        elif leaves.root(head.size) != head.root:
            report.add(
                "inconsistent",
                f"the journal's first {head.size} leaves do not hash to the root of the "
                f"{label}: its history was rewritten",
            )
            held = False
    return held


def load_state(path: Path) -> Checkpoint | None:
    """The checkpoint the last good check saved; a damaged file is ``invalid_request``."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidRequest(f"the monitor state {path} cannot be read: {error}") from None
    try:
        document = json.loads(text)
        origin, size, root = document["origin"], document["size"], document["root"]
        if not isinstance(origin, str) or not origin:
            raise ValueError("origin is not a non-empty string")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ValueError("size is not a non-negative integer")
        if not isinstance(root, str):
            raise ValueError("root is not a string")
        raw = base64.b64decode(root, validate=True)
        if len(raw) != 32:
            raise ValueError("root is not a 32-byte hash")
        # Inside: a size beyond 64 bits or an origin no note may name is a NoteError (a
        # ValueError), which escaped as a traceback (found by a defect hunt, stop 35).
        return Checkpoint(origin=origin, size=size, root=raw)
    except (ValueError, KeyError, TypeError, binascii.Error) as error:
        raise InvalidRequest(
            f"the monitor state {path} is damaged ({error}); restore it, or remove it to "
            "start over from the log's current checkpoint"
        ) from None


def save_state(path: Path, note: str, checkpoint: Checkpoint) -> None:
    document = {
        "origin": checkpoint.origin,
        "size": checkpoint.size,
        "root": base64.b64encode(checkpoint.root).decode(),
        "note": note,
        "checkedAt": int(time.time()),
    }
    partial = path.with_name(path.name + ".partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(partial, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(document, indent=1) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, path)
    except OSError as error:  # the monitor's own file: invalid_request, never retried (T7)
        raise InvalidRequest(f"the monitor state {path} cannot be saved: {error}") from None


def check_once(
    source: Source,
    key: VerifierKey,
    witnesses: Sequence[VerifierKey],
    state: Path,
    grace_seconds: float = 0.0,
) -> Report:
    """One check. A checkpoint whose only finding is a missing cosignature is fetched again
    for up to ``grace_seconds``: witnesses cosign a new checkpoint a moment after it is
    signed, so a young checkpoint is not yet a finding."""
    return check_from(source, key, witnesses, state, load_state(state), grace_seconds)


def check_from(
    source: Source,
    key: VerifierKey,
    witnesses: Sequence[VerifierKey],
    state: Path,
    previous: Checkpoint | None,
    grace_seconds: float = 0.0,
) -> Report:
    """:func:`check_once` from ``previous``, the state already read."""
    deadline = time.monotonic() + grace_seconds
    while True:
        note = source.note()
        # The store's leaves, read after its note (decisions T9); the service's are its own.
        leaves = source.leaves() if isinstance(source, LeafSource) else None
        report = assess(note, key, witnesses, previous, source.proof, leaves)
        only_missing = bool(report.findings) and all(
            f["kind"] == "missing_cosignature" for f in report.findings
        )
        if not only_missing or time.monotonic() >= deadline:
            break
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
    if report.ok and report.checkpoint is not None:
        save_state(state, note, report.checkpoint)
    return report


def run_watch(args: argparse.Namespace, key: VerifierKey, witnesses: list[VerifierKey]) -> int:
    from domain.errors import BackendUnavailable

    source: Source
    if args.url:
        from blackops.client.calls import base_url_checked

        # Not http(s)://host: invalid_request at once, where it was a read failure retried
        # for ever under --follow, or a traceback (found by a defect hunt, stop 38).
        source = HttpSource(
            base_url_checked(args.url), args.token or os.environ.get("BLACKOPS_TOKEN")
        )
    else:
        from blackops.witness.store_source import StoreSource

        source = StoreSource(args.store)
    while True:
        previous = load_state(args.state)  # damaged: invalid_request, never retried
        try:
            report = check_from(
                source, key, witnesses, args.state, previous, args.cosignature_grace
            )
        except InvalidRequest:  # the monitor's own state or arguments: retrying cannot help
            raise
        except Exception as error:
            if not args.follow:
                raise BackendUnavailable(f"could not read the log's checkpoint: {error}") from None
            sys.stderr.write(f"blackops audit watch: could not read the log: {error}\n")
            time.sleep(args.interval)
            continue
        _print(report, args.json)
        if not report.ok:
            return 1
        if not args.follow:
            return 0
        time.sleep(args.interval)


def _print(report: Report, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(report.document(), sort_keys=True) + "\n")
    else:
        head = report.checkpoint
        shown = f"size {head.size} root {base64.b64encode(head.root).decode()}" if head else "-"
        if report.ok:
            signed = ", ".join(sorted(report.cosigned_by)) or "no witness required"
            sys.stdout.write(f"ok: {shown}; cosigned by {signed}\n")
        for finding in report.findings:
            sys.stdout.write(f"{finding['kind']}: {finding['message']}\n")
    sys.stdout.flush()
