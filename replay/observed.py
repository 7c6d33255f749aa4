"""Observed JSONL lines (python-contract §7): writing them from the journal, reading them back.

A line is the RFC 8785 canonical JSON of ``{at, context, data, position, stream, type,
version}`` and a newline. The journal stores ``{at, context, data}`` canonically already,
and the other four keys sort after those three, so a line is the stored bytes with the
closing brace replaced by the four members: no re-serialisation, byte-identical to
canonicalising the whole object (tests/test_observed_jsonl.py checks both ways).
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from dataclasses import fields
from typing import Any, BinaryIO, NoReturn

import orjson

from domain.documents import ENVELOPE_MAX_BYTES, DocumentError, canonical_json
from domain.events import RecordedEvent
from domain.json_text import JSONTextError, integral_floats, parse_json
from domain.native_canonical import INTEGRAL, exponent_in_full, utf16_order_may_differ
from journal.backend_common import StoredRow
from journal.leaves import entry_bytes

REQUIRED = ("at", "context", "data", "position", "stream", "type", "version")
#: No line of an event is longer: its envelope (``{at, context, data}``, at most
#: ENVELOPE_MAX_BYTES) plus the four members after it (names of at most 200 characters).
MAX_LINE_BYTES = ENVELOPE_MAX_BYTES + 1024
_SORTED = orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER
_AS_READ = orjson.OPT_STRICT_INTEGER


def observed_line(row: StoredRow) -> bytes:
    """One line (with its newline) for a stored event: its Merkle entry (journal/leaves.py)."""
    entry = entry_bytes(
        row.id, str(row.originator_id), row.originator_version, row.topic, row.state
    )
    return entry + b"\n"


def read_lines(source: BinaryIO) -> Iterator[bytes]:
    """The lines of an Observed JSONL file (with their newlines), each at most
    `MAX_LINE_BYTES`: a longer one is `ObservedLineError` when it is met, where a file
    without newlines (``/dev/zero``) was read whole into memory (found by a defect hunt,
    stop 40)."""
    for number, line in enumerate(iter(lambda: source.readline(MAX_LINE_BYTES + 1), b""), 1):
        if len(line) > MAX_LINE_BYTES:
            raise ObservedLineError(number, f"longer than {MAX_LINE_BYTES} bytes: no event is")
        yield line


class ObservedLineError(ValueError):
    """A line that is not an Observed JSONL event; ``line`` is 1-based."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.message = message


#: A line read back is the event as the journal holds it (python-contract §7).
ObservedEvent = RecordedEvent


def parse_line(text: bytes, line: int) -> ObservedEvent:
    """Read one line strictly: one JSON object, no duplicate keys, the seven members typed.

    Fast path: orjson reads the line, and writing what it read, in the order it read it,
    gives the line back byte for byte. Then the line holds no duplicate keys: it *is*
    orjson's writing of a dict, and a dict has each key once (distinct strings are written
    distinctly). Every value is also one ``canonical_json`` accepts (exact JSON types, finite
    floats, integers within ±(2**53 - 1), no lone surrogates: orjson reads or writes nothing
    else). Key order is not what this proves (the strict path accepts any order too), so the
    writing is not sorted. Anything else, hostile lines included, goes through
    `parse_line_canonical`'s strict path.
    """
    try:
        value = orjson.loads(text)
        if orjson.dumps(value, option=_AS_READ) == text:
            return _event(value, line)
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        pass
    return _parse_strict(text, line)[0]


def parse_line_canonical(text: bytes, line: int) -> tuple[ObservedEvent, bytes]:
    """The event and its canonical bytes (its Merkle entry), however the line is spelled.

    Fast path: as in `parse_line` (so no duplicate keys), and the line is spelled as RFC 8785
    spells what was read, so the line is its own canonical form: orjson's strings, integers
    and structure are RFC 8785's; its key order is too unless a key holds a character above
    U+FFFF and another one of U+E000..U+FFFF (then we do not vouch); its float digits are
    the shortest nearest ones (unique, see `domain.native_canonical`) and only its notation
    can differ, which `_foreign_float` finds. Anything else goes through the strict parser,
    which refuses duplicates, and is re-canonicalised from what it means.
    """
    value = _read_if_canonical(text)
    if value is not _STRICT:
        return _event(value, line), text
    return _parse_strict(text, line)


def parse_line_entry(text: bytes, line: int) -> tuple[int, bytes]:
    """`parse_line_canonical`'s position and canonical bytes, and the same refusals, without
    building the event."""
    members, canonical = parse_line_fields(text, line)
    return members[0], canonical


def parse_line_fields(text: bytes, line: int) -> tuple[Members, bytes]:
    """`parse_line_canonical`'s event as its seven members (`ObservedEvent`'s order) and its
    canonical bytes, and the same refusals, without building the event (what verifying an
    export needs)."""
    value = _read_if_canonical(text)
    if value is not _STRICT:
        members = _members(value)
        if members is None:
            _refuse(value, line)
        return members, text
    event, canonical = _parse_strict(text, line)
    fields = (event.position, event.stream, event.version, event.type, event.at)
    return (*fields, event.context, event.data), canonical


#: `_read_if_canonical`'s answer when the strict path must decide (``None`` is a value).
_STRICT = object()


def _read_if_canonical(text: bytes) -> Any:
    """What orjson reads from ``text`` when the line is its own canonical form (the fast
    path of `parse_line_canonical`), else `_STRICT`: the strict path decides."""
    try:
        value = orjson.loads(text)
        written = orjson.dumps(value, option=_SORTED)
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        return _STRICT
    if written == text and not _foreign_float(text) and not utf16_order_may_differ(text):
        return value
    return _STRICT


def canonical_faults(states: list[bytes]) -> dict[int, str]:
    """Why each of ``states`` (stored event envelopes) is not RFC 8785's spelling of what it
    says, by index; ``{}`` for the usual page. A state with a duplicate key reads as one
    value to a parser keeping the first and another to one keeping the last: `verify`
    passed such a row while the offline check of its export refused it (found by a defect
    hunt against the operator, stop 37). One orjson round trip a state and two C passes a
    page; only a page that does not pass is judged state by state, strictly."""
    loads, dumps = orjson.loads, orjson.dumps
    try:
        same = all(dumps(loads(state), option=_SORTED) == state for state in states)
    except (orjson.JSONDecodeError, orjson.JSONEncodeError, TypeError):
        same = False
    if same:
        joined = b"".join(states)
        if not _foreign_float(joined) and not utf16_order_may_differ(joined):
            return {}
    faults = {}
    for index, state in enumerate(states):
        fault = _canonical_fault(state)
        if fault is not None:
            faults[index] = fault
    return faults


def _canonical_fault(text: object) -> str | None:
    if type(text) is not bytes:
        return "not JSON text"  # a column of another type
    if _read_if_canonical(text) is not _STRICT:
        return None
    try:
        value = _read_strictly(text)
    except (UnicodeDecodeError, JSONTextError) as error:
        return f"not canonical JSON: {error}"
    if _canonical_or_none(value) != text:
        return "not spelled as RFC 8785 writes it"
    return None


def _read_strictly(text: bytes) -> Any:
    """``text`` read by the strict reader (duplicate keys, lone surrogates refused); a float
    like 2.0**60 is written without a fraction, so it is read back as that float."""
    return integral_floats(parse_json(text.decode("utf-8")))


def _parse_strict(text: bytes, line: int) -> tuple[ObservedEvent, bytes]:
    try:
        value = _read_strictly(text)
    except (UnicodeDecodeError, JSONTextError) as error:
        raise ObservedLineError(line, f"not JSON text: {error}") from None
    event = _event(value, line)
    canonical = _canonical_or_none(value)
    if canonical is None:
        raise ObservedLineError(line, "not a canonical JSON document")
    return event, canonical


def _foreign_float(text: bytes) -> bool:
    """Might ``text`` hold a number spelled as orjson spells it but RFC 8785 does not?

    Those are integral floats (``2.0``, ``-0.0``: RFC 8785 writes ``2``, ``0``) and the
    exponents of `exponent_in_full`. Text inside strings may match too; that only costs the
    strict path. Each is a search for a literal: a search per pattern over every line would
    cost more than reading it.
    """
    return INTEGRAL.search(text) is not None or exponent_in_full(text) is not None


def _canonical_or_none(value: dict[str, Any]) -> bytes | None:
    try:
        return canonical_json(value)
    except DocumentError:
        return None


def _event(value: Any, line: int) -> ObservedEvent:
    members = _members(value)
    if members is None:
        _refuse(value, line)
    if _Building is None:
        return ObservedEvent(*members)
    # Filled as a mutable twin of the same slot layout (attribute stores specialised by
    # the interpreter), then given the frozen class: a third of the frozen dataclass's
    # __init__ (F144).
    event = _Building()
    (
        event.position,
        event.stream,
        event.version,
        event.type,
        event.at,
        event.context,
        event.data,
    ) = members
    event.__class__ = ObservedEvent
    return event  # type: ignore[no-any-return]


_MEMBERS = operator.itemgetter("position", "stream", "version", "type", "at", "context", "data")


#: An event's seven members, in `ObservedEvent`'s order.
Members = tuple[int, str, int, str, str, dict[str, Any], dict[str, Any]]


def _members(value: Any) -> Members | None:
    """An event's seven members, typed, in `ObservedEvent`'s order; ``None`` if any is not,
    or if the object holds any other (the schema's ``additionalProperties: false``: such a
    line was delivered as an event; found by a defect hunt, stop 36)."""
    if type(value) is not dict or len(value) != len(REQUIRED):
        return None
    try:
        members = _MEMBERS(value)  # one C call for the seven lookups
    except KeyError:
        return None
    position, stream, version, kind, at, context, data = members
    if (
        type(position) is int
        and type(version) is int
        and type(stream) is str
        and type(kind) is str
        and type(at) is str
        and type(context) is dict
        and type(data) is dict
        and position >= 1
        and version >= 1
    ):
        return members  # type: ignore[no-any-return]
    return None


def _twin() -> type | None:
    """A mutable class with `ObservedEvent`'s slot layout, whose instances may be given
    `ObservedEvent` as their class once filled; ``None`` if it has other state (then
    events are built by its ``__init__``)."""
    names = tuple(field.name for field in fields(ObservedEvent))
    if getattr(ObservedEvent, "__slots__", None) != names or hasattr(
        ObservedEvent, "__post_init__"
    ):
        return None
    twin = type("_Building", (), {"__slots__": names})
    try:
        probe = twin()
        probe.__class__ = ObservedEvent
    except TypeError:  # layouts differ: not interchangeable
        return None
    return twin


_Building = _twin()


def _refuse(value: Any, line: int) -> NoReturn:
    """Name the first thing wrong with a line that is not an Observed event."""
    if not isinstance(value, dict):
        raise ObservedLineError(line, "not a JSON object")
    missing = [key for key in REQUIRED if key not in value]
    if missing:
        raise ObservedLineError(line, f"missing {', '.join(missing)}")
    extra = sorted(key for key in value if key not in REQUIRED)
    if extra:  # named by its first name only, cut: a key is the line's, not ours
        raise ObservedLineError(line, f"holds a member no event has ({extra[0][:64]!r})")
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
    raise ObservedLineError(line, "position and version start at 1")
