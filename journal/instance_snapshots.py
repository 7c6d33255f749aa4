"""Snapshots of folded workflow instances: how one is written, checked and folded onwards.

The journal stays the truth. A snapshot is the instance folded to one version, written by
the engine when a long history suspends, so the next claim reads the snapshot and the few
events after it instead of the whole stream. It is trusted only if every check passes:

- its body hashes to its digest and decodes to exactly the fields ``InstanceState`` has
  now, in this module's ``FORMAT`` (a snapshot of another fold version is ignored);
- it was taken at the version of the stored event it rides on, and that event is still
  the one at the position the snapshot recorded;
- the events after it follow on without a gap (``fold`` checks each version).

Anything else (no snapshot, a corrupt or foreign one, a purged history) falls back to the
full fold, so a snapshot can make a claim faster but never change what it decides. The
body is canonical JSON read back with the journal's own reader, so every value in it is
what folding the stored events would give.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any

import orjson

from domain.documents import canonical_json
from domain.events import RecordedEvent
from domain.json_text import load_canonical
from domain.workflow import InstanceState, QueuedEvent, StepRecord, fold
from journal.snapshot_sql import StoredSnapshot
from journal.store import EventStore

#: Bump when the fold's meaning, InstanceState's fields or the body's layout change: older
#: rows are ignored. 2: step configs are written once each and named by index.
FORMAT = 2
#: A suspension writes a snapshot once this many events follow the last one (or the
#: start): shorter histories fold faster than a snapshot is written.
SNAPSHOT_EVERY = 64

_SCALARS = tuple(name for name in InstanceState.__slots__ if name not in ("steps", "queue"))
_STEP_FIELDS = StepRecord.__slots__
_QUEUE_FIELDS = QueuedEvent.__slots__
#: Microsecond instants are 16 digits: written as hexadecimal text, because a run of 16
#: digits anywhere in the body (a string too) makes ``load_canonical`` walk all of it.
_INSTANTS: tuple[str, ...] = ("created_at", "lifetime_ends_at", "terminal_at")
_INSTANTS += ("lease_expires_at", "termination_requested_at")
_HEX = re.compile("-?[0-9a-f]{1,16}")
_STEP_INSTANT = _STEP_FIELDS.index("due_at")
#: A step's config (its retry policy, a wait's event type) is mostly the same for every
#: step: the body lists each distinct one once and a step names it by index. A thousand
#: steps then decode to a few shared (read-only) dicts, not a thousand, and the plan an
#: executor is sent pickles each once.
_STEP_CONFIG = _STEP_FIELDS.index("config")
_QUEUE_INSTANT = _QUEUE_FIELDS.index("accepted_at")


def _text(value: int | None) -> str | None:
    return None if value is None else format(value, "x")


def _micros(value: object) -> int | None:
    if value is None:
        return None
    if type(value) is not str or _HEX.fullmatch(value) is None:
        raise ValueError("an instant in a snapshot is not hexadecimal text")
    return int(value, 16)


def encode(state: InstanceState) -> tuple[str, bytes]:
    """The digest and body of ``state``'s snapshot."""
    document: dict[str, Any] = {name: getattr(state, name) for name in _SCALARS}
    for name in _INSTANTS:
        document[name] = _text(document[name])
    document["format"] = FORMAT
    steps = document["steps"] = [
        [getattr(r, f) for f in _STEP_FIELDS] for r in state.steps.values()
    ]
    indexes: dict[bytes, int] = {}
    configs = document["configs"] = []
    for values in steps:
        values[_STEP_INSTANT] = _text(values[_STEP_INSTANT])
        config = values[_STEP_CONFIG]
        # Keyed by orjson's text, which is at least as fine as the canonical bytes (it
        # tells 1.0 from 1, they do not): at worst an equal config is listed twice.
        index = indexes.setdefault(orjson.dumps(config, option=orjson.OPT_SORT_KEYS), len(configs))
        if index == len(configs):
            configs.append(config)
        values[_STEP_CONFIG] = index
    queue = document["queue"] = [[getattr(e, f) for f in _QUEUE_FIELDS] for e in state.queue]
    for values in queue:
        values[_QUEUE_INSTANT] = _text(values[_QUEUE_INSTANT])
    body = canonical_json(document)
    return hashlib.sha256(body).hexdigest(), body


def decode(stream: str, snapshot: StoredSnapshot) -> InstanceState | None:
    """The state in ``snapshot`` if it is intact and of this format, else None."""
    if hashlib.sha256(snapshot.body).hexdigest() != snapshot.digest:
        return None
    try:
        document = load_canonical(snapshot.body)
        if (
            type(document) is not dict
            or document.get("format") != FORMAT
            or set(document) != {*_SCALARS, "format", "steps", "queue", "configs"}
            or document["stream"] != stream
            or document["version"] != snapshot.version
        ):
            return None
        state = InstanceState(stream)
        for name in _SCALARS:
            setattr(state, name, document[name])
        for name in _INSTANTS:
            setattr(state, name, _micros(document[name]))
        configs = document["configs"]
        if type(configs) is not list or any(type(config) is not dict for config in configs):
            return None
        state.steps = {}
        for values in document["steps"]:
            if type(values) is not list or len(values) != len(_STEP_FIELDS):
                return None
            values[_STEP_INSTANT] = _micros(values[_STEP_INSTANT])
            index = values[_STEP_CONFIG]
            if type(index) is not int or not 0 <= index < len(configs):
                return None
            values[_STEP_CONFIG] = configs[index]
            record = StepRecord(*values)
            state.steps[record.name] = record
        queue = []
        for values in document["queue"]:
            if type(values) is not list or len(values) != len(_QUEUE_FIELDS):
                return None
            values[_QUEUE_INSTANT] = _micros(values[_QUEUE_INSTANT])
            queue.append(QueuedEvent(*values))
        state.queue = queue
    except (TypeError, ValueError, KeyError, IndexError):
        return None
    return state


def fold_tail(
    store: EventStore,
    stream: str,
    snapshot: StoredSnapshot | None,
    events: Sequence[RecordedEvent],
) -> tuple[InstanceState, list[RecordedEvent], int]:
    """The instance folded from a snapshot and the events from its version on.

    Returns the state, the events it was folded from (the whole stream when the snapshot
    could not be used) and the version of the snapshot used (0: none).
    """
    if snapshot is not None and events and events[0].position == snapshot.position:
        start = decode(stream, snapshot)
        if start is not None and events[0].version == start.version:
            try:
                return fold(stream, events[1:], start), list(events), snapshot.version
            except (TypeError, ValueError, KeyError):
                pass  # the tail does not follow on: the full fold decides
    if snapshot is None and events and events[0].version == 1:
        return fold(stream, events), list(events), 0  # the whole stream was read
    full = store.read_stream(stream)
    return fold(stream, full), full, 0


def write(store: EventStore, state: InstanceState) -> None:
    """Store ``state``'s snapshot (bound to the stored event at its version)."""
    digest, body = encode(state)
    store.write_snapshot(state.stream, state.version, digest, body)
