"""Observed JSONL lines (python-contract §7): writing them from the journal, reading them back.

A line is the RFC 8785 canonical JSON of ``{at, context, data, position, stream, type,
version}`` and a newline. The journal stores ``{at, context, data}`` canonically already,
and the other four keys sort after those three, so a line is the stored bytes with the
closing brace replaced by the four members: no re-serialisation, byte-identical to
canonicalising the whole object (tests/test_observed_jsonl.py checks both ways).
"""

from __future__ import annotations

from typing import Any

import orjson
from eventsourcing.persistence import Notification

from domain.documents import DocumentError, canonical_json
from domain.events import RecordedEvent
from domain.json_text import JSONTextError, parse_json
from journal.leaves import entry_bytes

REQUIRED = ("at", "context", "data", "position", "stream", "type", "version")


def observed_line(row: Notification) -> bytes:
    """One line (with its newline) for a stored event: its Merkle entry (journal/leaves.py)."""
    entry = entry_bytes(
        row.id, str(row.originator_id), row.originator_version, row.topic, row.state
    )
    return entry + b"\n"


class ObservedLineError(ValueError):
    """A line that is not an Observed JSONL event; ``line`` is 1-based."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.message = message


#: A line read back is the event as the journal holds it (python-contract §7).
ObservedEvent = RecordedEvent


def parse_line(text: bytes, line: int) -> ObservedEvent:
    """Read one line strictly: one JSON object, no duplicate keys, the seven members typed."""
    return parse_line_canonical(text, line)[0]


def parse_line_canonical(text: bytes, line: int) -> tuple[ObservedEvent, bytes]:
    """The event and its canonical bytes (its Merkle entry), however the line is spelled.

    Fast path: a line that orjson reads and that is already canonical (what we export)
    cannot hide duplicate keys, since the canonical form of what was read is the line
    itself. Anything else goes through the strict parser, which refuses duplicates.
    """
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        value = None
    if isinstance(value, dict):
        canonical = _canonical_or_none(value)
        if canonical == text:
            return _event(value, line), text
    try:
        value = parse_json(text.decode("utf-8"))
    except (UnicodeDecodeError, JSONTextError) as error:
        raise ObservedLineError(line, f"not JSON text: {error}") from None
    event = _event(value, line)
    canonical = _canonical_or_none(value)
    if canonical is None:
        raise ObservedLineError(line, "not a canonical JSON document")
    return event, canonical


def _canonical_or_none(value: dict[str, Any]) -> bytes | None:
    try:
        return canonical_json(value)
    except DocumentError:
        return None


def _event(value: Any, line: int) -> ObservedEvent:
    if not isinstance(value, dict):
        raise ObservedLineError(line, "not a JSON object")
    missing = [key for key in REQUIRED if key not in value]
    if missing:
        raise ObservedLineError(line, f"missing {', '.join(missing)}")
    checks = (
        ("position", int),
        ("version", int),
        ("stream", str),
        ("type", str),
        ("at", str),
        ("context", dict),
        ("data", dict),
    )
    for key, kind in checks:
        if type(value[key]) is not kind:
            raise ObservedLineError(line, f"{key} must be a {kind.__name__}")
    if value["position"] < 1 or value["version"] < 1:
        raise ObservedLineError(line, "position and version start at 1")
    return ObservedEvent(**{key: value[key] for key in REQUIRED})
