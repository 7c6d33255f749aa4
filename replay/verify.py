"""Verification: does the journal (or an export of it) still say what was appended?

Live (``verify_store``): every stored event is recomputed into its Merkle leaf and
compared with the leaf recorded when it was appended; positions and recorded leaves
must pair up one to one; each stream's versions must run 1, 2, 3...; and every tree
head the journal recorded (checkpoints, exports) must still be the root of the tree of
that size. Offline (``verify_export``): an Observed JSONL file against its manifest,
with no database: each line is re-canonicalised and hashed (nothing the file says
about itself is trusted), and the manifest's leaves must rebuild its root.

Either way the first problem is named by position and kind: ``modified``,
``deleted``, ``inserted``, ``reordered``, ``gap``, ``tree_head``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from journal.leaves import event_leaf, leaf_hash
from journal.store import EventStore
from replay.merkle import Frontier, root_of
from replay.observed import ObservedLineError, parse_line_entry

TREE_HEAD_TYPES = frozenset({"journal.checkpoint", "journal.exported"})
#: Retention tombstones: the versions before them were deleted, their positions listed.
PURGE_TYPES = ("operation.purged", "outcome.purged", "workflow.purged")
HASH = "sha256"
TREE = "RFC 6962 Merkle tree (leaf SHA-256(0x00||entry), node SHA-256(0x01||left||right))"
CANONICALISATION = "RFC 8785"


@dataclass(frozen=True, slots=True)
class Problem:
    kind: str
    position: int
    message: str


@dataclass(slots=True)
class VerifyReport:
    events: int = 0
    tree_size: int = 0
    root: str = ""
    tree_heads_checked: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        first = self.problems[0] if self.problems else None
        return {
            "ok": self.ok,
            "events": self.events,
            "treeSize": self.tree_size,
            "root": self.root,
            "treeHeadsChecked": self.tree_heads_checked,
            "firstProblem": None
            if first is None
            else {"kind": first.kind, "position": first.position, "message": first.message},
            "problems": len(self.problems),
        }


def _pages(store: EventStore, page: int) -> Iterator[Any]:
    after = 0
    while rows := store.read_raw_after(after, page):
        yield from rows
        after = rows[-1].id


def _leaf_pages(store: EventStore, page: int) -> Iterator[tuple[int, bytes]]:
    after = 0
    while leaves := store.read_leaves(after, page):
        yield from leaves
        after = leaves[-1][0]


def verify_store(store: EventStore, page: int = 5000, limit: int = 100) -> VerifyReport:
    """Check the live journal; at most ``limit`` problems are collected."""
    report = VerifyReport()
    frontier = Frontier()
    # Tree heads come later than the size they name: read them first, so the root is
    # kept only at the sizes that will be asked for.
    heads = [
        (e.position, int(e.data.get("tree_size", -1)), str(e.data.get("root", "")))
        for e in store.read_topics(sorted(TREE_HEAD_TYPES))
    ]
    wanted = {size for _, size, _ in heads}
    purged: set[int] = set()
    for tombstone in store.read_topics(PURGE_TYPES):
        purged.update(int(p) for p in tombstone.data.get("positions", []))
    roots_at: dict[int, str] = {0: root_of([]).hex()}
    versions: dict[str, int] = {}
    events = _pages(store, page)
    leaves = _leaf_pages(store, page)
    event = next(events, None)
    recorded = next(leaves, None)

    def problem(kind: str, position: int, message: str) -> None:
        if len(report.problems) < limit:
            report.problems.append(Problem(kind, position, message))

    while event is not None or recorded is not None:
        if recorded is None or (event is not None and event.id < recorded[0]):
            assert event is not None
            problem("inserted", event.id, "an event with no leaf recorded at append time")
            event = next(events, None)
            continue
        if event is None or recorded[0] < event.id:
            if recorded[0] not in purged:  # a purge tombstone accounts for it (OL-10)
                problem("deleted", recorded[0], "a leaf was recorded here but the event is gone")
            frontier.append(recorded[1])
            if frontier.size in wanted:
                roots_at[frontier.size] = frontier.root().hex()
            recorded = next(leaves, None)
            continue
        stream = str(event.originator_id)
        try:
            leaf = event_leaf(event.id, stream, event.originator_version, event.topic, event.state)
        except ValueError as error:
            leaf = b""
            problem("modified", event.id, str(error))
        if leaf and leaf != recorded[1]:
            problem("modified", event.id, "the event's content differs from what was appended")
        expected = versions.get(stream, 0) + 1
        if expected == 1 and event.topic in PURGE_TYPES:
            expected = int(_tombstone_versions(event.state)) + 1
        if event.originator_version != expected:
            problem(
                "gap",
                event.id,
                f"stream {stream} jumps from version {expected - 1} to {event.originator_version}",
            )
        versions[stream] = event.originator_version
        frontier.append(recorded[1])
        if frontier.size in wanted:
            roots_at[frontier.size] = frontier.root().hex()
        report.events += 1
        event = next(events, None)
        recorded = next(leaves, None)
    for position, size, root in heads:
        report.tree_heads_checked += 1
        if roots_at.get(size) != root:
            problem(
                "tree_head",
                position,
                f"the tree head recorded here (size {size}) no longer matches: history "
                "before it was changed",
            )
    report.tree_size = frontier.size
    report.root = frontier.root().hex()
    report.problems.sort(key=lambda p: p.position)
    return report


def _tombstone_versions(state: bytes) -> int:
    from domain.json_text import load_canonical

    body = load_canonical(state)
    return int(body.get("data", {}).get("versions", 0))


def verify_export(lines: Iterable[bytes], manifest: dict[str, Any]) -> VerifyReport:
    """Check an Observed JSONL export against its manifest, offline."""
    report = VerifyReport()
    try:
        expected = [(int(p), bytes.fromhex(h)) for p, h in manifest["leaves"]]
        claimed_root = str(manifest["root"])
    except (KeyError, TypeError, ValueError):
        report.problems.append(Problem("manifest", 0, "the manifest has no usable leaves/root"))
        return report
    rebuilt = root_of(leaf for _, leaf in expected)
    if rebuilt.hex() != claimed_root or int(manifest.get("count", -1)) != len(expected):
        report.problems.append(
            Problem("manifest", 0, "the manifest's leaves do not rebuild its root and count")
        )
        return report
    found: list[tuple[int, bytes]] = []
    for number, raw in enumerate(lines, start=1):
        text = raw.rstrip(b"\n")
        if not text:
            continue  # blank lines carry nothing and are not counted
        try:
            # Re-canonicalised from the parsed content: how the line is spelled proves nothing.
            position, entry = parse_line_entry(text, number)
        except ObservedLineError as bad:
            # Unreadable: name the position the manifest expects on this line.
            index = len(found)
            position = expected[index][0] if index < len(expected) else 0
            report.problems.append(Problem("modified", position, str(bad)))
            return report
        found.append((position, leaf_hash(entry)))
    report.events = len(found)
    same = found == expected  # the usual answer, at C speed; else the first difference
    problem = None if same else _first_difference(found, expected)
    if problem is not None:
        report.problems.append(problem)
    report.tree_size = len(found)
    report.root = claimed_root if same else root_of(leaf for _, leaf in found).hex()
    return report


def _first_difference(
    found: list[tuple[int, bytes]], expected: list[tuple[int, bytes]]
) -> Problem | None:
    in_file = {p for p, _ in found}
    in_manifest = {p for p, _ in expected}
    earlier: set[int] = set()
    for index in range(max(len(found), len(expected))):
        have = found[index] if index < len(found) else None
        want = expected[index] if index < len(expected) else None
        if have is not None and have[0] in earlier:
            return Problem("inserted", have[0], "a line repeats an event already in the file")
        if have is not None:
            earlier.add(have[0])
        if have == want:
            continue
        if want is not None and want[0] not in in_file:
            return Problem("deleted", want[0], "an exported event is missing from the file")
        if have is not None and have[0] not in in_manifest:
            return Problem("inserted", have[0], "the file holds an event the export did not")
        if have is not None and want is not None and have[0] != want[0]:
            first = min(have[0], want[0])
            return Problem("reordered", first, "events are not in the exported order")
        assert have is not None
        return Problem("modified", have[0], "the line's content differs from what was exported")
    return None
