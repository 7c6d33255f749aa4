"""An integral number beyond ±(2**53 - 1): a float literal is a finite number (DW-DOC-2),
an integer literal is outside the safe range (decisions Q8). JSON Schema cannot tell the two
apart, so the contract test leaves such bodies to this test."""

from __future__ import annotations

import pytest

from blackops.jsonbody import parse_document
from domain.documents import canonical_document
from domain.errors import BlackOpsError


@pytest.mark.parametrize(
    ("literal", "canonical"),
    [
        ("2.5e16", "25000000000000000"),
        ("-2.357487238030861e+16", "-23574872380308610"),  # ECMAScript's shortest digits
        ("9007199254740992.0", "9007199254740992"),
    ],
)
def test_a_float_literal_beyond_the_safe_integers_is_a_finite_number(
    literal: str, canonical: str
) -> None:
    document = parse_document(f'{{"k": {literal}}}')
    assert canonical_document(document) == f'{{"k":{canonical}}}'.encode()


@pytest.mark.parametrize("literal", ["25000000000000000", "9007199254740992", "-9007199254740992"])
def test_an_integer_literal_beyond_the_safe_integers_is_refused(literal: str) -> None:
    with pytest.raises(BlackOpsError) as refused:
        canonical_document(parse_document(f'{{"k": {literal}}}'))
    assert refused.value.code == "invalid_params"
