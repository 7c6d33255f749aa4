"""JSON text to canonical bytes in one pass (`parse_canonical_document`): the same value, bytes
and refusals (code, message and path) as `canonical_document(parse_document(text))`, for
ordinary and for hostile text; and the cases where the one pass is, or must not be, taken."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blackops import jsonbody
from blackops.jsonbody import parse_canonical_document, parse_document
from domain.documents import (
    MAX_BYTES,
    MAX_DEPTH,
    MAX_KEYS,
    DocumentError,
    canonical_document,
    canonical_loaded_document,
)

EXAMPLES = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

SPECIAL = ['"', "\\", ":", "[", "]", "{", "}", ".", "0", ",", "é", "\ue000", "\uffff"]
characters = st.one_of(
    st.sampled_from([*SPECIAL, "\U0001f600"]), st.characters(exclude_categories=["Cs"])
)
texts = st.text(characters, max_size=10) | st.sampled_from([".0,", "1.0]", "[[[", "\\u003a"])
numbers = st.one_of(
    st.integers(-(2**64), 2**64),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([-0.0, 1.0, 16.0, 1e21, 1e-7, 2.0**63, -(2.0**63), 9.3e18, 1e300]),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, texts)
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=5), st.dictionaries(texts, children, max_size=5)
    ),
    max_leaves=25,
)
documents = st.dictionaries(texts, values, max_size=6)


def composed(text: bytes | str) -> tuple[Any, ...]:
    """What the two calls answer: the value and its bytes, or the refusal."""
    try:
        value = parse_document(text)
        return "ok", value, canonical_document(value)
    except DocumentError as error:
        return error.code, str(error), error.path


def in_one_pass(text: bytes | str) -> tuple[Any, ...]:
    try:
        return "ok", *parse_canonical_document(text)
    except DocumentError as error:
        return error.code, str(error), error.path


def assert_same(text: bytes | str) -> None:
    expected = composed(text)
    assert in_one_pass(text) == expected
    if expected[0] == "ok":  # `==` says 1 == 1.0: the types are compared too
        assert orjson.dumps(expected[1]) == orjson.dumps(in_one_pass(text)[1])


@EXAMPLES
@given(documents, st.sampled_from([None, 1]), st.booleans())
def test_every_spelling_of_a_document_gives_the_same_answer(
    document: dict[str, Any], indent: int | None, ascii_only: bool
) -> None:
    text = json.dumps(document, indent=indent, ensure_ascii=ascii_only)
    assert_same(text)
    assert_same(text.encode())
    assert_same(json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode())


member_keys = st.sampled_from(["a", "\\u0061", "b", ":", "\\u003a", "\\u003A", "a:b", "\\\\u003a"])


@EXAMPLES
@given(st.lists(st.tuples(member_keys, values), min_size=1, max_size=6), st.booleans())
def test_duplicate_keys_hidden_by_escapes_are_refused_alike(
    members: list[tuple[str, Any]], nest: bool
) -> None:
    """Keys spelled raw, so that ``\\u0061`` and ``a`` are one key, ``\\u003a`` is a colon and
    ``\\\\u003a`` is not: no dropped member goes unnoticed."""
    body = "{" + ",".join(f'"{key}":{json.dumps(value)}' for key, value in members) + "}"
    text = '{"outer":[' + body + "]}" if nest else body
    assert_same(text.encode())
    distinct = {json.loads(f'"{key}"') for key, _ in members}
    if len(distinct) < len(members):
        assert in_one_pass(text.encode())[0] == "invalid_params"


@EXAMPLES
@given(st.integers(1, 10**40), st.integers(-340, 320), st.sampled_from(["", "-"]), st.booleans())
def test_long_float_literals_read_alike(mantissa: int, exponent: int, sign: str, dot: bool) -> None:
    """A run of 19 digits sends `parse_document` to the strict parser (``float()``); the one
    pass reads such floats with orjson, which must round them the same (halfway cases too)."""
    digits = str(mantissa)
    literal = f"{sign}{digits[0]}.{digits[1:] or '0'}e{exponent}" if dot else f"{sign}{digits}.5"
    assert_same(f'{{"k":{literal},"l":[{literal}]}}'.encode())


@pytest.mark.parametrize(
    "text",
    [
        '{"a":1,"\\u0061":2}',
        '{"x":{"a":{},"a":{"b:c":1}}}',  # the dropped one holds no colon of its own
        '{"a\\u003a":1,"a:":2}',
        '{"a\\\\u003a":1,"a\\\\u003a":2}',
        '{"k":-9223372036854775809}',  # orjson reads it as a float
        '{"k":-9223372036854775808}',
        '{"k":18446744073709551616}',
        '{"k":[1.5,1000000000000000000000]}',  # read as 1e21, which is spelled like one
        '{"k":9007199254740992}',
        '{"k":9007199254740991}',
        '{"k":1e400}',
        '{"k":NaN}',
        '{"k":-0.0,"l":2.0,"m":"2.0,"}',
        '{"k":"\\ud800"}',
        '{"k":"\\udc00\\ud800"}',
        '{"\\ue000":1,"\\ud83d\\ude00":2}',
        "[]",
        "",
        "  ",
        '{"k":1} x',
        b'{"k":"\xff"}',
    ],
)
def test_hostile_text_is_refused_alike(text: str | bytes) -> None:
    assert_same(text if isinstance(text, bytes) else text.encode())


@pytest.mark.parametrize("depth", [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, 300, 2000])
@pytest.mark.parametrize("leaf", ["1", "[]", "{}", '"[[["'])
def test_the_depth_limit_holds_alike(depth: int, leaf: str) -> None:
    text = '{"a":' * depth + leaf + "}" * depth
    assert_same(text.encode())
    mixed = '{"a":[' * (depth // 2) + leaf + "]}" * (depth // 2)
    assert_same(mixed.encode())


@pytest.mark.parametrize("keys", [MAX_KEYS - 1, MAX_KEYS, MAX_KEYS + 1])
@pytest.mark.parametrize("nest", [0, 1, 3])
def test_the_key_limit_holds_alike(keys: int, nest: int) -> None:
    wide = {f"k{index}": index for index in range(keys)}
    document: dict[str, Any] = {"w": wide}
    for _ in range(nest):
        document = {"n": [document, {"x": 1}]}
    assert_same(orjson.dumps(document))
    assert_same(orjson.dumps(wide))


def test_the_size_limit_holds_alike() -> None:
    for length in (MAX_BYTES - 8, MAX_BYTES - 7, MAX_BYTES - 6):  # '{"k":""}' is 8 bytes
        assert_same(orjson.dumps({"k": "x" * (length - 0)}))
    # Integral floats lose ".0": a text just over the limit whose canonical form fits.
    floats = [1.0] * ((MAX_BYTES - 8) // 2)
    assert_same(orjson.dumps({"k": floats}))


@pytest.mark.parametrize(
    "literal", ["-9223372036854775809", "1000000000000000000000", "-1" + "0" * 30]
)
def test_an_integer_literal_orjson_reads_as_a_float_is_refused(literal: str) -> None:
    """It is an integer literal beyond the safe range (Q8), not a float: -2**63 - 1 has only
    19 digits (parse_document used to look for 20 and accepted it as -9223372036854776000)."""
    for read in (lambda text: canonical_document(parse_document(text)), parse_canonical_document):
        with pytest.raises(DocumentError) as refused:
            read(f'{{"k": {literal}}}')
        assert refused.value.code == "invalid_params"


@pytest.mark.parametrize(
    "text",
    ['{"a":1,"\\u0061":2}', '{"x":{"a":{},"a":{"b:c":1}}}', '{"a\\u003a":1,"a:":2}'],
)
def test_duplicate_keys_are_refused(text: str) -> None:
    for read in (parse_document, parse_canonical_document):
        with pytest.raises(DocumentError, match="duplicate object key"):
            read(text.encode())


def forbid_the_two_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the slow path (parse, then canonicalise the tree) is taken."""

    def not_called(*args: object, **kwargs: object) -> None:
        raise AssertionError("the slow path was taken")

    monkeypatch.setattr(jsonbody, "parse_document", not_called)
    monkeypatch.setattr(jsonbody, "canonical_document", not_called)


def test_one_pass_is_taken_for_ordinary_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client's compact text with floats, integral floats and non-ASCII strings is written
    by the one pass: the two calls are never made."""
    document: dict[str, Any] = {"b": [1.5, 16.0, 1e-9, "é😀"], "a": {"x": None, "y": True, "z": -3}}

    forbid_the_two_calls(monkeypatch)
    value, canonical = parse_canonical_document(orjson.dumps(document))
    assert value == document
    assert canonical == rfc8785.dumps(document)


def loaded(text: bytes) -> bytes | None:
    return canonical_loaded_document(orjson.loads(text), text)


def test_a_loaded_tree_is_vouched_for_only_within_the_limits() -> None:
    assert loaded(b'{"a":[1.0,2.5]}') == b'{"a":[1,2.5]}'
    deep = ('{"a":' * (MAX_DEPTH + 1) + "1" + "}" * (MAX_DEPTH + 1)).encode()
    assert loaded(deep) is None
    wide = orjson.dumps({"w": {str(i): i for i in range(MAX_KEYS + 1)}})
    assert loaded(wide) is None
    assert loaded(b'{"a":-9.3e18}') is None
    assert canonical_loaded_document([1], b"[1]") is None


#: Strings that look like the floats `_spell_found` looks for, beside floats that are.
FLOAT_LIKE = [".0,", ".0]", ".0}", "-0.0", "e+5", "1e-6,", "e-6]", '\\".0,', '"', "\\", "2.0"]


@EXAMPLES
@given(
    st.lists(st.sampled_from(FLOAT_LIKE), max_size=8),
    st.lists(
        st.sampled_from([1.0, 2.0, -3.0, 0.0, -0.0, 16.0, 1e-6, 1.5e-7, 1e16, 1e21, 0.5]),
        max_size=40,
    ),
    st.booleans(),
)
def test_floats_are_found_outside_strings_only(
    strings: list[str], floats: list[float], wide: bool
) -> None:
    """Integral floats lose ``.0`` and only they (few or many of them, and
    in documents walked for their widths); look-alikes inside strings are kept as written."""
    document: dict[str, Any] = {
        "s": strings,
        "f": floats,
        "m": dict(zip(strings, floats, strict=False)),
    }
    if wide:
        document["w"] = [{"k": index, "f": 1.0} for index in range(MAX_KEYS)]
    text = orjson.dumps(document)
    assert_same(text)
    assert parse_canonical_document(text)[1] == rfc8785.dumps(document)


def test_the_one_pass_walks_a_wide_document_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """More colons than ``MAX_KEYS`` and brackets than ``MAX_DEPTH``: depth and widths are
    walked, not handed to the two calls; integral floats among strings holding ".0,"."""
    document: dict[str, Any] = {
        "items": [{"n": float(index), "s": f"{index}.0,", "i": index} for index in range(2000)]
    }

    forbid_the_two_calls(monkeypatch)
    value, canonical = parse_canonical_document(orjson.dumps(document))
    assert value == document
    assert canonical == rfc8785.dumps(document)
