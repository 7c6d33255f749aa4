"""An export a page at a time (replay/custody.py `_export_page`) writes and proves exactly
what the row-by-row export does: the same lines, leaves, roots and refusals, across page
edges, purged positions, ``after``, ``until`` and ``keep``; and the page primitives it is
built from (`Frontier.extend`, `page_entries`) agree with the one-at-a-time ones."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from journal.backend_common import StoredRow
from journal.leaves import entry_bytes, leaf_hash, page_entries
from replay.merkle import Frontier, root_of

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


def test_root_of_is_rfc6962_on_every_size_to_40() -> None:
    """The running tree against RFC 6962's recursive MTH, written out independently."""
    from replay.merkle import node_hash

    def mth(leaves: list[bytes]) -> bytes:
        if len(leaves) == 1:
            return leaves[0]
        k = 1
        while k * 2 < len(leaves):
            k *= 2
        return node_hash(mth(leaves[:k]), mth(leaves[k:]))

    leaves = _leaves(40)
    for n in range(1, 41):
        assert root_of(leaves[:n]) == mth(leaves[:n])


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
    ],
)
def test_page_entries_leave_a_row_entry_bytes_refuses_or_cannot_write(row: StoredRow) -> None:
    good = _row(b'{"at":"y"}')
    assert page_entries([good, row, good]) is None


def test_a_version_stored_as_text_never_gives_the_appended_entry() -> None:
    appended = entry_bytes(*_row(b'{"at":"x"}'))
    [entry] = page_entries([_row(b'{"at":"x"}', version="3")]) or [b""]
    assert entry != appended and b"\"version\":'3'" in entry
