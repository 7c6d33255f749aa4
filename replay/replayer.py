"""Observer Replay (OL-11): feed an Observed JSONL stream to an observer, in order.

Delivery is checked, never assumed: a position seen again is a duplicate (stop, or
skip it), a position lower than one already delivered is out of order, and a stream
whose versions jump is missing events (a gap). Positions themselves may jump: the
journal's sequence skips numbers a failed insert used up, so only per-stream versions
can prove that something is missing.
"""

from __future__ import annotations

import contextlib
import os
from bisect import bisect_left
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from journal.backend_common import MAX_POSITION
from replay.observed import ObservedEvent, ObservedLineError, parse_line


@runtime_checkable
class Observer(Protocol):
    def observe(self, event: ObservedEvent) -> object: ...


ObserverLike = Observer | Callable[[ObservedEvent], object]
OnDuplicate = Literal["stop", "skip"]


@dataclass(frozen=True, slots=True)
class Anomaly:
    kind: Literal["duplicate", "out_of_order", "gap"]
    line: int
    position: int
    stream: str
    message: str


class ReplayStopped(Exception):
    """Replay met an anomaly it may not pass; ``report`` says how far it got."""

    def __init__(self, anomaly: Anomaly, report: ReplayReport) -> None:
        super().__init__(f"line {anomaly.line}, position {anomaly.position}: {anomaly.message}")
        self.anomaly = anomaly
        self.report = report


@dataclass(slots=True)
class ReplayReport:
    delivered: int = 0
    skipped_before: int = 0  # at or below the resume position
    duplicates_skipped: int = 0
    last_position: int = 0
    anomalies: list[Anomaly] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {
            "delivered": self.delivered,
            "skippedBefore": self.skipped_before,
            "duplicatesSkipped": self.duplicates_skipped,
            "lastPosition": self.last_position,
            "anomalies": [
                {"kind": a.kind, "line": a.line, "position": a.position, "stream": a.stream,
                 "message": a.message}
                for a in self.anomalies
            ],
        }  # fmt: skip


def deliver_to(observer: ObserverLike) -> Callable[[ObservedEvent], object]:
    """The call that hands an event to ``observer`` (its ``observe``, or itself)."""
    if isinstance(observer, Observer):
        return observer.observe
    if callable(observer):
        return observer
    raise TypeError("an observer is a callable or has observe(event)")


def replay(
    lines: Iterable[bytes],
    observer: ObserverLike,
    *,
    after: int = 0,
    on_duplicate: OnDuplicate = "stop",
    state_file: Path | None = None,
    checkpoint_every: int = 1000,
    progress: Callable[[int], None] | None = None,
) -> ReplayReport:
    """Deliver every event with a position above ``after``, in order; raise
    :class:`ReplayStopped` at a gap, a reordering, or (``on_duplicate="stop"``) a
    duplicate. ``state_file`` keeps the last delivered position (written atomically
    every ``checkpoint_every`` events and at the end), so a later run can resume
    with ``after=read_state(state_file)``; an observer may then see up to that many
    events again, and deduplicates by position (OL-11)."""
    if on_duplicate not in ("stop", "skip"):
        raise ValueError("on_duplicate must be 'stop' or 'skip'")
    deliver = deliver_to(observer)
    report = ReplayReport(last_position=after)
    # Delivered positions only ever rise (a lower one stops the replay or, as a duplicate,
    # is skipped), so they stay sorted in a list: cheaper to keep than a set, and searched
    # only when a position is not above every delivered one.
    delivered_positions: list[int] = []
    keep = delivered_positions.append
    versions: dict[str, int] = {}
    delivered, last = 0, after  # kept in locals, written to ``report`` when it is looked at
    skipped_last = 0  # the highest position skipped as at or below ``after``
    # Streams with a line at or below ``after`` in this file: a whole run would have seen
    # them start, so they must start at version 1 here too (the others start unchecked).
    seen_before: set[str] = set()
    try:
        for number, raw in enumerate(lines, start=1):
            text = raw.rstrip(b"\n")
            if not text:
                continue  # a blank line carries nothing (e.g. a trailing newline)
            event = parse_line(text, number)
            position, stream, version = event.position, event.stream, event.version
            if position <= after:
                seen_before.add(stream)
                if skipped_last < position and last == after:
                    # Delivered by an earlier run, not again; but each stream's version is kept,
                    # so an event missing right after the resume point is a gap here too, and
                    # its position, so a repeat later is a duplicate. Any other line at or below
                    # the resume point (a repeat, a lower one, or one after this run has
                    # delivered) is checked below as a whole run checks it.
                    report.skipped_before += 1
                    versions[stream] = version
                    skipped_last = position
                    keep(position)
                    continue
            # The usual case inline (a later position than any delivered, so never seen; the
            # stream's next version, or version 1 of a new stream that is no tombstone); anything
            # else is looked at by `_check`.
            previous = versions.get(stream)
            if previous is None:
                usual = version == 1 and not event.type.endswith(".purged")
            else:
                usual = version == previous + 1
            if not usual or position <= last:
                anomaly = _check(
                    event, number, last, delivered_positions, versions, seen_before, after
                )
                if anomaly is not None:
                    report.anomalies.append(anomaly)
                    if anomaly.kind == "duplicate" and on_duplicate == "skip":
                        report.duplicates_skipped += 1
                        continue
                    raise ReplayStopped(anomaly, report)  # its report is filled in below
            deliver(event)
            keep(position)
            versions[stream] = version
            delivered += 1
            last = position
            if delivered % checkpoint_every == 0:
                report.delivered, report.last_position = delivered, last
                _save_state(state_file, position)
                if progress is not None:
                    progress(position)
    except BaseException:
        # Stopped at an anomaly, or the line source or the observer failed: what was
        # delivered is saved, so a resume starts after it (instead of up to
        # ``checkpoint_every`` events earlier); an observer that failed on an event sees it
        # again (it may have seen part of it: observers deduplicate).
        report.delivered, report.last_position = delivered, last
        _save_state(state_file, last)
        raise
    report.delivered, report.last_position = delivered, last
    _save_state(state_file, last)
    if progress is not None:
        progress(last)
    return report


def _check(
    event: ObservedEvent,
    line: int,
    last: int,
    delivered_positions: list[int],
    versions: dict[str, int],
    seen_before: set[str],
    after: int,
) -> Anomaly | None:
    def anomaly(kind: Literal["duplicate", "out_of_order", "gap"], message: str) -> Anomaly:
        return Anomaly(kind, line, event.position, event.stream, message)

    at = bisect_left(delivered_positions, event.position)
    if at < len(delivered_positions) and delivered_positions[at] == event.position:
        return anomaly("duplicate", f"position {event.position} was already delivered")
    if event.position < last:
        return anomaly("out_of_order", f"position {event.position} comes after position {last}")
    previous = versions.get(event.stream)
    if previous is None and event.type.endswith(".purged"):
        # Retention purged its earlier versions; the tombstone says how many (OL-10).
        purged: object = event.data.get("versions", 0)
        if type(purged) is not int or purged < 0:
            raise ObservedLineError(line, "a tombstone's data.versions must be a whole number")
        previous = purged
    if previous is None:
        # From the start of the journal every stream must begin at version 1; after a
        # resume point its earlier events were delivered before (those in this file were
        # counted while skipped), so only a stream with no line at or below the resume
        # point in this file starts unchecked.
        if (after == 0 or event.stream in seen_before) and event.version != 1:
            return anomaly("gap", f"stream {event.stream} starts at version {event.version}, not 1")
    elif event.version != previous + 1:
        return anomaly(
            "gap",
            f"stream {event.stream} goes from version {previous} to {event.version}",
        )
    return None


def read_state(state_file: Path) -> int:
    """The last delivered position saved by :func:`replay` (0 when there is none)."""
    try:
        text = state_file.read_bytes().strip()
    except FileNotFoundError:
        return 0
    except OSError as error:  # a folder, unreadable
        raise ValueError(f"{state_file} cannot be read: {error.strerror}") from None
    if not (text.isascii() and text.isdigit() and len(text) <= 19 and int(text) <= MAX_POSITION):
        raise ValueError(f"{state_file} does not hold a position")
    return int(text)


class StateNotSaved(Exception):
    """The state file could not be written (a full disk, a folder where its temporary or
    itself goes, a name too long): the events up to ``position`` were delivered, and the
    file still holds what it held before."""

    def __init__(self, state_file: Path, position: int, error: OSError) -> None:
        reason = error.strerror or str(error)
        super().__init__(
            f"the replay state {state_file} could not be saved ({reason}); "
            f"events were delivered up to position {position}"
        )
        self.state_file = state_file
        self.position = position


def state_temporary(state_file: Path) -> Path:
    """Where the state is written first, then renamed onto ``state_file``."""
    return state_file.with_name(state_file.name + ".tmp")


def _save_state(state_file: Path | None, position: int) -> None:
    if state_file is None:
        return
    temporary = state_temporary(state_file)
    try:
        temporary.write_text(f"{position}\n")
        os.replace(temporary, state_file)  # atomic: a crash leaves the old or the new one
    except OSError as error:
        if os.path.isfile(temporary):  # written, not renamed: no stray temporary is left
            with contextlib.suppress(OSError):
                os.remove(temporary)
        raise StateNotSaved(state_file, position, error) from None
