"""``EventStore.read_raw_after(..., max_bytes=)``: a page ends with the row whose stored
states reach the budget, the first row always comes, and it is exactly that prefix of the
page without a budget, on every store and at every boundary (decisions P62). A state
written behind the journal's back as SQLite TEXT is measured in bytes, as it is read
(``length()`` counted its characters up to the first NUL: found by review, stop 40)."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

from rich_journal import inline_runs

from journal.store import EventStore


def expected(rows: list, max_bytes: int) -> list:  # type: ignore[type-arg]
    kept, size = [], 0
    for row in rows:
        if size >= max_bytes:
            break
        kept.append(row)
        size += len(row.state)
    return kept


def test_a_budgeted_page_is_the_prefix_that_reaches_its_budget(store_url: str) -> None:
    inline_runs(store_url, ["t"] * 12)
    rng = random.Random(40)
    with EventStore(store_url) as store:
        everything = store.read_raw_after(0, 10_000)
        sizes = [len(row.state) for row in everything]
        cases = [(0, 500, 1), (0, 500, sizes[0]), (0, 500, sizes[0] + 1), (len(sizes), 5, 10)]
        cases += [(rng.randrange(len(sizes)), rng.randrange(1, 20), rng.randrange(1, 4000))
                  for _ in range(60)]  # fmt: skip
        for after, limit, budget in cases:
            plain = store.read_raw_after(after, limit)
            assert store.read_raw_after(after, limit, max_bytes=budget) == expected(plain, budget)


def test_a_text_state_is_measured_in_bytes(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite3"
    url = f"sqlite:///{path}"
    inline_runs(url, ["t"] * 2)
    with sqlite3.connect(path) as db:  # rows changed behind the journal's back, as TEXT
        db.execute("UPDATE stored_events SET state = CAST(? AS TEXT)", ("\x00" + "x" * 999,))
    with EventStore(url) as store:
        rows = store.read_raw_after(0, 500)
        assert all(len(row.state) == 1000 for row in rows) and len(rows) > 2
        assert len(store.read_raw_after(0, 500, max_bytes=1500)) == 2
