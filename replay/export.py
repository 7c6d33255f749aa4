"""Export the journal as Observed JSONL (OL-11): a derived, at-least-once view.

Lines come in position order, read page by page; ``follow`` keeps reading as the
journal grows until told to stop. The canonical journal stays the truth: an export
is a copy that observers deduplicate by position.
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from operator import attrgetter
from typing import BinaryIO

from journal.backend_common import StoredRow
from journal.leaves import page_entries
from journal.store import EventStore
from replay.integrity import IntegrityError
from replay.observed import observed_line

PAGE = 2000


@dataclass(slots=True)
class ExportSummary:
    count: int = 0
    first_position: int | None = None
    last_position: int | None = None


def rows_through(rows: list[StoredRow], until: int | None) -> tuple[list[StoredRow], bool]:
    """A page of rows (in position order) up to position ``until``, and whether any lay past
    it (the range ends in this page)."""
    if until is None or not rows or rows[-1].id <= until:
        return rows, False
    return rows[: bisect_right(rows, until, key=attrgetter("id"))], True


def observed_lines(
    store: EventStore,
    after: int = 0,
    limit: int | None = None,
    page: int = PAGE,
    until: int | None = None,
    max_bytes: int | None = None,
) -> Iterator[tuple[int, bytes]]:
    """``(position, line)`` for events after ``after``, at most ``limit`` of them, up to
    position ``until`` when given (rows past it are never read into lines: one changed
    behind the journal's back there does not stop the range before it). ``max_bytes``:
    they end with the event whose stored states reach it in all (at least one), and no row
    past it is read, so a reader of large events holds a bounded page (a stalled stream
    held ~600 MB: found by a defect hunt, stop 40)."""
    remaining, budget = limit, max_bytes
    while (remaining is None or remaining > 0) and (budget is None or budget > 0):
        size = page if remaining is None else min(page, remaining)
        read = store.read_raw_after(after, size, max_bytes=budget)
        rows, past = rows_through(read, until)
        if not rows:
            return
        if budget is not None:
            budget -= sum(len(row.state) for row in rows if type(row.state) is bytes)
        entries = page_entries(rows)
        if entries is None:  # some row is not as the journal writes it: find it
            for row in rows:
                try:
                    line = observed_line(row)
                except (ValueError, TypeError, AttributeError):  # changed behind its back
                    raise IntegrityError(row.id, "the event is not what was appended") from None
                yield row.id, line
        else:
            lines = [entry + b"\n" for entry in entries]
            yield from zip(map(attrgetter("id"), rows), lines, strict=True)
        after = rows[-1].id
        if past:
            return
        if remaining is not None:
            remaining -= len(rows)


def export_journal(
    store: EventStore,
    out: BinaryIO,
    *,
    after: int = 0,
    follow: bool = False,
    stop: threading.Event | None = None,
    poll_seconds: float = 0.2,
    progress: Callable[[int, int], None] | None = None,
    until: int | None = None,
) -> ExportSummary:
    """Write every event after ``after`` (up to ``until``, when given); with ``follow``, keep
    going until ``stop`` (or until ``until`` is reached).

    ``progress(position, last_position)`` is called after each page.
    """
    summary = ExportSummary()
    stop = stop or threading.Event()
    reached = until is not None and after >= until
    while not reached:
        end = store.last_position()
        for position, line in observed_lines(store, after, until=until):
            out.write(line)
            summary.count += 1
            if summary.first_position is None:
                summary.first_position = position
            summary.last_position = after = position
            if progress is not None and summary.count % PAGE == 0:
                progress(position, max(end, position))
        # Reached once this round read past ``until``: the journal's end was beyond it when
        # the round began, and positions commit in order (a gap may skip ``until`` itself).
        reached = until is not None and (after >= until or end > until)
        out.flush()
        if progress is not None:
            progress(after, max(end, after))
        if not follow or reached or stop.wait(poll_seconds):
            return summary
    return summary
