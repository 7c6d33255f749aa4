"""Verification: does the journal (or an export of it) still say what was appended?

Live (``verify_store``): every stored event is recomputed into its Merkle leaf and
compared with the leaf recorded when it was appended; positions and recorded leaves
must pair up one to one; each stream's versions must run 1, 2, 3...; and every tree
head the journal recorded (checkpoints, exports) must still be the root of the tree of
that size. Offline (``verify_export``): an Observed JSONL file against its manifest,
with no database: each line is re-canonicalised and hashed (nothing the file says
about itself is trusted), and the manifest's leaves must rebuild its root.

Either way the first problem is named by position and kind: ``modified``,
``deleted``, ``inserted``, ``reordered``, ``gap``, ``tree_head``, ``tombstone`` (a
retention tombstone no purge could have written: it vouches for nothing,
`read_tombstones`).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import islice
from operator import itemgetter, lt
from typing import Any

from journal.backend_common import StoredRow
from journal.leaves import SAFE_NAME, event_leaf, leaf_hash
from journal.outcomes import outcome_stream
from journal.store import MAX_POSITION, EventStore
from replay.merkle import EMPTY_ROOT, Frontier, root_of
from replay.observed import ObservedLineError, canonical_faults, parse_line_fields
from replay.receipts import range_fault
from replay.recorded import RecordedLeaves

TREE_HEAD_TYPES = frozenset({"journal.checkpoint", "journal.exported"})
#: Retention tombstones: the versions before them were deleted, their positions listed.
PURGE_TYPES = ("operation.purged", "outcome.purged", "workflow.purged")
#: An operation's tombstone also lists its Outcome Record stream's events (the record, or
#: an outcome purge's tombstone and the record that one listed): at most this many more.
OUTCOME_EVENTS = 2
#: Tombstones' streams read at a time (SQLite's statement takes one parameter each).
STREAMS_AT_ONCE = 500
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
    #: Leaves of a signed export's range its file does not hold (its manifest's
    #: ``attestation.hidden``), once the signature is checked (else None): ``purged``, those
    #: a tombstone line of the file names; ``unaccounted``, the rest (another Space's
    #: events, or lines taken out of the file: in the signed tree, but hashes only, so
    #: nothing about them is verified). Said because a line taken out of a whole-journal
    #: export and listed as hidden verified without a word (found by a defect hunt, stop 36).
    hidden_leaves: dict[str, int] | None = None
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
            "hiddenLeaves": self.hidden_leaves,
            "firstProblem": None
            if first is None
            else {"kind": first.kind, "position": first.position, "message": first.message},
            "problems": len(self.problems),
        }


def verify_store(store: EventStore, page: int = 5000, limit: int = 100) -> VerifyReport:
    """Check the live journal; at most ``limit`` problems are collected.

    Events and recorded leaves are walked side by side in position order. A page whose rows
    and next leaves pair up one to one and all match (the usual journal) is checked at once;
    any other page row by row, where each difference is named.
    """
    # Tree heads come later than the size they name: read them first, so the root is
    # kept only at the sizes that will be asked for.
    # Each row is decoded on its own: one changed behind the journal's back is a problem
    # named at its position (its leaf no longer matches either), never an exception.
    heads: list[tuple[int, int, str]] = []
    unreadable: list[Problem] = []
    for recorded in store.read_topics_raw(sorted(TREE_HEAD_TYPES)):
        head = _tree_head(recorded.state)
        if head is None:
            unreadable.append(Problem("tree_head", recorded.id, "the tree head cannot be read"))
        else:
            heads.append((recorded.id, *head))
    tombstones = read_tombstones(store)
    unreadable += tombstones.problems
    live = _Live(limit, sorted({size for _, size, _ in heads}), tombstones.purged)
    for problem in unreadable:
        live.problem(problem.kind, problem.position, problem.message)
    # Positions start at 1: a row below that is in no tree, yet its stream's readers see it.
    for row in store.read_raw_before_start(max(1, min(limit, 1000))):
        live.problem("inserted", row.id, "an event at a position below 1, which no append gives")
    leaves = RecordedLeaves(store, page)
    after = 0
    while rows := store.read_raw_after(after, page):
        if not live.page_at_once(rows, leaves):
            for row in rows:
                for taken in leaves.before(row.id):
                    live.leaves_without_events(taken)
                found = leaves.peek()
                if found is not None and found[0] == row.id:
                    leaves.take()
                    live.event(row, found[1])
                else:
                    live.problem(
                        "inserted", row.id, "an event with no leaf recorded at append time"
                    )
        after = rows[-1].id
    for taken in leaves.before(MAX_POSITION + 1):
        live.leaves_without_events(taken)
    report = live.report
    for position, size, root in heads:
        report.tree_heads_checked += 1
        if live.roots_at.get(size) != root:
            live.problem(
                "tree_head",
                position,
                f"the tree head recorded here (size {size}) no longer matches: history "
                "before it was changed",
            )
    report.tree_size = live.frontier.size
    report.root = live.frontier.root().hex()
    report.problems.sort(key=lambda p: p.position)
    return report


@dataclass(slots=True)
class _Live:
    """`verify_store`'s walk: the running tree, its roots at the tree heads' sizes, each
    stream's last version, and the problems found."""

    limit: int
    wanted: list[int]  # the tree heads' sizes, sorted
    purged: frozenset[int]  # positions a retention tombstone vouches for (`read_tombstones`)
    heads: set[int] = field(init=False)  # ``wanted`` as a set, for `fold_one`
    report: VerifyReport = field(default_factory=VerifyReport)
    frontier: Frontier = field(default_factory=Frontier)
    roots_at: dict[int, str] = field(default_factory=lambda: {0: EMPTY_ROOT.hex()})
    versions: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.heads = set(self.wanted)

    def problem(self, kind: str, position: int, message: str) -> None:
        if len(self.report.problems) < self.limit:
            self.report.problems.append(Problem(kind, position, message))

    def fold(self, leaves: list[bytes]) -> None:
        """Fold ``leaves`` into the tree, keeping its root at every size a tree head names."""
        frontier, start = self.frontier, self.frontier.size
        wanted = self.wanted
        done = 0
        for size in wanted[bisect_right(wanted, start) : bisect_right(wanted, start + len(leaves))]:
            frontier.extend(leaves[done : size - start])
            self.roots_at[size] = frontier.root().hex()
            done = size - start
        frontier.extend(leaves[done:])

    def fold_one(self, leaf: bytes) -> None:
        """`fold` of one leaf, for the row-by-row walk (no batch to split)."""
        frontier = self.frontier
        frontier.append(leaf)
        if frontier.size in self.heads:
            self.roots_at[frontier.size] = frontier.root().hex()

    def leaves_without_events(self, leaves: list[tuple[int, bytes]]) -> None:
        positions = list(map(itemgetter(0), leaves))
        if not self.purged.issuperset(positions):  # a purge tombstone accounts for those
            for position in positions:  # (OL-10)
                if position not in self.purged:
                    self.problem(
                        "deleted", position, "a leaf was recorded here but the event is gone"
                    )
        self.fold(list(map(itemgetter(1), leaves)))

    def event(self, event: StoredRow, recorded: bytes) -> None:
        """One event and its recorded leaf, checked on its own."""
        stream = str(event.originator_id)
        try:
            leaf = event_leaf(event.id, stream, event.originator_version, event.topic, event.state)
        except ValueError as error:  # columns of other types too (journal/leaves.py)
            leaf = b""
            self.problem("modified", event.id, str(error))
        if leaf and leaf != recorded:
            self.problem("modified", event.id, "the event's content differs from what was appended")
        elif leaf:
            self.canonical([event])
        self.version(event.id, stream, event.originator_version, event.topic, event.state)
        self.fold_one(recorded)
        self.report.events += 1

    def version(self, position: int, stream: str, version: int, topic: str, state: bytes) -> None:
        """Each stream's versions run 1, 2, 3... (a tombstone continues a purged history)."""
        if type(version) is not int:  # a column changed to another type: its leaf says so
            return
        expected = self.versions.get(stream, 0) + 1
        if expected == 1 and topic in PURGE_TYPES:
            expected = (_tombstone_versions(_data(state)) or 0) + 1
        if version != expected:
            self.problem(
                "gap", position, f"stream {stream} jumps from version {expected - 1} to {version}"
            )
        self.versions[stream] = version

    def canonical(self, rows: list[StoredRow]) -> None:
        """Each stored state is RFC 8785's spelling of what it says (`canonical_faults`): the
        offline check of an export refuses any other, so `verify` does too."""
        for index, fault in canonical_faults(list(map(itemgetter(4), rows))).items():
            self.problem("modified", rows[index].id, f"the stored event is {fault}")

    def page_at_once(self, rows: list[StoredRow], leaves: RecordedLeaves) -> bool:
        """Check a page at once when its recorded leaves match (`RecordedLeaves.take_matching`:
        the usual journal): each stream's versions in one loop, one fold. Else ``False`` and
        nothing is taken."""
        page = leaves.take_matching(rows, self.purged)
        if page is None:
            return False
        self.canonical(rows)
        versions, version = self.versions, self.version
        for position, stream, number, topic, state in rows:
            if number != versions.get(stream, 0) + 1 or (number == 1 and topic in PURGE_TYPES):
                version(position, stream, number, topic, state)  # said by it, or a tombstone
            else:
                versions[stream] = number
        self.fold(page.every)
        self.report.events += len(rows)
        return True


def _data(state: object) -> dict[str, Any] | None:
    """The ``data`` of a stored state, or ``None`` when it cannot be read as one."""
    from domain.json_text import load_canonical

    if type(state) is not bytes:  # NULL or text written behind the journal's back
        return None
    try:
        body = load_canonical(state)
    except ValueError:
        return None
    data = body.get("data") if type(body) is dict else None
    return data if type(data) is dict else None


def _tree_head(state: object) -> tuple[int, str] | None:
    """A tree head's size and root, or ``None`` when unreadable."""
    data = _data(state)
    if data is None or type(data.get("tree_size")) is not int or type(data.get("root")) is not str:
        return None
    return data["tree_size"], data["root"]


def _purged_positions(data: dict[str, Any] | None) -> list[int] | None:
    """The positions a tombstone's data lists, or ``None`` when unreadable."""
    positions = None if data is None else data.get("positions", [])
    if type(positions) is not list or any(type(p) is not int for p in positions):
        return None
    return positions


def _tombstone_versions(data: dict[str, Any] | None) -> int | None:
    """The versions a tombstone's data says were purged, or ``None`` when unreadable."""
    versions = None if data is None else data.get("versions", 0)
    return versions if type(versions) is int else None


@dataclass(frozen=True, slots=True)
class Tombstones:
    """What the journal's retention tombstones vouch for (`read_tombstones`)."""

    purged: frozenset[int]  # positions whose missing events a valid tombstone accounts for
    problems: list[Problem]  # a tombstone unreadable (``modified``) or invalid (``tombstone``)


@dataclass(frozen=True, slots=True)
class PurgeTombstone:
    position: int
    stream: str
    version: int
    topic: str
    versions: int  # the versions of ``stream`` it says were purged: 1..versions
    positions: list[int]

    def streams(self) -> dict[str, int]:
        """Each stream it purged, with the versions purged there (1..n): its own, and for an
        operation's tombstone listing more than its versions, the Outcome Record stream."""
        found = {self.stream: self.versions}
        extra = len(self.positions) - self.versions
        if self.topic == PURGE_TYPES[0] and extra > 0:
            found[outcome_stream(self.stream)] = extra
        return found


def read_tombstones(store: EventStore) -> Tombstones:
    """The positions retention tombstones vouch for: the one rule `verify_store` and the
    export (replay/custody.py) share for which missing events were purged.

    Every purge (blackops/operations/retention.py, blackops/workflows/retention.py) appends
    its tombstone to the purged stream, after the events it lists, at the version after
    those it purged (``versions`` + 1), then deletes them. So a tombstone vouches only when
    (`_fault`): it purged at least one version; its positions are distinct, from 1, and all
    below its own; it lists one position per purged version (an operation's: up to
    `OUTCOME_EVENTS` more, its Outcome Record stream's); every event still present at a
    purged version of those streams is one it lists (present only until the deletion that
    follows the tombstone has run); and no other tombstone lists one of its positions,
    unless the later of the two lists the earlier one and all its positions (a purge of a
    stream, or of an operation, whose earlier tombstone it replaces). Anyone who can append
    could otherwise write a "tombstone" listing any positions, later ones included, and
    delete those events."""
    problems: list[Problem] = []
    found: list[PurgeTombstone] = []
    for row in store.read_topics_raw(PURGE_TYPES):
        stream, version = row.originator_id, row.originator_version
        tombstone = tombstone_of(row.id, stream, version, row.topic, _data(row.state))
        if tombstone is None:
            problems.append(Problem("modified", row.id, "the tombstone cannot be read"))
        else:
            found.append(tombstone)
    present = _present(store, {s for t in found for s in t.streams()})
    purged, faults = judge_tombstones(found, present)
    for tombstone in found:
        fault = faults.get(tombstone.position)
        if fault is not None:
            message = f"a purge tombstone that vouches for nothing: {fault}"
            problems.append(Problem("tombstone", tombstone.position, message))
    return Tombstones(frozenset(purged), problems)


def tombstone_of(
    position: int, stream: object, version: object, topic: str, data: dict[str, Any] | None
) -> PurgeTombstone | None:
    """A tombstone as `read_tombstones` judges it, or ``None`` when it cannot be read."""
    positions, versions = _purged_positions(data), _tombstone_versions(data)
    if positions is None or versions is None or type(stream) is not str or type(version) is not int:
        return None
    return PurgeTombstone(position, stream, version, topic, versions, positions)


def purged_by_lines(seen: SeenLines) -> set[int]:
    """The positions the tombstones among an export's lines (as `verify_export` saw them)
    vouch for, judged by the rules `read_tombstones` applies to the journal, with the
    file's lines as what is present: a line merely named ``*.purged`` that lists positions
    vouched for them (found by a defect hunt against the operator, stop 37)."""
    found = [t for row in seen.tombstones if (t := tombstone_of(*row)) is not None]
    found.sort(key=lambda t: t.position)  # the file's order is checked elsewhere
    streams = {s for t in found for s in t.streams()}
    present: dict[str, list[tuple[int, int]]] = {s: [] for s in streams}
    for position, stream, version in zip(seen.positions, seen.streams, seen.versions, strict=True):
        if stream in present:
            present[stream].append((position, version))
    return judge_tombstones(found, present)[0]


def judge_tombstones(
    found: list[PurgeTombstone], present: Mapping[str, list[tuple[int, int]] | None]
) -> tuple[set[int], dict[int, str]]:
    """The positions the valid ones of ``found`` (in position order) vouch for, and why each
    other one vouches for nothing (by its position). ``present``: each purged stream's events
    still there, as ``(position, version)``. The rules of `read_tombstones`, shared by the
    offline check of a signed export (blackops/cli/audit.py), where the file's own lines are
    what is present."""
    faults = {t.position: fault for t in found if (fault := _fault(t, present)) is not None}
    purged = set().union(*(t.positions for t in found))
    if len(purged) != sum(len(t.positions) for t in found):  # (C-level) a position shared
        _shared(found, faults)
    if faults:
        purged = set().union(*(t.positions for t in found if t.position not in faults))
    return purged, faults


def _shared(found: list[PurgeTombstone], faults: dict[int, str]) -> None:
    """Add to ``faults`` each tombstone that lists a position an earlier one lists, unless
    it lists that one and all its positions too (it took it over: a stream purged again,
    an operation purged after its Outcome Record). The earlier claim stands: a purge never
    lists what another tombstone already accounts for, otherwise."""
    latest: dict[int, PurgeTombstone] = {}  # each position's last claimant that took it fairly
    for tombstone in found:  # in position order
        if tombstone.position in faults:
            continue  # it vouches for nothing: no claim to defend, none to take over
        listed = set(tombstone.positions)
        for position in listed:
            earlier = latest.get(position)
            if earlier is not None and (
                earlier.position not in listed or not listed.issuperset(earlier.positions)
            ):
                faults.setdefault(
                    tombstone.position,
                    f"position {position} is already the tombstone's at {earlier.position}",
                )
                break
        else:
            latest.update(dict.fromkeys(listed, tombstone))


def _fault(
    tombstone: PurgeTombstone, present: Mapping[str, list[tuple[int, int]] | None]
) -> str | None:
    """Why ``tombstone`` is not one a purge writes (`read_tombstones`), or ``None``."""
    listed, versions = tombstone.positions, tombstone.versions
    members = set(listed)
    if len(members) != len(listed):
        return "it lists a position twice"
    if listed and (min(listed) < 1 or max(listed) >= tombstone.position):
        return "it lists a position that is not an earlier one"
    if tombstone.version != versions + 1:
        return (
            f"it is version {tombstone.version} of its stream, not the one after the "
            f"{versions} it purged"
        )
    if versions < 1:
        # Every purge deletes at least one version of the stream it writes in: a tombstone
        # purging none could only lend its extra positions to a stream that never was
        # (found by a defect hunt against the operator, stop 37).
        return f"it says {versions} versions were purged"
    most = versions + (OUTCOME_EVENTS if tombstone.topic == PURGE_TYPES[0] else 0)
    if not versions <= len(listed) <= most:
        return f"it lists {len(listed)} positions for {versions} purged versions"
    for stream, purged in tombstone.streams().items():
        events = present.get(stream, [])
        if events is None:
            return f"stream {stream} cannot be read"
        for position, version in events:
            if version <= purged and position not in members:
                return (
                    f"stream {stream} still holds version {version} (position {position}), "
                    "which it says was purged"
                )
    return None


def _present(store: EventStore, streams: set[str]) -> dict[str, list[tuple[int, int]] | None]:
    """Each stream's events as ``(position, version)``, ``None`` for a stream whose events
    cannot be read (one changed behind the journal's back, which the walk names)."""
    # A name no append accepts holds no event the store can read (an operation id of 193+
    # characters has no Outcome Record stream).
    names = sorted(s for s in streams if SAFE_NAME.fullmatch(s))
    found: dict[str, list[tuple[int, int]] | None] = {}
    for start in range(0, len(names), STREAMS_AT_ONCE):
        chunk = names[start : start + STREAMS_AT_ONCE]
        try:
            read = store.read_streams(chunk)
        except (ValueError, KeyError, TypeError):  # a row that is no envelope: one by one
            read = {}
            for stream in chunk:
                try:
                    read[stream] = store.read_stream(stream)
                except (ValueError, KeyError, TypeError):
                    found[stream] = None
        for stream, events in read.items():
            found[stream] = [(e.position, e.version) for e in events]
    return found


@dataclass(slots=True)
class SeenLines:
    """What `verify_export` read of each line, for the signed check (``verify --jsonl
    --key``) to use without reading and parsing the file a second time: flat lists, one
    entry per line, and the purge tombstones among the lines."""

    positions: list[int] = field(default_factory=list)
    leaves: list[bytes] = field(default_factory=list)
    streams: list[str] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    #: (position, stream, version, type, data) of each line whose type is a purge's.
    tombstones: list[tuple[int, str, int, str, dict[str, Any]]] = field(default_factory=list)


def verify_export(
    lines: Iterable[bytes], manifest: dict[str, Any], seen: SeenLines | None = None
) -> VerifyReport:
    """Check an Observed JSONL export against its manifest, offline; ``seen`` (if given)
    keeps what each line holds for the signed check."""
    report = VerifyReport()
    expected_positions: list[int] = []
    expected_leaves: list[bytes] = []
    try:
        for position, leaf in manifest["leaves"]:  # one pass: the first bad entry decides
            if type(position) is not int or position < 1:  # int() took "7", 7.5 and true
                raise ValueError(position)
            expected_positions.append(position)
            expected_leaves.append(bytes.fromhex(leaf))
        claimed_root = str(manifest["root"])
        count = manifest.get("count", -1)
        if type(count) is not int:  # as positions: int() took "67", 67.0 and true
            raise ValueError(count)
    except (KeyError, TypeError, ValueError, OverflowError):  # OverflowError: int(Infinity)
        report.problems.append(Problem("manifest", 0, "the manifest has no usable leaves/root"))
        return report
    rebuilt = root_of(expected_leaves)
    if rebuilt.hex() != claimed_root or count != len(expected_leaves):
        report.problems.append(
            Problem("manifest", 0, "the manifest's leaves do not rebuild its root and count")
        )
        return report
    if len(set(expected_positions)) != len(expected_positions):
        # An export holds each event once: a manifest listing a position twice describes none
        # (its order is judged with the lines', below).
        report.problems.append(Problem("manifest", 0, "the manifest lists a position twice"))
        return report
    # Flat lists, not a tuple per line: kept alive, tuples would have the garbage collector
    # scan them again and again.
    kept = seen if seen is not None else SeenLines()
    positions, leaves = kept.positions, kept.leaves
    for number, raw in enumerate(lines, start=1):
        text = raw.rstrip(b"\n")
        if not text:
            continue  # blank lines carry nothing and are not counted
        try:
            # Re-canonicalised from the parsed content: how the line is spelled proves nothing.
            members, entry = parse_line_fields(text, number)
        except ObservedLineError as bad:
            # Unreadable: name the position the manifest expects on this line.
            index = len(positions)
            position = expected_positions[index] if index < len(expected_positions) else 0
            report.problems.append(Problem("modified", position, str(bad)))
            return report
        positions.append(members[0])
        leaves.append(leaf_hash(entry))
        if seen is not None:
            seen.streams.append(members[1])
            seen.versions.append(members[2])
            if members[3] in PURGE_TYPES:
                seen.tombstones.append((members[0], members[1], members[2], members[3], members[6]))
    report.events = len(positions)
    # The usual answer, at C speed; else the first difference.
    same = positions == expected_positions and leaves == expected_leaves
    if same and not all(map(lt, positions, islice(positions, 1, None))):
        # An export is in position order (OL-11): a file reordered together with its
        # manifest (leaves and root recomputed) matches it, and each line is still in the
        # signed log, so only the order gives it away.
        index = next(i for i in range(1, len(positions)) if positions[i] <= positions[i - 1])
        report.problems.append(
            Problem("reordered", positions[index], "positions do not increase line by line")
        )
        return report
    if not same:
        found = list(zip(positions, leaves, strict=True))
        expected = list(zip(expected_positions, expected_leaves, strict=True))
        problem = _first_difference(found, expected)
        if problem is not None:
            report.problems.append(problem)
    report.tree_size = len(positions)
    report.root = claimed_root if same else root_of(leaves).hex()
    # Lines that are the manifest's: what it says of their range must hold too (a line's
    # own problem is named first, as it always was).
    claim = None if report.problems else _range_claim(manifest, positions, claimed_root)
    if claim is not None:
        report.problems.append(Problem("manifest", 0, claim))
    return report


def _range_claim(manifest: dict[str, Any], positions: list[int], root: str) -> str | None:
    """What the manifest says of its range that its own leaves contradict, or ``None``:
    every position above ``after``; ``firstPosition`` and ``lastPosition`` the first and
    last exported (``null`` for none); a tree (``journalTreeSize``) holding every exported
    leaf, whose root (``journalRoot``) is the range's own when it holds nothing else. Where
    the tree holds more, only a signed export's attestation proves its root
    (`replay.receipts.verify_signed_export`)."""
    after, size = manifest.get("after"), manifest.get("journalTreeSize")
    journal_root = manifest.get("journalRoot")
    if type(after) is not int or after < 0:
        return "the manifest's after is no whole number"
    ends = (manifest.get("firstPosition"), manifest.get("lastPosition"))
    fault = range_fault(positions, (), after, ends)
    if fault is not None:
        return f"the manifest: {fault}"
    if type(size) is not int or size < len(positions) or type(journal_root) is not str:
        return "the manifest's journalTreeSize and journalRoot name no tree holding its leaves"
    if size == len(positions) and journal_root != root:
        return "the manifest's journalRoot is not the root of its leaves, the whole tree"
    return None


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
        if have is None:  # not reached: the manifest lists each position once
            return Problem("deleted", want[0] if want else 0, "the file ends early")
        return Problem("modified", have[0], "the line's content differs from what was exported")
    return None
