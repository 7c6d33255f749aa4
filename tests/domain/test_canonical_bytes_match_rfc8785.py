"""Property tests (DW-DOC-1): canonical bytes are exactly `rfc8785.dumps`, on both paths."""

from __future__ import annotations

import json
import math
from typing import Any

import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.documents import (
    MAX_SAFE_INTEGER,
    DocumentError,
    canonical_document,
    canonical_document_reference,
)

EXAMPLES = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: Characters that stress escaping and key order: controls, quotes, DEL, line separators,
#: the BMP private-use block (sorts after surrogates in UTF-16) and astral characters.
SPECIAL = [*map(chr, range(0x20)), '"', "\\", "/", "\x7f", "\u2028", "\u2029", "é", "€"]
SPECIAL += ["\ue000", "\uffff", "\ufb33", "\U00010000", "\U0001f600", "\U0010ffff"]

characters = st.one_of(st.sampled_from(SPECIAL), st.characters(exclude_categories=["Cs"]))
texts = st.text(characters, max_size=12)

EDGE_FLOATS = [1e21, 1e-7, 5e-324, -0.0, 0.0, 0.1, 1e20, 1e-6, 1.5e-7, 1.2345678901234568e20]
EDGE_FLOATS += [1e16, 9.999999999999999e20, 2.0**53, -1.7976931348623157e308, 123.0, 1e-5]
floats = st.one_of(
    st.sampled_from(EDGE_FLOATS),
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(min_value=-1e22, max_value=1e22),
    st.floats(min_value=-1e-3, max_value=1e-3),
)
integers = st.one_of(
    st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER),
    st.sampled_from([0, -1, MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER, 2**31, -(2**63) // 2**11]),
)
scalars = st.one_of(st.none(), st.booleans(), integers, floats, texts)


def containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.lists(children, max_size=6), st.dictionaries(texts, children, max_size=6))


values = st.recursive(scalars, containers, max_leaves=30)
documents = st.dictionaries(texts, values, max_size=6)

# Keys whose code-point order and UTF-16 order disagree, mixed with ordinary ones.
clashing_keys = st.lists(
    st.sampled_from(["\ue000", "\uffff", "\U0001f600", "\U00010000", "a", "é", "\ud7ff"]).flatmap(
        lambda head: st.text(characters, max_size=3).map(lambda tail: head + tail)
    ),
    min_size=2,
    max_size=10,
)


def as_doubles(value: Any) -> Any:
    """JSON has one number type: compare numbers as IEEE doubles after a round trip."""
    if type(value) is dict:
        return {key: as_doubles(item) for key, item in value.items()}
    if type(value) is list:
        return [as_doubles(item) for item in value]
    if type(value) in (int, float):
        return float(value)
    return value


@EXAMPLES
@given(documents)
def test_dw_doc_3_fast_path_is_byte_identical_to_rfc8785(document: dict[str, Any]) -> None:
    assert canonical_document(document) == rfc8785.dumps(document)


@EXAMPLES
@given(documents)
def test_dw_doc_3_reference_path_is_byte_identical_to_rfc8785(document: dict[str, Any]) -> None:
    assert canonical_document_reference(document) == rfc8785.dumps(document)


@EXAMPLES
@given(clashing_keys, values)
def test_dw_doc_3_utf16_key_order(keys: list[str], value: Any) -> None:
    document = {key: [value, {key: 1.5}] for key in keys}
    expected = rfc8785.dumps(document)
    assert canonical_document(document) == expected
    assert canonical_document_reference(document) == expected


@EXAMPLES
@given(floats)
def test_dw_doc_3_every_double_is_formatted_like_ecmascript(value: float) -> None:
    expected = rfc8785.dumps({"n": value})
    assert canonical_document({"n": value}) == expected
    assert canonical_document_reference({"n": [value]}) == rfc8785.dumps({"n": [value]})
    text = expected[5:-1].decode()
    assert float(text) == value  # shortest form still round-trips
    assert text == "0" or not text.endswith(".0")


@EXAMPLES
@given(documents)
def test_dw_doc_3_round_trips_through_json(document: dict[str, Any]) -> None:
    out = canonical_document(document)
    loaded = json.loads(out)
    assert as_doubles(loaded) == as_doubles(document)
    # Canonical output is a fixed point (integers re-read as doubles stay in range).
    assert canonical_document(json.loads(out, parse_int=float)) == out


@EXAMPLES
@given(st.integers(1, 260), values)
def test_dw_doc_3_depth_hand_over_is_seamless(depth: int, leaf: Any) -> None:
    nested: Any = [leaf]
    for index in range(depth):
        nested = {"k": nested, "i": index} if index % 3 == 0 else [nested]
    document = {"d": nested}
    expected = rfc8785.dumps(document)
    assert canonical_document(document) == expected
    assert canonical_document_reference(document) == expected


class Sub(str):
    __slots__ = ()


#: One invalid value per rule; injected anywhere, both paths must report the same error.
BAD = [
    math.nan,
    math.inf,
    -math.inf,
    2**53,
    -(2**53),
    (1,),
    {1},
    b"x",
    Sub("x"),
    "\ud800",
    "x\udfff",
    {1: 2},
    {Sub("k"): 1},
    {"\udc00": 1, "\U0001f600": 2, "\ue000": 3},
]
bad_values = st.recursive(st.one_of(scalars, st.sampled_from(BAD)), containers, max_leaves=30)


def outcome(encode: Any, document: dict[str, Any]) -> tuple[str, bytes | str]:
    try:
        return "ok", encode(document)
    except DocumentError as error:
        return error.code, error.message


@EXAMPLES
@given(st.dictionaries(texts, bad_values, max_size=6))
def test_dw_doc_5_both_paths_report_the_same_error(document: dict[str, Any]) -> None:
    fast = outcome(canonical_document, document)
    assert fast == outcome(canonical_document_reference, document)
    assert fast[0] in ("ok", "invalid_params")
    if fast[0] == "ok":
        assert fast[1] == rfc8785.dumps(document)
