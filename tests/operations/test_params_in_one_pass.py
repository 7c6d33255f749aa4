"""Params read from JSON text in one pass (``read_params``, decisions F132): the HTTP routes
and ``--params`` hand the service the canonical bytes they made, and what is journaled, what
is answered and which refusal comes first are the same as when the service is given the
value alone and canonicalises it itself."""

from __future__ import annotations

import copy
import json
import pickle
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blackops import Application
from blackops.jsonbody import ParsedDocument, parse_document
from blackops.operations.service import read_params
from domain.documents import DocumentError, canonical_document
from domain.errors import BlackOpsError

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**60), 2**60) | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
_TEXTS = st.one_of(
    st.dictionaries(st.text(max_size=6), _JSON, max_size=5).map(
        lambda d: json.dumps(d, allow_nan=True)
    ),
    st.sampled_from(
        [
            "",
            " ",
            "{",
            "[1]",
            '{"a": 1, "a": 2}',
            '{"n": 9007199254740993}',
            '{"n": 1e400}',
            '{"s": "\\ud800"}',
            '{"x": NaN}',
            "[" * 80 + "]" * 80,
            '{"d": ' + "[" * 70 + "]" * 70 + "}",
        ]
    ),
)


def _exact(text: str) -> Any:
    """What the callers did before: parse, then canonicalise, each refusal as it comes."""
    try:
        value = parse_document(text, empty_is={})
    except DocumentError as error:
        return ("parse", error.code, error.message)
    try:
        return ("ok", value, canonical_document(value))
    except DocumentError as error:
        return ("canonical", error.code, error.message, value)


def _one_pass(text: str) -> Any:
    try:
        read = read_params(text, empty_is={})
    except DocumentError as error:
        return ("parse", error.code, error.message)
    if isinstance(read, ParsedDocument):
        return ("read", read.value, read.canonical)
    return ("read", read, None)


@settings(max_examples=400, deadline=None)
@given(_TEXTS)
def test_read_params_gives_the_value_and_bytes_of_parse_then_canonicalise(text: str) -> None:
    exact, found = _exact(text), _one_pass(text)
    if exact[0] == "parse":
        assert found == exact
    elif exact[0] == "ok":
        assert found == ("read", *exact[1:])
    else:  # refused once canonical: left to the service, after its own checks
        assert found == ("read", exact[3], None)


@pytest.fixture
def served_app(any_store_url: str) -> Any:
    app = Application(any_store_url)
    app.operation("t.echo")(lambda ctx, params: params)
    yield app
    app.close()


def _outcome(call: Any) -> Any:
    try:
        result = call()
    except BlackOpsError as error:
        return ("refused", error.code, error.message)
    return ("ok", result.to_dict()["outcome"] if hasattr(result, "to_dict") else None)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(text=_TEXTS, type_=st.sampled_from(["t.echo", "t.nosuch"]))
def test_the_service_answers_read_params_as_it_answers_the_value(
    served_app: Application, text: str, type_: str
) -> None:
    """An unknown type is still refused before a document that is no document."""
    app = served_app
    try:
        read = read_params(text, empty_is={})
    except DocumentError:
        return  # refused before the service is called, as before
    value = read.value if isinstance(read, ParsedDocument) else read
    one_pass = _outcome(lambda: app.run(type_, read, actor="a", tenant="t"))
    alone = _outcome(lambda: app.run(type_, value, actor="a", tenant="t"))
    assert one_pass == alone
    submitted = _outcome(lambda: app.submit_accepted(type_, read, actor="a", tenant="t"))
    submitted_alone = _outcome(lambda: app.submit_accepted(type_, value, actor="a", tenant="t"))
    assert submitted == submitted_alone


def test_a_parsed_document_is_read_only_and_its_bytes_are_its_values() -> None:
    read = read_params('{"b": 2.0, "a": [1, "x"]}')
    assert isinstance(read, ParsedDocument)
    assert read.value == {"b": 2.0, "a": [1, "x"]}
    assert read.canonical == canonical_document(read.value) == b'{"a":[1,"x"],"b":2}'
    with pytest.raises(AttributeError):
        read._canonical = b'{"evil":1}'
    with pytest.raises(AttributeError):
        read.canonical = b'{"evil":1}'  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del read._canonical
    assert read.canonical == b'{"a":[1,"x"],"b":2}'
    with pytest.raises(TypeError):
        type("Forged", (ParsedDocument,), {"canonical": b'{"evil":1}'})
    # Copies are parses of its canonical bytes: the same bytes, an equal value.
    for copied in (copy.copy(read), copy.deepcopy(read), pickle.loads(pickle.dumps(read))):
        assert type(copied) is ParsedDocument
        assert (copied.value, copied.canonical) == (read.value, read.canonical)
