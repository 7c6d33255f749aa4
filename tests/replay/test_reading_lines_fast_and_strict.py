"""OL-11: reading Observed JSONL lines, the orjson fast path answers exactly as the strict path.

`parse_line` (replay) and `parse_line_canonical` (verify) accept a line on the fast path only
when orjson's writing of what it read is the line itself (so no key occurs twice), and for
verify when it is also spelled as RFC 8785 spells it. Hostile lines (duplicate keys, deep
nesting, numbers and strings spelled otherwise) must get what the strict path gives them.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.documents import canonical_json
from domain.json_text import integral_floats
from replay import observed
from replay.observed import ObservedEvent, ObservedLineError, parse_line, parse_line_canonical

EXAMPLES = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

ENVELOPE = {"at": "2026-11-30T09:00:00.000000Z", "position": 7, "stream": "s-1", "type": "t.x"}

keys = st.text(st.sampled_from(["a", "b", "é", "\U0001f600", "\ue000", '"', "\\", "\x00", ":"]))
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53) + 1, 2**53 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([2.0**60, 1e-6, 1e16, 1e21, 16.0, -0.0, 5e-324, 1e-7, 0.1]),
    st.text(max_size=8),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=20,
)


def event(data: dict[str, Any], context: dict[str, Any] | None = None) -> dict[str, Any]:
    return {**ENVELOPE, "version": 1, "context": context or {"tenant": "acme"}, "data": data}


def outcome(read: Any, line: bytes) -> Any:
    """What ``read`` gives, events as their canonical bytes (``==`` on a 2,000-deep event
    would recurse), refusals as their line and message."""
    try:
        result = read(line, 3)
    except ObservedLineError as error:
        return ("refused", error.line, error.message)
    if isinstance(result, tuple):
        return canonical_json(result[0].to_observed()), result[1]
    return canonical_json(result.to_observed())


def strict(line: bytes, number: int) -> Any:
    return observed._parse_strict(line, number)


@EXAMPLES
@given(st.dictionaries(keys, values, max_size=5), st.dictionaries(keys, values, max_size=3))
def test_canonical_lines_read_the_same_on_both_paths(
    data: dict[str, Any], context: dict[str, Any]
) -> None:
    line = rfc8785.dumps(event(data, {"tenant": "acme", **context}))
    expected = strict(line, 3)
    assert expected[1] == line  # the strict path re-canonicalises it to itself
    assert parse_line_canonical(line, 3) == expected
    assert parse_line(line, 3) == expected[0]


def test_canonical_lines_take_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not only equal: what we export is read without the strict parser at all."""
    lines = [
        rfc8785.dumps(event({"n": 1, "s": 'é\U0001f600\u2028\x00"\\', "l": [None, True, {}]})),
        rfc8785.dumps(event({"f": [0.5, 1e-7, 123.25, 1e21, -2.5e-300, 16.0, 2**53 - 1]})),
        rfc8785.dumps(event({"k\U0001f600": "\ue000", "v": "\U0001f600\ue000"})),  # values
    ]
    monkeypatch.setattr(observed, "_parse_strict", pytest.fail)
    for line in lines:
        assert parse_line_canonical(line, 1)[1] == line
        parse_line(line, 1)


def hostile() -> list[bytes]:
    good = rfc8785.dumps(event({"n": 1, "deep": {"x": [1, {"y": 2}]}}))
    deep = 2000
    nested = b'{"at":"x","context":{},"data":{"d":' + b"[" * deep + b"]" * deep + b"}"
    nested += b',"position":1,"stream":"s","type":"t","version":1}'
    return [
        good[:-1] + b',"at":"again"}',  # duplicate key at the root, last one orjson keeps
        good.replace(b'"data":{', b'"data":{"n":1,'),  # the same member twice, same value
        good.replace(b'{"y":2}', b'{"y":2,"y":3}'),  # a duplicate deep inside
        good.replace(b'"at":', b'"\\u0061t":', 1)[:-1] + b',"at":"b"}',  # spelled otherwise
        good.replace(b'"n":1', b'"n":1.0'),  # integral float
        good.replace(b'"n":1', b'"n":-0'),
        good.replace(b'"n":1', b'"n":-0.0'),
        good.replace(b'"n":1', b'"n":1e-6'),  # RFC 8785: 0.000001
        good.replace(b'"n":1', b'"n":0.000001'),
        good.replace(b'"n":1', b'"n":1e+16'),  # RFC 8785: 10000000000000000
        good.replace(b'"n":1', b'"n":1e21'),  # unsigned exponent
        good.replace(b'"n":1', b'"n":1E+21'),
        good.replace(b'"n":1', b'"n":1152921504606847000'),  # 2.0**60 as RFC 8785 spells it
        good.replace(b'"n":1', b'"n":1152921504606846976'),  # its exact integer: not canonical
        good.replace(b'"n":1', b'"n":9007199254740993'),  # unsafe, not a double: refused
        good.replace(b'"n":1', b'"n":12345678901234567890123'),
        good.replace(b'"n":1', b'"n":"\\u0041\\/\\u00E9"'),  # escapes RFC 8785 does not use
        good.replace(b'"n":1', b'"n":"\\ud800"'),  # a lone surrogate
        good.replace(b'"n":1', b'"n":"\xed\xa0\x80"'),  # an encoded surrogate: not UTF-8
        good.replace(b'"n":1', b'"\xf0\x9f\x98\x80":1,"\xee\x80\x80":2'),  # code-point order
        good.replace(b'"n":1', b'"\xee\x80\x80":2,"\xf0\x9f\x98\x80":1'),  # UTF-16 order
        good.replace(b'"deep"', b'"a\\":b"').replace(b'"n":1', b'"z":1'),  # key with a colon
        good.replace(b"{", b"{ ", 1),  # whitespace
        nested,  # deeper than orjson writes (254) and than the stdlib reads (~1000)
        nested.replace(b"[" * deep, b"[" * 300).replace(b"]" * deep, b"]" * 300),
        b'{"at":"x","context":{},"data":{},"position":true,"stream":"s","type":"t","version":1}',
        b"[1]",
        b"",
    ]


@pytest.mark.parametrize("line", hostile(), ids=range(len(hostile())))
def test_hostile_lines_get_what_the_strict_path_gives(line: bytes) -> None:
    expected = outcome(strict, line)
    assert outcome(parse_line_canonical, line) == expected
    fast_event = outcome(parse_line, line)
    assert fast_event == (expected if expected[0] == "refused" else expected[0])
    if expected[0] != "refused" and b"[" * 300 not in line:
        # The canonical bytes mean what the line means, and are RFC 8785's.
        meant = integral_floats(json.loads(line))
        assert expected[1] == canonical_json(meant) == rfc8785.dumps(meant)


def test_duplicate_keys_are_refused_wherever_they_are() -> None:
    for index in (0, 1, 2, 3):
        line = hostile()[index]
        for read in (parse_line, parse_line_canonical):
            with pytest.raises(ObservedLineError) as refused:
                read(line, 9)
            assert refused.value.line == 9 and "duplicate" in refused.value.message


def test_a_respelled_line_is_read_as_what_it_means() -> None:
    """A float spelled as orjson spells it (``16.0``, ``1e+16``) is not canonical: verify gets
    RFC 8785's bytes, never the line itself."""
    respelled = [(b"16.0", b"16"), (b"1e+16", b"10000000000000000"), (b"1e-6", b"0.000001")]
    for spelled, canonical in respelled:
        line = rfc8785.dumps(event({"n": 0})).replace(b'"n":0', b'"n":' + spelled)
        _, entry = parse_line_canonical(line, 1)
        assert entry == line.replace(b'"n":' + spelled, b'"n":' + canonical) != line


def test_an_event_read_on_the_fast_path_is_the_frozen_event_its_fields_make() -> None:
    """The fast path fills a mutable twin of `ObservedEvent`'s slots and then gives it the
    frozen class: what comes out must be indistinguishable from the class's own __init__."""
    document = event({"n": 1, "s": "x"})
    read = parse_line(canonical_json(document), 1)
    built = ObservedEvent(
        document["position"],
        document["stream"],
        document["version"],
        document["type"],
        document["at"],
        document["context"],
        document["data"],
    )
    assert type(read) is ObservedEvent
    assert read == built and repr(read) == repr(built)
    assert dataclasses.asdict(read) == dataclasses.asdict(built)
    with pytest.raises(dataclasses.FrozenInstanceError):
        read.position = 8  # type: ignore[misc]
    assert observed._Building is not None  # the twin path is the one taken here
