"""The retention index: which terminal operations may become purgeable, and from when.

A projection of the journal kept in the **same transaction** as every append (like the
due-work index, ``journal/work_index.py``) and rebuildable from position 0. One row per
operation (``operation.*`` / ``attempt.*`` streams and their ``outcome:`` streams):

- ``operation.received``       -> the row, with its operation type
- a terminal event             -> ``terminal_at`` (and ``completed_at`` on completion)
- ``operation.held`` / ``.released`` -> ``held`` on / off
- ``outcome.recorded`` / ``outcome.purged`` -> ``outcome`` on / off
- ``operation.purged``         -> ``purged``; ``pending`` while the content it accounts for
  may still be there (a tombstone is ``pending`` until ``purge`` settles it)

Retention periods are configuration, not journal facts (they can change between runs),
so rows are keyed by their terminal and completion instants per operation type: ``purge``
asks each type for rows terminal before ``now - retention`` (an index range scan), and
rules are applied to the few rows found exactly as before (decisions F-row "retention
index").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Any

from domain.json_text import load_canonical
from domain.lifecycle import EventType

OUTCOME_RECORDED = "outcome.recorded"  # journal/outcomes.py (which imports the store)

NAME = "retention"
OUTCOME_PURGED = "outcome.purged"
_OUTCOME_PREFIX = "outcome:"
_TERMINAL = frozenset(
    {
        EventType.COMPLETED.value,
        EventType.REJECTED.value,
        EventType.FAILED.value,
        EventType.DEAD_LETTERED.value,
    }
)
#: Columns a change may set (None: unchanged), in the SQL tables' order.
COLUMNS = ("operation_type", "terminal_at", "completed_at", "held", "outcome", "purged", "pending")


@dataclass(slots=True)
class RetentionRow:
    operation_id: str
    operation_type: str = ""
    terminal_at: str | None = None
    completed_at: str | None = None
    held: bool = False
    outcome: bool = False
    purged: bool = False
    pending: bool = False

    def values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, f.name) for f in fields(self))


def changes(events: Iterable[tuple[str, str, bytes]]) -> dict[str, dict[str, Any]]:
    """Net column changes per operation id for ``(stream, topic, state)`` in append order."""
    found: dict[str, dict[str, Any]] = {}
    for stream, topic, state in events:
        if stream.startswith(_OUTCOME_PREFIX):
            change = found.setdefault(stream.removeprefix(_OUTCOME_PREFIX), {})
            change["outcome"] = topic == OUTCOME_RECORDED
            if topic == OUTCOME_PURGED:
                change["pending"] = True
            continue
        if not topic.startswith(("operation.", "attempt.")):
            continue
        if topic == EventType.RECEIVED.value:
            data = load_canonical(state)["data"]
            found.setdefault(stream, {})["operation_type"] = data.get("operation_type", "")
        elif topic in _TERMINAL:
            at = load_canonical(state)["at"]
            change = found.setdefault(stream, {})
            change["terminal_at"] = at
            if topic == EventType.COMPLETED.value:
                change["completed_at"] = at
        elif topic == EventType.HELD.value:
            found.setdefault(stream, {})["held"] = True
        elif topic == EventType.RELEASED.value:
            found.setdefault(stream, {})["held"] = False
        elif topic == EventType.PURGED.value:
            found.setdefault(stream, {}).update(purged=True, pending=True)
    return found


class Rebuild:
    """The whole journal folded again: unlike the live path it sees every stream's
    history, so a tombstone is ``pending`` only when content it accounts for remains, and
    an operation purged completely has no row (as after ``purge`` settled it)."""

    def __init__(self) -> None:
        self.rows: dict[str, RetentionRow] = {}

    def add(self, events: Iterable[tuple[str, str, bytes]]) -> None:
        for stream, topic, state in events:
            if stream.startswith(_OUTCOME_PREFIX):
                operation_id = stream.removeprefix(_OUTCOME_PREFIX)
                row = self.rows.setdefault(operation_id, RetentionRow(operation_id))
                if topic == OUTCOME_PURGED:
                    row.pending = row.pending or row.outcome  # the record is still there
                    row.outcome = False
                else:
                    row.outcome = topic == OUTCOME_RECORDED
                    row.pending = row.pending or (row.outcome and row.purged)
                continue
            if topic == EventType.PURGED.value:
                row = self.rows.get(stream) or RetentionRow(stream)
                # Rows before the tombstone were seen: its deletion did not happen yet.
                row.pending = row.pending or row.operation_type != "" or row.outcome
                row.purged = True
                self.rows[stream] = row
                continue
            for operation_id, change in changes([(stream, topic, state)]).items():
                row = self.rows.setdefault(operation_id, RetentionRow(operation_id))
                for name, value in change.items():
                    setattr(row, name, value)

    def result(self) -> list[RetentionRow]:
        return [r for _, r in sorted(self.rows.items()) if not (r.purged and not r.pending)]
