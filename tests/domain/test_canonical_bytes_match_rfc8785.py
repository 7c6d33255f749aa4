"""Property tests (DW-DOC-1): canonical bytes are exactly `rfc8785.dumps`, on every path.

`canonical_document` tries the native path (orjson writes everything, `domain.native_canonical`)
and falls back to the fragment path, then to the reference; each is checked on its own here,
the native one both through `canonical_document` and directly (it may give up, never differ).
"""

from __future__ import annotations

import json
import math
import random
import struct
from typing import Any

import orjson
import pytest
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blackops.jsonbody import parse_document
from domain import documents as documents_module
from domain.documents import (
    MAX_DEPTH,
    MAX_SAFE_INTEGER,
    DocumentError,
    canonical_document,
    canonical_document_fragments,
    canonical_document_reference,
    canonical_json,
)
from domain.native_canonical import calibration_sample, native_canonical

EXAMPLES = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: Characters that stress escaping and key order: controls, quotes, DEL, line separators,
#: the BMP private-use block (sorts after surrogates in UTF-16) and astral characters.
SPECIAL = [*map(chr, range(0x20)), '"', "\\", "/", "\x7f", "\u2028", "\u2029", "é", "€"]
SPECIAL += ["\ue000", "\uffff", "\ufb33", "\U00010000", "\U0001f600", "\U0010ffff"]

characters = st.one_of(st.sampled_from(SPECIAL), st.characters(exclude_categories=["Cs"]))
texts = st.text(characters, max_size=12)

EDGE_FLOATS = [1e21, 1e-7, 5e-324, -0.0, 0.0, 0.1, 1e20, 1e-6, 1.5e-7, 1.2345678901234568e20]
EDGE_FLOATS += [1e16, 9.999999999999999e20, 2.0**53, -1.7976931348623157e308, 123.0, 1e-5]
# Where ECMAScript and orjson switch notation: 1e-6 and 1e-5, 1e16 and 1e21, and integral.
EDGE_FLOATS += [1e-5, 9.999999999999999e-6, 1.5e-6, 1e17, 1.5e20, 1e22, 2.0**60, 0.5, 16.0]
EDGE_FLOATS += [2.0**53 - 1, 2.0**53 + 2, float(MAX_SAFE_INTEGER), 2.2250738585072014e-308]


def from_bits(bits: int) -> float:
    """The double with these 64 bits (any sign, exponent and mantissa)."""
    return float(struct.unpack("<d", struct.pack("<Q", bits))[0])


finite_bits = st.integers(0, 2**64 - 1).map(from_bits).filter(math.isfinite)
floats = st.one_of(
    st.sampled_from(EDGE_FLOATS),
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(min_value=-1e22, max_value=1e22),
    st.floats(min_value=-1e-3, max_value=1e-3),
    st.integers(-(2**60), 2**60).map(float),  # integral doubles, near 2**53 and beyond
    finite_bits,
)
integers = st.one_of(
    st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER),
    st.tuples(st.integers(MAX_SAFE_INTEGER - 1000, MAX_SAFE_INTEGER), st.sampled_from([1, -1])).map(
        lambda pair: pair[0] * pair[1]
    ),
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
@given(documents)
def test_dw_doc_3_fragment_path_is_byte_identical_to_rfc8785(document: dict[str, Any]) -> None:
    assert canonical_document_fragments(document) == rfc8785.dumps(document)


@EXAMPLES
@given(documents)
def test_dw_doc_3_native_path_gives_up_or_is_byte_identical(document: dict[str, Any]) -> None:
    native = native_canonical(document, documents_module._DOCUMENT)
    assert native is None or native == rfc8785.dumps(document)


def test_dw_doc_3_native_path_writes_most_documents_itself() -> None:
    """Not only identical when it answers: it answers for ordinary documents, floats too."""
    rng = random.Random(53)
    answered = 0
    for _ in range(500):
        document: dict[str, Any] = {
            "f": [rng.uniform(-1e9, 1e9), rng.random() * 1e-9, float(rng.randint(0, 99))],
            "i": rng.randint(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER),
            "s": "".join(chr(rng.choice([0x41, 0xE9, 0x1F600, 0x7F, 0x2028])) for _ in range(5)),
            "n": [None, True, {"k": []}],
        }
        native = native_canonical(document, documents_module._DOCUMENT)
        if native is not None:
            answered += 1
            assert native == rfc8785.dumps(document)
    assert answered == 500


def test_dw_doc_3_every_bit_pattern_sample_of_doubles_is_spelled_like_ecmascript() -> None:
    """200,000 doubles from random bit patterns, the calibration sample and its neighbours,
    in documents of ten: each native answer equals `rfc8785.dumps`, and most answer."""
    rng = random.Random(8785)
    values = [from_bits(rng.getrandbits(64)) for _ in range(200_000)]
    values = [v for v in values if math.isfinite(v)] + calibration_sample()
    values += [math.nextafter(v, math.inf) for v in calibration_sample() if v < 1.7e308]
    answered = 0
    for start in range(0, len(values), 10):
        document: dict[str, Any] = {"x": values[start : start + 10]}
        native = native_canonical(document, documents_module._DOCUMENT)
        expected = rfc8785.dumps(document)
        assert canonical_document(document) == expected
        if native is not None:
            answered += 1
            assert native == expected
    # Random bit patterns are mostly tiny or huge (exponent notation both ways) and answer;
    # a block holding an e+16..e+20 or e-6 value or -0.0 gives up (about one in ten).
    assert answered > len(values) // 10 * 0.8


@EXAMPLES
@given(st.lists(floats, min_size=1, max_size=20))
def test_dw_doc_3_float_lists_on_every_path(values: list[float]) -> None:
    document: dict[str, Any] = {"x": values, "y": {"z": values[::-1]}}
    expected = rfc8785.dumps(document)
    native = native_canonical(document, documents_module._DOCUMENT)
    assert native is None or native == expected
    assert canonical_document(document) == canonical_document_fragments(document) == expected


@EXAMPLES
@given(clashing_keys, values)
def test_dw_doc_3_utf16_key_order(keys: list[str], value: Any) -> None:
    document = {key: [value, {key: 1.5}] for key in keys}
    expected = rfc8785.dumps(document)
    assert canonical_document(document) == expected
    assert canonical_document_fragments(document) == expected
    assert canonical_document_reference(document) == expected
    native = native_canonical(document, documents_module._DOCUMENT)
    assert native is None or native == expected


@EXAMPLES
@given(clashing_keys, st.sampled_from(["\U0001f600", "\ue000", "\uffff", 'a\\"b', "é"]))
def test_dw_doc_3_utf16_key_order_with_clashing_values(keys: list[str], text: str) -> None:
    """Astral and U+E000.. characters in values (not keys) keep the native path, and keys
    holding escaped quotes or backslashes are still recognised as keys."""
    document: dict[str, Any] = {
        "v": [text + key for key in keys],
        "w": {key + '"\\': text for key in keys},
    }
    expected = rfc8785.dumps(document)
    native = native_canonical(document, documents_module._DOCUMENT)
    assert native is None or native == expected
    assert canonical_document(document) == expected


def test_dw_doc_3_string_escapes_for_every_code_point() -> None:
    """Every scalar value in one string (4 MB: no size limit here), and 12,288 of them as
    keys: orjson escapes like ECMAScript, and the native path writes both itself."""
    text = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    unlimited = documents_module._UNLIMITED
    assert native_canonical({"s": text}, unlimited) == rfc8785.dumps({"s": text})
    keys: dict[str, Any] = {"t": {chr(c): c for c in range(0x3000)}}
    assert native_canonical(keys, unlimited) == rfc8785.dumps(keys) == canonical_json(keys)


@EXAMPLES
@given(st.lists(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1), texts)
def test_dw_doc_2_lone_surrogates_are_refused_everywhere(surrogates: list[str], text: str) -> None:
    for bad in ("".join(surrogates) + text, text + surrogates[0]):
        for document in ({"s": bad}, {bad: 1}, {"l": [text, bad]}):
            for encode in (canonical_document, canonical_document_fragments, canonical_json):
                with pytest.raises(DocumentError) as caught:
                    encode(document)
                assert caught.value.code == "invalid_params"
            assert native_canonical(document, documents_module._DOCUMENT) is None


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
    assert canonical_json(document) == expected  # answers and records: any depth
    levels = depth + 2 + _depth(leaf)  # the root, the innermost list, the leaf's own
    if levels <= MAX_DEPTH:
        assert canonical_document(document) == expected
        assert canonical_document_reference(document) == expected
    else:
        for encode in (canonical_document, canonical_document_fragments):
            with pytest.raises(DocumentError) as caught:
                encode(document)
            assert caught.value.code == "invalid_params"
            assert "deeper than 128 levels" in caught.value.message


def _depth(value: Any) -> int:
    if type(value) is dict:
        return 1 + max(map(_depth, value.values()), default=0)
    if type(value) is list:
        return 1 + max(map(_depth, value), default=0)
    return 0


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
def test_dw_doc_5_every_path_reports_the_same_error(document: dict[str, Any]) -> None:
    fast = outcome(canonical_document, document)
    assert fast == outcome(canonical_document_reference, document)
    assert fast == outcome(canonical_document_fragments, document)
    assert fast[0] in ("ok", "invalid_params")
    if fast[0] == "ok":
        assert fast[1] == rfc8785.dumps(document)
    else:
        assert native_canonical(document, documents_module._DOCUMENT) is None


# -- JSON text: what parse_document reads is canonicalised like the document itself ------------


@EXAMPLES
@given(documents, st.sampled_from([0, 2]), st.booleans())
def test_json_text_to_canonical_bytes_matches_rfc8785(
    document: dict[str, Any], indent: int, ascii_only: bool
) -> None:
    """However a client spells the document (spaces, \\u escapes, key order), the text
    path's bytes are `rfc8785.dumps` of what it means."""
    text = json.dumps(document, indent=indent or None, ensure_ascii=ascii_only)
    parsed = parse_document(text.encode())
    assert canonical_document(parsed) == rfc8785.dumps(json.loads(text))
    assert canonical_document(parse_document(orjson.dumps(document))) == rfc8785.dumps(document)


member = st.tuples(st.sampled_from(["a", "b", "é", "\U0001f600", ":", "a:b"]), values)


@EXAMPLES
@given(st.lists(member, min_size=2, max_size=6), st.booleans(), st.booleans())
def test_json_text_with_duplicate_keys_is_refused(
    members: list[tuple[str, Any]], escape_colons: bool, nest: bool
) -> None:
    """A duplicate key anywhere (also spelled with \\u escapes, or beside keys holding ':')
    is refused; without one the text parses to exactly its members."""
    pieces = []
    for key, value in members:
        spelled = json.dumps(key, ensure_ascii=escape_colons)
        if escape_colons:
            spelled = spelled.replace(":", "\\u003a")
        pieces.append(f"{spelled}: {json.dumps(value)}")
    body = "{" + ", ".join(pieces) + "}"
    text = '{"outer": [' + body + "]}" if nest else body
    keys = [key for key, _ in members]
    if len(set(keys)) < len(keys):
        with pytest.raises(DocumentError) as caught:
            parse_document(text.encode())
        assert caught.value.code == "invalid_params"
    else:
        parsed = parse_document(text.encode())
        assert parsed == json.loads(text)


# -- larger documents: a few hundred values beside each generated one ---------------------------

large_documents = st.tuples(
    documents, st.lists(st.one_of(scalars, values), min_size=260, max_size=400)
).map(lambda pair: {**pair[0], "\U0010ffff pad": pair[1]})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(large_documents)
def test_dw_doc_3_larger_documents_are_byte_identical_to_rfc8785(
    document: dict[str, Any],
) -> None:
    expected = rfc8785.dumps(document)
    native = native_canonical(document, documents_module._DOCUMENT)
    assert native is None or native == expected
    assert canonical_document(document) == expected


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(texts, bad_values, max_size=6), st.integers(260, 300))
def test_dw_doc_5_larger_documents_report_the_same_error(
    document: dict[str, Any], padding: int
) -> None:
    document = {**document, "\U0010ffff pad": list(range(padding))}
    fast = outcome(canonical_document, document)
    assert fast == outcome(canonical_document_reference, document)
    if fast[0] != "ok":
        assert native_canonical(document, documents_module._DOCUMENT) is None
