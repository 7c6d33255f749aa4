"""Exports with manifests, and tree heads recorded in the journal (chain of custody).

An export writes Observed JSONL and a manifest: the position range, the count, the
Merkle root of the exported leaves, the journal's tree head at the last exported
position, the hash and canonicalisation used, who exported and when, and every leaf
(so an offline verifier can name the first bad line). Each leaf is compared with the
one recorded at append time while exporting: a journal that no longer verifies is
not exported. The export itself is then recorded in the journal (``journal.exported``),
as is a checkpoint (``journal.checkpoint``): tree heads that ``verify`` re-checks.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import compress
from operator import itemgetter
from typing import Any, BinaryIO

from domain.clock import Clock, format_instant
from domain.context import Actor
from domain.events import NewEvent
from journal.backend_common import StoredRow
from journal.leaves import leaf_hash
from journal.store import Append, EventStore
from replay.export import PAGE, rows_through
from replay.integrity import IntegrityError
from replay.merkle import Frontier, root_of
from replay.observed import observed_line
from replay.recorded import RecordedLeaves
from replay.verify import CANONICALISATION, HASH, TREE, read_tombstones, verify_store

FORMAT = "blackops.observed-jsonl"


@dataclass(slots=True)
class _Tree:
    """Recorded leaves taken in order, folded into the journal's running tree."""

    leaves: RecordedLeaves
    frontier: Frontier
    purged: frozenset[int] = frozenset()  # positions a retention tombstone accounts for

    def leaf_at(self, position: int) -> bytes:
        """The recorded leaf of ``position``, folding every earlier one into the tree."""
        for taken in self.leaves.before(position):
            positions = list(map(itemgetter(0), taken))
            if not self.purged.issuperset(positions):
                gone = next(p for p in positions if p not in self.purged)
                raise IntegrityError(gone, "a leaf was recorded but the event is gone")
            self.frontier.extend(list(map(itemgetter(1), taken)))
        found = self.leaves.peek()
        if found is None or found[0] != position:
            raise IntegrityError(position, "no leaf was recorded for this event")
        self.leaves.take()
        self.frontier.append(found[1])
        return found[1]


@dataclass(slots=True)
class _Exported:
    """What an export wrote, position and leaf of each line: two flat lists (a tuple per
    line kept alive would have the garbage collector scan them all, again and again)."""

    positions: list[int] = field(default_factory=list)
    leaves: list[bytes] = field(default_factory=list)


def export_with_manifest(
    store: EventStore,
    out: BinaryIO,
    *,
    actor: Actor,
    clock: Clock,
    after: int = 0,
    follow: bool = False,
    stop: threading.Event | None = None,
    poll_seconds: float = 0.2,
    progress: Callable[[int, int], None] | None = None,
    output_name: str | None = None,
    until: int | None = None,
    keep: Callable[[bytes], bool] | None = None,
    space: str | None = None,
    attest: Callable[[dict[str, Any]], object] | None = None,
) -> dict[str, Any]:
    """Write the lines, check each against its recorded leaf, record the export, and
    return the manifest. ``until`` stops at that position; ``keep(line)`` chooses the lines
    written (one Space's): every other line is still checked against its leaf.
    ``attest(manifest)`` (a signer's attestation) runs before the export is recorded: an
    export it refuses (``journal_rewritten``) is absent, not recorded (decisions P34)."""
    stop = stop or threading.Event()
    # Only what a valid tombstone vouches for is missing by right (verify's own rule).
    purged = read_tombstones(store).purged
    tree = _Tree(RecordedLeaves(store, PAGE), Frontier(), purged=purged)
    if after:
        _fold_until(tree, after)
    exported = _Exported()
    position = after
    while True:
        end = store.last_position()
        cut = False
        while rows := store.read_raw_after(position, PAGE):
            rows, cut = rows_through(rows, until)
            if rows:
                if not _export_page(tree, rows, out, exported, keep):
                    _export_rows(tree, rows, out, exported, keep)
                position = rows[-1].id
            if cut:
                break
            if progress is not None:
                progress(position, max(end, position))
        out.flush()
        # --follow --until ends once the journal is past ``until`` (or has reached it).
        reached = until is not None and (cut or position >= until)
        if not follow or reached or stop.wait(poll_seconds):
            break
    at = format_instant(clock.now())
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "formatVersion": 1,
        "canonicalisation": CANONICALISATION,
        "hash": HASH,
        "tree": TREE,
        "after": after,
        "firstPosition": exported.positions[0] if exported.positions else None,
        "lastPosition": exported.positions[-1] if exported.positions else None,
        "count": len(exported.positions),
        "root": _range_root(exported.leaves, tree, after, keep).hex(),
        "journalTreeSize": tree.frontier.size,
        "journalRoot": tree.frontier.root().hex(),
        "exportedBy": actor.to_dict(),
        "exportedAt": at,
    }
    manifest["leaves"] = [
        [p, leaf.hex()] for p, leaf in zip(exported.positions, exported.leaves, strict=True)
    ]
    if attest is not None:
        attest(manifest)
    custody = f"custody:export:{uuid.uuid4()}"
    data = {
        "after": after,
        "first_position": manifest["firstPosition"],
        "last_position": manifest["lastPosition"],
        "count": manifest["count"],
        "range_root": manifest["root"],
        "tree_size": manifest["journalTreeSize"],
        "root": manifest["journalRoot"],
        "output": output_name,
        "space": space,  # the Space whose lines ``keep`` chose; None: the whole journal
    }
    [[custody_position]] = store.append(
        Append(custody, 0, [NewEvent("journal.exported", at, {"actor": actor.to_dict()}, data)])
    )
    manifest["custody"] = {"stream": custody, "position": custody_position}
    return manifest


def _export_page(
    tree: _Tree,
    rows: list[StoredRow],
    out: BinaryIO,
    exported: _Exported,
    keep: Callable[[bytes], bool] | None,
) -> bool:
    """Export a page at once when its recorded leaves match (`RecordedLeaves.take_matching`:
    the usual journal). Otherwise nothing is written or folded, and ``False`` sends the page
    row by row, where the first difference is named."""
    page = tree.leaves.take_matching(rows, tree.purged)
    if page is None:
        return False
    tree.frontier.extend(page.every)
    entries, leaves, positions = page.entries, page.leaves, page.positions
    if keep is None:
        out.write(b"\n".join(entries))
        out.write(b"\n")
        exported.positions += positions
        exported.leaves += leaves
        return True
    lines = [entry + b"\n" for entry in entries]
    chosen = list(map(keep, lines))
    out.write(b"".join(compress(lines, chosen)))
    exported.positions += compress(positions, chosen)
    exported.leaves += compress(leaves, chosen)
    return True


def _export_rows(
    tree: _Tree,
    rows: list[StoredRow],
    out: BinaryIO,
    exported: _Exported,
    keep: Callable[[bytes], bool] | None,
) -> None:
    """Export a page row by row: each row's leaf is checked before its line is written."""
    for row in rows:
        here = row.id
        try:
            line = observed_line(row)
        except ValueError:  # a state that is no canonical envelope: changed since
            raise IntegrityError(here, "the event is not what was appended") from None
        leaf = leaf_hash(line[:-1])
        if tree.leaf_at(here) != leaf:
            raise IntegrityError(here, "the event differs from what was appended")
        if keep is None or keep(line):
            out.write(line)
            exported.positions.append(here)
            exported.leaves.append(leaf)


def _range_root(
    exported: list[bytes], tree: _Tree, after: int, keep: Callable[[bytes], bool] | None
) -> bytes:
    """The Merkle root of the exported leaves. When they are every leaf the journal tree
    folded (from the start, every line kept, none purged), the two trees are one: each
    exported leaf was just found equal to the recorded one."""
    if after == 0 and keep is None and tree.frontier.size == len(exported):
        return tree.frontier.root()
    return root_of(exported)


def _fold_until(tree: _Tree, after: int) -> None:
    """Fold every recorded leaf up to ``after`` into the journal tree (nothing exported)."""
    for taken in tree.leaves.before(after + 1):
        tree.frontier.extend(list(map(itemgetter(1), taken)))


def record_checkpoint(store: EventStore, *, actor: Actor, clock: Clock) -> dict[str, Any]:
    """Verify the live journal, then record its tree head (``journal.checkpoint``)."""
    report = verify_store(store)
    if not report.ok:
        first = report.problems[0]
        raise IntegrityError(first.position, f"{first.kind}: {first.message}")
    at = format_instant(clock.now())
    data = {"tree_size": report.tree_size, "root": report.root}
    stream = f"custody:checkpoint:{uuid.uuid4()}"
    [[position]] = store.append(
        Append(stream, 0, [NewEvent("journal.checkpoint", at, {"actor": actor.to_dict()}, data)])
    )
    return {"stream": stream, "position": position, "treeSize": report.tree_size,
            "root": report.root, "at": at}  # fmt: skip
