"""The iterative JSON parser reads what the standard library reads, at any depth."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.json_text import JSONTextError, load_canonical, parse_json, scalar_text

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=40,
)


@settings(max_examples=300)
@given(values, st.sampled_from([None, 2]), st.booleans())
def test_parses_like_the_standard_library(value: Any, indent: int | None, ascii_only: bool) -> None:
    text = json.dumps(value, indent=indent, ensure_ascii=ascii_only)
    assert parse_json(text) == json.loads(text)


@pytest.mark.parametrize(
    "text",
    ['{"a": 1, "a": 2}', "NaN", "[1,]", '{"a" 1}', "[1 2]", "", "{", "[1]x", "1" * 5000, "-", "01"],
)
def test_refuses_what_would_lose_data_or_is_not_json(text: str) -> None:
    with pytest.raises(JSONTextError):
        parse_json(text)


def test_has_no_depth_limit() -> None:
    depth = 200_000
    value = load_canonical(b"[" * depth + b"]" * depth)
    for _ in range(depth - 1):
        value = value[0]
    assert value == []


def test_scalar_text_spells_out_lone_surrogates_only() -> None:
    assert scalar_text("plain \\ text é 😀") == "plain \\ text é 😀"
    assert scalar_text("a\ud800b") == "a\\ud800b"
    assert scalar_text("abcdef", 3) == "abc"
