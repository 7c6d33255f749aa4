"""A page at a time: an export (replay/custody.py `_export_page`) writes and proves exactly
what the row-by-row export does (the same lines, leaves, roots and refusals across page
edges, purged positions, ``after``, ``until`` and ``keep``), a live verification
(replay/verify.py `_Live.page_at_once`) reports exactly what the row-by-row one does, clean or
changed behind the journal's back; and the page primitives they are built from
(`Frontier.extend`, `page_entries`) agree with the one-at-a-time ones."""

from __future__ import annotations

import io
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tampering import behind_the_journals_back, position_column, q

import replay.custody as custody
from blackops.testing import FakeClock
from domain.context import Actor
from domain.events import NewEvent
from journal.backend_common import StoredRow
from journal.leaves import entry_bytes, leaf_hash, page_entries
from journal.store import Append, EventStore
from replay.custody import export_with_manifest, record_checkpoint
from replay.export import observed_lines
from replay.integrity import IntegrityError
from replay.merkle import Frontier, root_of
from replay.observed import observed_line
from replay.verify import _Live, verify_export, verify_store

AT = "2026-11-30T09:00:00.000000Z"
CONTEXT = {"actor": {"id": "ana", "kind": "principal"}, "tenant": "t"}


# -- Frontier.extend -------------------------------------------------------------------------


def _leaves(count: int, salt: int = 0) -> list[bytes]:
    return [leaf_hash(b"%d:%d" % (salt, n)) for n in range(count)]


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 70), st.lists(st.integers(0, 40), max_size=6))
def test_extend_folds_the_same_nodes_as_append(start: int, batches: list[int]) -> None:
    one, many = Frontier(), Frontier()
    for leaf in _leaves(start):
        one.append(leaf)
        many.append(leaf)
    for salt, count in enumerate(batches, 1):
        batch = _leaves(count, salt)
        for leaf in batch:
            one.append(leaf)
        many.extend(batch)
        assert (many.size, many.nodes(), many.root()) == (one.size, one.nodes(), one.root())


# -- page_entries -----------------------------------------------------------------------------


def _row(state: Any, version: Any = 3, stream: Any = "op-1") -> StoredRow:
    return StoredRow(7, stream, version, "operation.received", state)


def test_page_entries_are_entry_bytes() -> None:
    rows = [
        _row(b'{"at":"x","context":{},"data":{"\xc3\xa9":1}}', version=n, stream=f"op-{n}")
        for n in range(1, 6)
    ]
    assert page_entries(rows) == [entry_bytes(*row) for row in rows]
    assert page_entries([]) == []


@pytest.mark.parametrize(
    "row",
    [
        _row(b"{}"),
        _row(b'{"at":"x"'),
        _row(b'"at":"x"}'),
        _row(b""),
        _row('{"at":"x"}'),  # text, not bytes
        _row(b'{"at":"x"}', stream=b"op-1"),
        _row(b'{"at":"x"}', stream="op-\udc80"),  # not UTF-8
        _row(b'{"at":"x"}', version="3"),  # a version stored as text behind the back
        _row(b'{"at":"x"}', version=3.0),
        _row(b'{"at":"x"}', version=True),
        _row(b'{"at":"x"}', stream=None),
        # Changed to break the line it is written on (found by a defect hunt, stop 36):
        _row(b'{"at":"x"}\n\nid: 999999\ndata: {"forged":true}\n\n{"x":1}'),
        _row(b'{"at":"x",\r"context":{}}'),
        _row(b'{"at":"x"}', stream='op-1","forged":"1'),
        _row(b'{"at":"x"}', stream="op\\1"),
        _row(b'{"at":"x"}', stream="op-1\n"),
        _row(b'{"at":"x"}', stream="op 1"),
        StoredRow(7, "op-1", 3, "operation.received\r", b'{"at":"x"}'),
    ],
)
def test_page_entries_leave_a_row_entry_bytes_refuses_or_cannot_write(row: StoredRow) -> None:
    good = _row(b'{"at":"y"}')
    assert page_entries([good, row, good]) is None


@pytest.mark.parametrize(
    "row",
    [
        _row(b'{"at":"x"}\n{"at":"y"}'),
        _row(b'{"at":"x"}\r{"at":"y"}'),
        _row(b'{"at":"x"}', stream='op-1"'),
        _row(b'{"at":"x"}', stream="op-1\n"),  # a pattern's $ matched before a last LF
        StoredRow(7, "op-1", 3, "a\\b", b'{"at":"x"}'),
        StoredRow(7, "op-1", 3, "operation.received\n", b'{"at":"x"}'),
    ],
)
def test_entry_bytes_refuses_what_would_not_be_one_line_of_json(row: StoredRow) -> None:
    with pytest.raises(ValueError, match="at position 7"):
        entry_bytes(*row)


# -- the export, page at a time against row by row ------------------------------------------


def _journal(store: EventStore, streams: int = 9) -> int:
    """Streams of a few events; the third stream purged up to its version 2, with the
    tombstone that accounts for the deleted positions (as retention does). Returns the
    last position."""
    for n in range(streams):
        events = [
            NewEvent("t.created", AT, {**CONTEXT, "n": n}, {"n": n, "note": "é" * n}),
            NewEvent("t.noted", AT, CONTEXT, {"k": [n, 1.5, None]}),
        ]
        store.append(Append(f"op-{n}", 0, events))
    gone = [e.position for e in store.read_stream("op-2")]
    store.append(
        Append(
            "op-2",
            2,
            [NewEvent("operation.purged", AT, CONTEXT, {"positions": gone, "versions": 2})],
        )
    )
    store.delete_stream_events("op-2", 2)
    for n in range(streams, streams + 4):
        store.append(Append(f"op-{n}", 0, [NewEvent("t.created", AT, CONTEXT, {"n": n})]))
    return store.last_position()


@pytest.fixture
def journal(any_store_url: str) -> Iterator[tuple[EventStore, int]]:
    store = EventStore(any_store_url)
    try:
        yield store, _journal(store)
    finally:
        store.close()


@contextmanager
def _pages_at_once(
    monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, allowed: bool
) -> Iterator[list[bool]]:
    """Count the pages ``owner.name`` (a page-at-once check) takes at once; with ``allowed``
    false it declines every page, so the code goes row by row as before."""
    pages: list[bool] = []
    check = getattr(owner, name)

    def counted(*args: Any) -> bool:
        pages.append(allowed and check(*args))
        return pages[-1]

    with monkeypatch.context() as patch:
        patch.setattr(owner, name, counted)
        yield pages


def _export(
    store: EventStore, paged: bool, monkeypatch: pytest.MonkeyPatch, **options: Any
) -> tuple[bytes, dict[str, Any], int]:
    """One export, page at a time or (``paged`` false) row by row: its lines, its manifest
    without the members that differ between any two exports, the pages taken at once."""
    out = io.BytesIO()
    with _pages_at_once(monkeypatch, custody, "_export_page", paged) as pages:
        manifest = export_with_manifest(
            store, out, actor=Actor("auditor"), clock=FakeClock(), **options
        )
    for volatile in ("custody", "exportedAt"):
        manifest.pop(volatile)
    return out.getvalue(), manifest, sum(pages)


def _tenant_odd(line: bytes) -> bool:
    return b'"n":1' in line or b'"n":3' in line or b'"n":5' in line


@pytest.mark.parametrize("page", [2, 3, 5, 2000])
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"after": 4},
        {"after": 5},
        {"until": 13},
        {"after": 3, "until": 6},
        {"keep": _tenant_odd},
    ],
    ids=["all", "after4", "after5", "until", "range", "keep"],
)
def test_a_paged_export_is_the_row_by_row_export(
    journal: tuple[EventStore, int],
    monkeypatch: pytest.MonkeyPatch,
    page: int,
    options: dict[str, Any],
) -> None:
    store, last = journal
    monkeypatch.setattr(custody, "PAGE", page)
    options = {"until": last, **options}  # each export journals itself: the same range
    rows, manifest, none = _export(store, False, monkeypatch, **options)
    paged_rows, paged_manifest, at_once = _export(store, True, monkeypatch, **options)
    assert (paged_rows, paged_manifest) == (rows, manifest)
    # Pages with purged positions' leaves among their rows' are taken at once too.
    assert none == 0 and at_once > 0
    lines = rows.splitlines(keepends=True)
    assert manifest["count"] == len(lines) > 0
    assert verify_export(lines, manifest).ok


TAMPERING = {
    # A state changed: its line no longer hashes to its leaf.
    "state": "UPDATE {events} SET state = CAST(replace(CAST(state AS TEXT), '2026', '2027') "
    "AS {blob}) WHERE {position} = ?",
    # Leaves renumbered from there on: the same leaves in the same order, recorded for no
    # event (only their positions tell).
    "leaves": "UPDATE {leaves} SET position = position + 1000 WHERE position >= ?",
}


@pytest.mark.parametrize("tampering", sorted(TAMPERING))
@pytest.mark.parametrize("page", [3, 5])
def test_a_paged_export_refuses_where_the_row_by_row_export_does(
    store_url: str, monkeypatch: pytest.MonkeyPatch, page: int, tampering: str
) -> None:
    """A change behind the journal's back in the middle of a page that aligns with its
    leaves (after the purged positions): the same position is named, and the same lines
    are written before it."""
    store = EventStore(store_url)
    try:
        last = _journal(store)
        monkeypatch.setattr(custody, "PAGE", page)
        victim = 10
        _behind_the_journals_back(store, TAMPERING[tampering], victim)
        written = []
        for paged in (False, True):
            out = io.BytesIO()
            with (
                _pages_at_once(monkeypatch, custody, "_export_page", paged),
                pytest.raises(IntegrityError) as refused,
            ):
                export_with_manifest(store, out, actor=Actor("a"), clock=FakeClock(), until=last)
            assert refused.value.position == victim
            written.append(out.getvalue())
        assert written[0] == written[1]
        assert len(written[1].splitlines()) == victim - 1 - 2  # op-2's two events were purged
    finally:
        store.close()


def _behind_the_journals_back(store: EventStore, statement: str, position: int) -> None:
    """Run one of `TAMPERING`'s or `CHANGES`' statements at ``position``."""
    with behind_the_journals_back(store) as (conn, events, leaves):
        column = position_column(conn)
        if column != "rowid":  # PostgreSQL: bytea has no text cast that keeps every byte
            text = "CAST(replace(CAST(state AS TEXT), '2026', '2027') AS {blob})"
            bytea = "convert_to(replace(convert_from(state, 'UTF8'), '2026', '2027'), 'UTF8')"
            statement = statement.replace(text, bytea)
        names = {"events": events, "leaves": leaves, "position": column, "blob": "BLOB"}
        conn.execute(q(conn, statement.format(**names)), (position,))


def test_observed_lines_are_observed_line_of_each_row(journal: tuple[EventStore, int]) -> None:
    store, _ = journal
    rows = store.read_raw_after(0, 1000)
    expected: Callable[[StoredRow], bytes] = observed_line
    assert list(observed_lines(store, page=4)) == [(row.id, expected(row)) for row in rows]


@pytest.mark.parametrize(
    "change",
    [
        "UPDATE stored_events SET originator_version = 'abc' WHERE rowid = ?",
        "UPDATE stored_events SET originator_version = 2.5 WHERE rowid = ?",
        "UPDATE stored_events SET originator_id = CAST('op-x' AS BLOB) WHERE rowid = ?",
    ],
    ids=["text version", "real version", "blob stream"],
)
def test_observed_lines_write_a_row_changed_to_other_types_as_row_by_row(
    tmp_path: Any, change: str
) -> None:
    """SQLite keeps what SQL behind the journal's back stores in a column of another type:
    the page's lines are still each row's `observed_line` (found by review)."""
    store = EventStore(f"sqlite:///{tmp_path}/j.sqlite3")
    try:
        _journal(store)
        with sqlite3.connect(tmp_path / "j.sqlite3", isolation_level=None) as conn:
            conn.execute(change, (3,))
        rows = store.read_raw_after(0, 1000)
        lines = list(observed_lines(store, page=4))
        assert lines == [(row.id, observed_line(row)) for row in rows]
        assert page_entries(rows[:4]) is None and page_entries(rows[4:8]) is not None
    finally:
        store.close()


# -- live verification, page at a time against row by row -----------------------------------

EVENT_GONE = "DELETE FROM {events} WHERE {position} = ?"
LEAF_GONE = "DELETE FROM {leaves} WHERE position = ?"
#: Changes behind the journal's back: the statements, and the position they are made at.
CHANGES: dict[str, tuple[tuple[str, ...], int]] = {
    "none": ((), 0),
    **{name: ((statement,), 10) for name, statement in TAMPERING.items()},
    # A version changed: its leaf no longer matches.
    "version": (("UPDATE {events} SET originator_version = 7 WHERE {position} = ?",), 10),
    # An event gone with no tombstone to account for it; its leaf stays.
    "event gone": ((EVENT_GONE,), 10),
    # A leaf gone: its event was never recorded.
    "leaf gone": ((LEAF_GONE,), 10),
    # Both gone: rows and leaves still pair up, but the stream's next version leaves a gap
    # (and the tree heads no longer match).
    "both gone": ((EVENT_GONE, LEAF_GONE), 9),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
@pytest.mark.parametrize("page", [2, 3, 5, 5000])
def test_a_paged_verification_is_the_row_by_row_one(
    store_url: str, monkeypatch: pytest.MonkeyPatch, page: int, change: str
) -> None:
    """Tree heads inside pages and at their edges, purged positions, and one change behind
    the journal's back in a page that aligns with its leaves: the same report, problems
    and roots included."""
    store = EventStore(store_url)
    try:
        _journal(store)
        for _ in range(2):
            record_checkpoint(store, actor=Actor("ops"), clock=FakeClock())
            store.append(Append(f"late-{store.last_position()}", 0, [_event()]))
        statements, position = CHANGES[change]
        for statement in statements:
            _behind_the_journals_back(store, statement, position)
        (rows, none), (pages, at_once) = (
            _verified(store, page, paged, monkeypatch) for paged in (False, True)
        )
        assert pages == rows
        assert none == 0 and (
            change != "none" or at_once == -(-len(store.read_raw_after(0, 99)) // page)
        )
        assert page > 3 or at_once > 0
        summary, problems, _ = rows
        assert summary["ok"] == (change == "none") and summary["treeHeadsChecked"] == 2
        if change == "both gone":
            assert {p.kind for p in problems} == {"gap", "tree_head"}
    finally:
        store.close()


def _verified(
    store: EventStore, page: int, paged: bool, monkeypatch: pytest.MonkeyPatch
) -> tuple[tuple[dict[str, Any], list[Any], str], int]:
    """One live verification, page at a time or (``paged`` false) row by row: its report,
    problems and root, and the pages checked at once."""
    with _pages_at_once(monkeypatch, _Live, "page_at_once", paged) as pages:
        report = verify_store(store, page=page)
    return (report.to_dict(), report.problems, report.root), sum(pages)


def _event() -> NewEvent:
    return NewEvent("t.created", AT, CONTEXT, {"late": True})


# -- the checkpoint tree's re-hash, page at a time against event by event -------------------


@pytest.mark.parametrize("change", ["none", "state", "version", "event gone", "both gone"])
def test_the_checkpoint_trees_rehash_a_page_at_a_time_finds_what_one_at_a_time_does(
    store_url: str, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    """`JournalTree._rehash` re-hashes the events of a range against the leaves it folded
    in: a page at once where their leaves follow one another (`_rehashed_at_once`), else
    event by event; both name the same first event that no longer hashes to its leaf."""
    from blackops.audit.tree import JournalTree

    store = EventStore(store_url)
    try:
        _journal(store)
        monkeypatch.setattr("blackops.audit.tree._PAGE", 3)
        tree = JournalTree(store)
        tree.sync()
        statements, position = CHANGES[change]
        for statement in statements:  # behind the back of a tree that folded the leaves in
            _behind_the_journals_back(store, statement, position)
        if statements:  # the change did happen (review)
            still_there = [row.id for row in store.read_raw_after(position - 1, 1)] == [position]
            assert still_there == ("gone" not in change)
        (one, none), (paged, taken) = (
            _rehashed(tree, at_once, monkeypatch) for at_once in (False, True)
        )
        assert paged == one
        assert none == 0 and taken > 0
        changed = change in ("state", "version")  # an event there that no longer hashes
        assert one == (
            (10, "an event no longer hashes to the leaf signed over") if changed else None
        )
    finally:
        store.close()


def _rehashed(
    tree: Any, at_once: bool, monkeypatch: pytest.MonkeyPatch
) -> tuple[tuple[int, str] | None, int]:
    """`JournalTree._rehash` over the whole tree, pages at once or (``at_once`` false) event
    by event: the first mismatch (position, message) or ``None``, and the pages at once."""
    from blackops.audit.tree import JournalTree, LeafMismatch

    with _pages_at_once(monkeypatch, JournalTree, "_rehashed_at_once", at_once) as pages:
        try:
            tree._rehash(0, tree.size)
        except LeafMismatch as mismatch:
            return (mismatch.position, str(mismatch)), sum(pages)
    return None, sum(pages)


@pytest.mark.parametrize(
    "leaves", [[[1, "zz"], [float("inf"), "00"]], [[float("inf"), "00"]]], ids=["after", "alone"]
)
def test_a_manifest_with_an_infinite_position_is_named_a_bad_manifest(leaves: list[Any]) -> None:
    """Its leaves read in one pass: the first bad entry decides, and an infinite position is
    a bad manifest, not an OverflowError (found by review)."""
    report = verify_export([], {"leaves": leaves, "root": "x", "count": len(leaves)})
    assert [(p.kind, p.position) for p in report.problems] == [("manifest", 0)]


@pytest.mark.parametrize("count", ["x", None, float("inf"), "0", 0.0, False])
def test_a_manifest_whose_count_is_no_integer_is_named_a_bad_manifest(count: Any) -> None:
    """Found by review: it was an uncaught ValueError or TypeError."""
    empty = root_of([]).hex()
    report = verify_export([], {"leaves": [], "root": empty, "count": count})
    assert [(p.kind, p.position) for p in report.problems] == [("manifest", 0)]


def test_rows_far_apart_read_at_most_a_page_of_other_leaves_ahead(
    any_store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two rows with 60 purged positions' leaves between them, pages of 5: the export and
    the verification take what pairs up at once, read at most a page of leaves past a
    page's rows, and give what row by row gives (review found a read that grew with the
    gap, and time with its square)."""
    from replay.recorded import RecordedLeaves

    store = EventStore(any_store_url)
    try:
        store.append(Append("first", 0, [_event()]))
        events = [NewEvent("t.noted", AT, CONTEXT, {"k": n}) for n in range(60)]
        store.append(Append("gone", 0, events))
        gone = [e.position for e in store.read_stream("gone")]
        tombstone = {"positions": gone, "versions": 60}
        store.append(Append("gone", 60, [NewEvent("operation.purged", AT, CONTEXT, tombstone)]))
        store.delete_stream_events("gone", 60)
        last = store.last_position()
        monkeypatch.setattr(custody, "PAGE", 5)
        asked: list[int] = []
        ahead = RecordedLeaves.ahead

        def counted(self: RecordedLeaves, count: int) -> list[tuple[int, bytes]]:
            asked.append(count)
            return ahead(self, count)

        monkeypatch.setattr(RecordedLeaves, "ahead", counted)
        rows, manifest, _ = _export(store, False, monkeypatch, until=last)
        assert (rows, manifest) == _export(store, True, monkeypatch, until=last)[:2]
        assert manifest["count"] == 2 and verify_export(rows.splitlines(True), manifest).ok
        assert (
            _verified(store, 5, True, monkeypatch)[0] == _verified(store, 5, False, monkeypatch)[0]
        )
        assert asked and max(asked) <= 5 + 5  # a page of rows, a page of other leaves
    finally:
        store.close()
