"""DW-DOC-1, DW-DOC-2, DW-DOC-3, DW-DOC-4, DW-DOC-5: boundaries, refused types, hostile input."""

from __future__ import annotations

import collections
import dataclasses
import datetime
import decimal
import enum
import json
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pydantic
import pytest
import rfc8785

from domain import documents
from domain import native_canonical as native_canonical_module
from domain.documents import (
    MAX_BYTES,
    MAX_DEPTH,
    MAX_KEYS,
    MAX_SAFE_INTEGER,
    DocumentError,
    canonical_document,
    canonical_document_fragments,
    canonical_document_reference,
    canonical_json,
)
from domain.errors import BlackOpsError
from domain.native_canonical import native_canonical

Encoder = Callable[[object], bytes]


@pytest.fixture(
    params=[canonical_document, canonical_document_fragments, canonical_document_reference],
    ids=["fast", "fragments", "ref"],
)
def encode(request: pytest.FixtureRequest) -> Encoder:
    """Every rule holds on every path: native (then the others), fragments, the reference."""
    encoder: Encoder = request.param
    return encoder


def refused(encode: Encoder, document: object, code: str = "invalid_params") -> DocumentError:
    with pytest.raises(DocumentError) as caught:
        encode(document)
    assert caught.value.code == code
    return caught.value


def nested_lists(depth: int, leaf: list[Any] | None = None) -> list[Any]:
    """``depth`` lists, one inside the other, built without recursion."""
    outer: list[Any] = [] if leaf is None else leaf
    for _ in range(depth - 1):
        outer = [outer]
    return outer


# -- DW-DOC-1 (root) / DW-DOC-2 (values) / DW-DOC-3 (no hooks): exact built-in JSON types only --


class Hooks:
    """Every hook a serialiser might be tempted to call records that it was called."""

    calls: list[str]

    def __init__(self) -> None:
        self.calls = []

    def __json__(self) -> object:
        self.calls.append("__json__")
        return {}

    def __iter__(self) -> Iterator[object]:
        self.calls.append("__iter__")
        return iter(())

    def __len__(self) -> int:
        self.calls.append("__len__")
        return 0

    def __str__(self) -> str:
        self.calls.append("__str__")
        return ""

    def __repr__(self) -> str:
        self.calls.append("__repr__")
        return ""

    def __eq__(self, other: object) -> bool:
        self.calls.append("__eq__")
        return False

    def __hash__(self) -> int:
        return 0

    def __float__(self) -> float:
        self.calls.append("__float__")
        return 0.0

    def __index__(self) -> int:
        self.calls.append("__index__")
        return 0

    def keys(self) -> list[str]:
        self.calls.append("keys")
        return []

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # isinstance() would trust this; type() never does
        self.calls.append("__class__")
        return dict


class LoudMeta(type):
    """A metaclass whose hooks must not run either (hashing or naming the type)."""

    calls: list[str] = []  # noqa: RUF012 - shared on purpose

    def __hash__(cls) -> int:
        LoudMeta.calls.append("__hash__")
        return 0

    def __eq__(cls, other: object) -> bool:
        LoudMeta.calls.append("__eq__")
        return False

    @property
    def __name__(cls) -> str:  # type: ignore[override]
        LoudMeta.calls.append("__name__")
        return "Liar"


class Loud(metaclass=LoudMeta):
    pass


class EmptyDict(dict[str, Any]):
    pass


class EmptyList(list[Any]):
    pass


class EmptyStr(str):
    __slots__ = ()


class EmptyInt(int):
    pass


class EmptyFloat(float):
    pass


class Color(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    LOW = 1


class Mode(enum.StrEnum):
    FAST = "fast"


@dataclasses.dataclass
class Point:
    x: int


class Model(pydantic.BaseModel):
    x: int


REFUSED_VALUES: dict[str, object] = {
    "tuple": (1, 2),
    "empty tuple": (),
    "set": {1},
    "frozenset": frozenset({1}),
    "bytes": b"x",
    "bytearray": bytearray(b"x"),
    "memoryview": memoryview(b"x"),
    "complex": 1j,
    "range": range(2),
    "Decimal": decimal.Decimal("1.5"),
    "dataclass": Point(1),
    "pydantic model": Model(x=1),
    "Enum": Color.RED,
    "IntEnum": Level.LOW,
    "str Enum": Mode.FAST,
    "dict subclass": EmptyDict(),
    "OrderedDict": collections.OrderedDict(),
    "defaultdict": collections.defaultdict(list),
    "list subclass": EmptyList(),
    "str subclass": EmptyStr("x"),
    "int subclass": EmptyInt(1),
    "float subclass": EmptyFloat(1.0),
    "datetime": datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC),
    "date": datetime.date(2024, 1, 1),
    "object": object(),
    "type": dict,
    "UUID": uuid.UUID(int=1),
    "orjson.Fragment": orjson.Fragment(b"1"),
}


@pytest.mark.parametrize("value", REFUSED_VALUES.values(), ids=REFUSED_VALUES.keys())
def test_dw_doc_2_refuses_every_foreign_type(encode: Encoder, value: object) -> None:
    error = refused(encode, {"ok": 1, "bad": value})
    assert error.path == "$.bad"
    # Also inside an array, and inside an object inside an array.
    assert refused(encode, {"a": [1, value]}).path == "$.a[1]"
    assert refused(encode, {"a": [{"b": value}]}).path == "$.a[0].b"


@pytest.mark.parametrize(
    "root",
    [None, [], [{}], "{}", 1, 1.5, True, EmptyDict(), collections.OrderedDict(), Hooks()],
    ids=["None", "list", "list of object", "str", "int", "float", "bool", "dict subclass",
         "OrderedDict", "hooked"],
)  # fmt: skip
def test_dw_doc_1_root_must_be_exactly_a_dict(encode: Encoder, root: object) -> None:
    error = refused(encode, root)
    assert error.path == "$"


def test_dw_doc_3_no_hook_is_ever_called(encode: Encoder) -> None:
    value, key = Hooks(), Hooks()
    documents: list[object] = [{"v": value}, {"v": [value]}, {key: 1}, {"v": {key: 1}}, value]
    for document in documents:
        value.calls.clear()
        key.calls.clear()
        refused(encode, document)
        assert value.calls == []
        assert key.calls == []


def test_dw_doc_3_no_metaclass_hook_is_called(encode: Encoder) -> None:
    LoudMeta.calls.clear()
    error = refused(encode, {"v": Loud()})
    assert LoudMeta.calls == []
    assert "'Loud'" in error.message  # the real class name, read without running the property


@pytest.mark.parametrize(
    "key",
    [1, None, (1,), 1.5, True, b"k", EmptyStr("k"), Mode.FAST],
    ids=["int", "None", "tuple", "float", "bool", "bytes", "str subclass", "str Enum"],
)
def test_dw_doc_2_keys_must_be_exactly_str(encode: Encoder, key: object) -> None:
    assert refused(encode, {key: 1}).path == "$"
    assert refused(encode, {"a": {"b": 1, key: 1}}).path == "$.a"
    assert refused(encode, {"a": [{key: 1}]}).path == "$.a[0]"


def test_dw_doc_2_allowed_types_encode(encode: Encoder) -> None:
    document = {"s": "x", "i": -3, "f": 2.5, "t": True, "n": None, "l": [False], "o": {}}
    expected = b'{"f":2.5,"i":-3,"l":[false],"n":null,"o":{},"s":"x","t":true}'
    assert encode(document) == expected


# -- DW-DOC-2: finite numbers, safe integers, Unicode scalar strings -----------------------------


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_dw_doc_2_floats_must_be_finite(encode: Encoder, value: float) -> None:
    assert refused(encode, {"x": [value]}).path == "$.x[0]"


@pytest.mark.parametrize("value", [2**53, -(2**53), 2**64, -(2**100)])
def test_dw_doc_2_unsafe_integers_are_refused(encode: Encoder, value: int) -> None:
    assert refused(encode, {"x": value}).path == "$.x"


def test_dw_doc_2_safe_integer_bounds_pass(encode: Encoder) -> None:
    assert MAX_SAFE_INTEGER == 2**53 - 1
    document = {"max": MAX_SAFE_INTEGER, "min": -MAX_SAFE_INTEGER, "list": [MAX_SAFE_INTEGER]}
    assert encode(document) == (
        b'{"list":[9007199254740991],"max":9007199254740991,"min":-9007199254740991}'
    )


def test_dw_doc_2_bools_are_not_integers(encode: Encoder) -> None:
    assert encode({"t": True, "f": False}) == b'{"f":false,"t":true}'


@pytest.mark.parametrize(
    "surrogate",
    [chr(0xD800), chr(0xDBFF), chr(0xDC00), chr(0xDFFF), "a\ud83d", "\ude00b", "\udc00\ud800"],
    ids=["D800", "DBFF", "DC00", "DFFF", "high then end", "low first", "reversed pair"],
)
def test_dw_doc_2_lone_surrogates_are_refused(encode: Encoder, surrogate: str) -> None:
    assert refused(encode, {"v": surrogate}).path == "$.v"
    assert refused(encode, {"v": ["é", surrogate]}).path == "$.v[1]"
    assert refused(encode, {surrogate: 1}).path == "$"
    assert refused(encode, {"o": {surrogate: 1, "\U0001f600": 2, "\ue000": 3}}).path == "$.o"


# -- DW-DOC-1: sizes are measured on the RFC 8785 canonical UTF-8 form, byte for byte ----------


FLOATS = [
    (1e21, b"1e+21"),
    (1e-7, b"1e-7"),
    (5e-324, b"5e-324"),
    (-0.0, b"0"),
    (0.0, b"0"),
    (1.0, b"1"),
    (-1.0, b"-1"),
    (1e20, b"100000000000000000000"),
    (0.000001, b"0.000001"),
    (0.00001, b"0.00001"),
    (1.5e-7, b"1.5e-7"),
    (1.2345678901234568e20, b"123456789012345680000"),
    (1e16, b"10000000000000000"),
    (0.1, b"0.1"),
    (-2.5, b"-2.5"),
    (1e-6, b"0.000001"),
    (9.999999999999997e-7, b"9.999999999999997e-7"),  # just below 1e-6
    (9.999999999999999e20, b"999999999999999900000"),  # just below 1e21
    (1.0000000000000001e-7, b"1.0000000000000001e-7"),
    (1.7976931348623157e308, b"1.7976931348623157e+308"),
    (-1e-10, b"-1e-10"),
    (333333333.3333333, b"333333333.3333333"),
    (2.0**53, b"9007199254740992"),
]


@pytest.mark.parametrize(("value", "text"), FLOATS, ids=[repr(v) for v, _ in FLOATS])
def test_dw_doc_1_numbers_use_ecmascript_formatting(
    encode: Encoder, value: float, text: bytes
) -> None:
    expected = b'{"n":' + text + b"}"
    assert encode({"n": value}) == expected == rfc8785.dumps({"n": value})


def test_dw_doc_1_string_escapes_are_json_stringify(encode: Encoder) -> None:
    text = "".join(map(chr, range(0x80))) + "\u2028\u2029é€\U0001f600\ufeff"
    short = {0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r"}
    pieces = []
    for char in text:
        code = ord(char)
        if char in '"\\':
            pieces.append("\\" + char)
        elif code < 0x20:
            pieces.append(short.get(code, f"\\u{code:04x}"))
        else:
            pieces.append(char)  # "/", DEL, U+2028 and all non-ASCII go through unescaped
    expected = b'{"s":"' + "".join(pieces).encode() + b'"}'
    assert encode({"s": text}) == expected == rfc8785.dumps({"s": text})
    assert b"\\u001f" in expected  # lower-case hex


def test_dw_doc_1_keys_sort_by_utf16_code_units(encode: Encoder) -> None:
    # Code-point order would put U+E000 first; UTF-16 puts the surrogate pair (D83D) first.
    assert encode({"\ue000": 1, "\U0001f600": 2}) == '{"\U0001f600":2,"\ue000":1}'.encode()
    # The RFC 8785 §3.2.3 example, nested and with floats inside the re-ordered object.
    keys = ["\u20ac", "\r", "\ufb33", "1", "\U0001f600", "\u0080", "\u00f6"]
    inner = {key: [1.5, {"\uffff": 0.0, "\U00010000": None}] for key in keys}
    document: dict[str, Any] = {"outer": inner, "z": 1e21}
    out = encode(document)
    assert out == rfc8785.dumps(document)
    order = ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]
    positions = [out.index(json.dumps(key, ensure_ascii=False).encode()) for key in order]
    assert positions == sorted(positions)


def test_dw_doc_1_no_whitespace_and_sorted_nested(encode: Encoder) -> None:
    document = {"b": {"d": [1, {"f": 1, "e": 2}], "c": ""}, "a": []}
    assert encode(document) == b'{"a":[],"b":{"c":"","d":[1,{"e":2,"f":1}]}}'


# -- DW-DOC-4: an absent document is not a document ---------------------------------------------


def test_dw_doc_4_none_is_not_a_document(encode: Encoder) -> None:
    error = refused(encode, None)
    assert error.path == "$"
    assert encode({}) == b"{}"
    assert encode({"v": None}) == b'{"v":null}'  # null inside a document is fine


# -- DW-DOC-1 limits, DW-DOC-2 cycles and sharing, DW-DOC-5 the two codes ------------------------


def test_dw_doc_1_key_limit_at_the_root(encode: Encoder) -> None:
    assert MAX_KEYS == 1024
    encode({f"k{i}": i for i in range(1024)})
    error = refused(encode, {f"k{i}": i for i in range(1025)}, "document_too_large")
    assert error.path == "$"


def test_dw_doc_1_key_limit_when_nested(encode: Encoder) -> None:
    ok = {f"k{i}": None for i in range(1024)}
    too_many = {f"k{i}": None for i in range(1025)}
    encode({"a": [ok, ok]})
    assert refused(encode, {"a": [ok, too_many]}, "document_too_large").path == "$.a[1]"
    assert refused(encode, {"a": {"b": too_many}}, "document_too_large").path == "$.a.b"


def _exactly(size: int, document: dict[str, Any], pad_key: str = "pad") -> dict[str, Any]:
    """Add a string to ``document`` so that its canonical form is exactly ``size`` bytes."""
    document[pad_key] = ""
    missing = size - len(rfc8785.dumps(document))
    assert missing >= 0
    document[pad_key] = "x" * missing
    return document


def test_dw_doc_1_exactly_max_bytes_passes_one_more_fails(encode: Encoder) -> None:
    assert MAX_BYTES == 1_048_576
    document = {"a": "x" * (MAX_BYTES - 8)}
    out = encode(document)
    assert len(out) == 1_048_576
    assert out == b'{"a":"' + b"x" * (MAX_BYTES - 8) + b'"}'
    document = {"a": "x" * (MAX_BYTES - 7)}
    assert refused(encode, document, "document_too_large").path == "$"


@pytest.mark.parametrize(
    "filler",
    [
        [[] for _ in range(300_000)],
        [{} for _ in range(300_000)],
        [0] * 500_000,
        [{"": 0} for _ in range(140_000)],
        [[0.5, "é"] for _ in range(90_000)],
    ],
    ids=["empty arrays", "empty objects", "zeros", "tiny objects", "pairs"],
)
def test_dw_doc_1_size_bound_is_exact_for_dense_documents(
    encode: Encoder, filler: list[Any]
) -> None:
    """The running lower bound never refuses a document that fits exactly."""
    document = _exactly(MAX_BYTES, {"filler": filler})
    out = encode(document)
    assert len(out) == MAX_BYTES
    assert out == rfc8785.dumps(document)
    document["pad"] += "x"
    refused(encode, document, "document_too_large")


def test_fast_path_needs_no_fallback_at_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast paths' size floors are tight enough: valid documents never reach the
    reference, and the native path writes every one it can vouch for itself."""

    def no_fallback(value: object, limits: object) -> bytes:
        raise AssertionError("the fast paths gave up on a valid document")

    monkeypatch.setattr(documents, "_canonical_reference", no_fallback)
    fillers: list[list[Any]] = [
        [[] for _ in range(300_000)],
        [{} for _ in range(300_000)],
        [{"": 0} for _ in range(140_000)],
        [[0.5, "é", None, True] for _ in range(45_000)],
        [{"\U0001f600": 1, "\ue000": [0.5]} for _ in range(40_000)],
    ]
    for index, filler in enumerate(fillers):
        document = _exactly(MAX_BYTES, {"filler": filler})
        expected = rfc8785.dumps(document)
        assert canonical_document(document) == expected
        native = native_canonical(document, documents._DOCUMENT)
        # The last one has keys whose UTF-16 and code-point orders differ: fragments write it.
        assert native == (expected if index < 4 else None)


def test_dw_doc_1_multibyte_characters_count_as_bytes(encode: Encoder) -> None:
    document = _exactly(MAX_BYTES, {"a": "é" * 1000})
    assert len(encode(document)) == MAX_BYTES
    document["a"] += "é"  # one more character, two more bytes
    refused(encode, document, "document_too_large")


def test_dw_doc_1_billion_laughs_fails_fast(encode: Encoder) -> None:
    laugh: list[Any] = ["lol"]
    for _ in range(60):
        laugh = [laugh, laugh]
    assert refused(encode, {"a": laugh}, "document_too_large").path == "$"
    objects: dict[str, Any] = {}
    for _ in range(60):
        objects = {"a": objects, "b": objects, "c": [objects]}
    refused(encode, {"a": objects}, "document_too_large")


def test_dw_doc_1_shared_big_string_fails_fast(encode: Encoder) -> None:
    big = "x" * 100_000
    refused(encode, {"a": [big] * 1_000_000}, "document_too_large")
    refused(encode, {"a": [[big] * 10] * 100_000}, "document_too_large")


def test_dw_doc_2_shared_acyclic_object_is_written_each_time(encode: Encoder) -> None:
    shared: dict[str, Any] = {"k": [1, 2.5, "é"]}
    document = {"a": shared, "b": shared, "c": [shared, [shared]]}
    one = b'{"k":[1,2.5,"\xc3\xa9"]}'
    assert (
        encode(document) == b'{"a":' + one + b',"b":' + one + b',"c":[' + one + b",[" + one + b"]]}"
    )


def test_dw_doc_2_cycles_are_refused(encode: Encoder) -> None:
    itself: dict[str, Any] = {"a": 1}
    itself["me"] = itself
    assert refused(encode, itself).path == "$.me"
    in_list: list[Any] = [1]
    in_list.append(in_list)
    assert refused(encode, {"l": in_list}).path == "$.l[1]"
    first: dict[str, Any] = {}
    second: dict[str, Any] = {"back": [first]}
    first["next"] = second
    assert refused(encode, {"x": first}).path == "$.x.next.back[0]"


def test_dw_doc_2_cycle_wins_over_size(encode: Encoder) -> None:
    """Each lap adds 20 kB: a walk that only counted bytes would call it too large."""
    heavy: dict[str, Any] = {"a": "x" * 20_000}
    heavy["z"] = heavy
    assert refused(encode, {"root": heavy}).path == "$.root.z"


def nested_objects(depth: int) -> dict[str, Any]:
    """``depth`` objects, one inside the other (the outermost is level 1)."""
    objects: dict[str, Any] = {}
    for _ in range(depth - 1):
        objects = {"k": objects}
    return objects


def test_dw_doc_2_nesting_up_to_the_limit_encodes(encode: Encoder) -> None:
    """Decisions P45: the root is level 1; MAX_DEPTH levels of objects or arrays pass."""
    assert MAX_DEPTH == 128
    lists = {"a": nested_lists(MAX_DEPTH - 1)}
    assert encode(lists) == b'{"a":' + b"[" * 127 + b"]" * 127 + b"}" == rfc8785.dumps(lists)
    objects = nested_objects(MAX_DEPTH)
    assert encode(objects) == b'{"k":' * 127 + b"{}" + b"}" * 127 == rfc8785.dumps(objects)


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, MAX_DEPTH + 2, 254, 255, 1025, 100_000])
def test_dw_doc_2_nesting_deeper_than_the_limit_is_refused(encode: Encoder, depth: int) -> None:
    error = refused(encode, {"a": nested_lists(depth - 1)})
    assert "deeper than 128 levels" in error.message
    assert error.path.startswith("$.a[0][0]") and error.path.endswith("[0]")
    assert len(error.message) < 300
    error = refused(encode, nested_objects(depth))
    assert error.path.startswith("$.k.k.k")  # the first object one level too deep
    # Depth is about containers: a long string or a wide object at the limit is fine.
    encode({"a": nested_lists(MAX_DEPTH - 1, ["x" * 10_000, 1.5, None])})


def test_dw_doc_2_depth_is_refused_before_anything_else_deeper(encode: Encoder) -> None:
    """The walk stops at the level that is too deep: what lies below is never looked at."""
    hooks = Hooks()
    error = refused(encode, {"a": nested_lists(MAX_DEPTH, [hooks])})
    assert "deeper than 128 levels" in error.message
    assert hooks.calls == []


def test_answers_and_records_read_back_have_no_depth_limit() -> None:
    """`canonical_json` writes what was accepted before the limit existed, at any depth."""
    depth = 100_000
    out = canonical_json({"a": nested_lists(depth)})
    assert out == b'{"a":' + b"[" * depth + b"]" * depth + b"}"
    out = canonical_json(nested_objects(depth))
    assert out == b'{"k":' * (depth - 1) + b"{}" + b"}" * (depth - 1)


def test_deep_errors_keep_a_short_path() -> None:
    with pytest.raises(DocumentError) as caught:
        canonical_json({"a": nested_lists(100_000, [1, float("nan")])})
    error = caught.value
    assert error.code == "invalid_params"
    assert error.path.startswith("$.a[0][0]")
    assert error.path.endswith("[0][1]")
    assert len(error.message) < 300


@pytest.mark.parametrize("depth", [120, 127, 128, 129, 198, 199, 200, 201, 202, 254, 300])
def test_fast_path_hands_over_at_orjson_depth_limit(depth: int) -> None:
    document = {"a": nested_lists(depth, [1.5, {"\U0001f600": 1, "\ue000": [2]}])}
    expected = rfc8785.dumps(document)
    assert canonical_json(document) == expected
    assert documents._canonical_reference(document, documents._UNLIMITED) == expected
    if depth + 2 <= MAX_DEPTH:  # the root and the innermost object add two levels
        assert canonical_document(document) == expected
    else:
        assert refused(canonical_document, document).code == "invalid_params"


def test_fast_path_survives_a_caller_near_the_recursion_limit() -> None:
    document = {"a": nested_lists(120, [0.5, ("not", "a", "list")])}
    fine = {"a": nested_lists(120, [0.5])}
    frame, used = sys._getframe(), 0
    while frame is not None:
        frame, used = frame.f_back, used + 1  # type: ignore[assignment]
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(used + 100)
    try:
        out = canonical_document(fine)
        with pytest.raises(DocumentError):
            canonical_document(document)
        fragments = canonical_document_fragments(fine)
    finally:
        sys.setrecursionlimit(limit)
    assert out == fragments == rfc8785.dumps(fine)


def test_dw_doc_5_error_names_the_path_never_the_value(encode: Encoder) -> None:
    secret = "hunter2-s3cr3t"
    documents: dict[str, object] = {
        "$.items[3].name": {"items": [{}, {}, {}, {"name": EmptyStr(secret)}]},
        "$.items[3].pin": {"items": [0, 1, 2, {"pin": 9007199254740993}]},
        "$.items[3]": {"items": [0, 1, 2, (secret,)]},
        '$["api key"]': {"api key": {secret}},
        "$.nested": {"nested": {(secret,): 1}},
        "$.surrogate": {"surrogate": secret + "\ud800"},
    }
    for path, document in documents.items():
        error = refused(encode, document)
        assert error.path == path
        shown = str(error) + repr(error) + json.dumps(error.to_body())
        assert path in str(error)
        assert secret not in shown
        assert "9007199254740993" not in shown


def test_dw_doc_5_long_keys_are_cut_in_paths(encode: Encoder) -> None:
    key = "k" * 10_000
    error = refused(encode, {key: float("nan")})
    assert error.path == '$["' + "k" * 64 + '\\u2026"]'
    assert len(error.message) < 200


def test_dw_doc_5_only_the_two_document_codes() -> None:
    assert frozenset({"invalid_params", "document_too_large"}) == DocumentError.CODES
    assert issubclass(DocumentError, BlackOpsError)
    for code in DocumentError.CODES:
        error = DocumentError(code, "broken", "$.a[1]")
        assert (error.code, error.path, error.message) == (code, "$.a[1]", "broken at $.a[1]")
    assert DocumentError("invalid_params", "broken").path == "$"
    assert DocumentError("document_too_large", "big").http_status == 413
    for code in ["invalid_request", "conflict", "nonsense"]:
        with pytest.raises(ValueError, match="DocumentError code"):
            DocumentError(code, "broken")


def test_envelopes_follow_every_rule_but_the_document_size() -> None:
    """The journal's own records wrap a full document, so only their byte limit differs."""
    from domain.documents import ENVELOPE_MAX_BYTES, canonical_envelope

    wrapped: dict[str, Any] = {
        "at": "2026-11-30T09:00:00.000000Z",
        "data": {"params": {"a": "x" * MAX_BYTES}},
    }
    assert canonical_envelope(wrapped) == rfc8785.dumps(wrapped)
    with pytest.raises(DocumentError) as too_big:
        canonical_envelope({"a": "x" * ENVELOPE_MAX_BYTES})
    assert too_big.value.code == "document_too_large"
    with pytest.raises(DocumentError) as nan:
        canonical_envelope({"a": float("nan")})
    assert nan.value.code == "invalid_params"


# -- the native path's own walk (`_vouch`), beside many other values --------------------------


def vouch(document: object) -> list[float] | None:
    return native_canonical_module._vouch(document, documents._DOCUMENT)


def padded(inner: object) -> dict[str, Any]:
    """``inner`` a few levels down, beside a few hundred other values."""
    return {"z": {"y": [inner]}, "a": list(range(300)), "b": [{"c": 1.5}] * 100}


@pytest.mark.parametrize("value", REFUSED_VALUES.values(), ids=REFUSED_VALUES.keys())
def test_the_native_walk_refuses_every_foreign_type(value: object) -> None:
    assert vouch(padded(value)) is None
    assert refused(canonical_document, padded(value)).path == "$.z.y[0]"


def test_the_native_walk_calls_no_hook() -> None:
    value, key = Hooks(), Hooks()
    for inner in (value, {key: 1}, [value], {"k": {key: value}}):
        assert vouch(padded(inner)) is None
        refused(canonical_document, padded(inner))
    assert value.calls == key.calls == []
    LoudMeta.calls.clear()
    assert vouch(padded(Loud())) is None
    assert LoudMeta.calls == []


class HookedStr(str):
    """A key that would record any comparison, hash, length or conversion of it."""

    calls: list[str] = []  # noqa: RUF012 - shared on purpose

    def __lt__(self, other: object) -> bool:
        HookedStr.calls.append("__lt__")
        return str.__lt__(self, str(other))

    def __eq__(self, other: object) -> bool:
        HookedStr.calls.append("__eq__")
        return str.__eq__(self, other)

    def __hash__(self) -> int:
        HookedStr.calls.append("__hash__")
        return str.__hash__(self)

    def __len__(self) -> int:
        HookedStr.calls.append("__len__")
        return 0

    def __str__(self) -> str:
        HookedStr.calls.append("__str__")
        return ""


def test_a_str_subclass_key_runs_none_of_its_hooks(encode: Encoder) -> None:
    for document in ({"a": 1, HookedStr("b"): 2}, padded({"a": 1, HookedStr("b"): 2})):
        HookedStr.calls.clear()  # building the dict hashed the key
        refused(encode, document)
        assert vouch(document) is None or HookedStr.calls == []
        assert native_canonical(document, documents._DOCUMENT) is None
        assert HookedStr.calls == []


@pytest.mark.parametrize("key", [1, None, (1,), 1.5, True, EmptyStr("k"), Mode.FAST], ids=str)
def test_the_native_path_refuses_keys_that_are_not_exactly_str(key: object) -> None:
    assert native_canonical(padded({key: 1}), documents._DOCUMENT) is None
    assert refused(canonical_document, padded({"b": 1, key: 2})).path == "$.z.y[0]"


def test_the_native_walk_holds_every_limit() -> None:
    wide = {str(index): index for index in range(MAX_KEYS + 1)}
    assert vouch(padded(wide)) is None
    wide.pop("0")
    assert vouch(padded(wide)) is not None
    deep: Any = []
    for _ in range(MAX_DEPTH - 4):  # the root, "z", "y"'s list and the innermost list
        deep = [deep]
    assert vouch(padded(deep)) is not None
    assert canonical_document_reference(padded(deep)) == rfc8785.dumps(padded(deep))
    assert vouch(padded([deep])) is None
    refused(canonical_document_reference, padded([deep]))
    cycle: list[Any] = []
    cycle.append(cycle)
    assert vouch(padded(cycle)) is None
    assert vouch(padded("x" * MAX_BYTES)) is None
    assert vouch(padded(["x" * 1000] * 2000)) is None  # a floor of 2 MB from a 1 KB string
    assert vouch(padded({"k" * 1000: 1})) is not None
    assert vouch({"k": [{"k" * 1000: 1}] * 2000}) is None  # a long key, shared
    clash = {"\U0001f600": 1, "\ue000": 2}
    assert vouch(padded(clash)) is None
    assert canonical_document(padded(clash)) == rfc8785.dumps(padded(clash))


@pytest.mark.parametrize("count", [2, 400], ids=["short list", "long list"])
def test_negative_fractions_below_one_stay_on_the_native_path(count: int) -> None:
    """Only ``-0.0`` itself (written ``0``) is given up to a slower path, not -0.05 or
    -0.001, in a short list of floats and a long one."""
    values = [-0.05, -0.001] * (count // 2)
    document: dict[str, Any] = {"values": values, "x": 1.5}
    assert native_canonical(document, documents._DOCUMENT) == rfc8785.dumps(document)
    with_zero: dict[str, Any] = {"values": [*values, -0.0], "x": 1.5}
    assert native_canonical(with_zero, documents._DOCUMENT) is None
    assert canonical_document(with_zero) == rfc8785.dumps(with_zero)


@dataclasses.dataclass
class _Late:
    b: float
    a: float


class _Text(str):
    pass


def canonical_while_changed(
    monkeypatch: pytest.MonkeyPatch, document: dict[str, Any], key: str, late: object
) -> bytes:
    """`canonical_document(document)` with ``document[key]`` set to ``late`` as orjson is
    about to write it: what another thread could do between the native path's walk and its
    write."""
    write = orjson.dumps

    def change_then_write(value: Any, *args: Any, **kwargs: Any) -> bytes:
        if value is document:
            document[key] = late
        return write(value, *args, **kwargs)

    monkeypatch.setattr(orjson, "dumps", change_then_write)  # the module native_canonical calls
    try:
        return canonical_document(document)
    finally:
        monkeypatch.undo()


@pytest.mark.parametrize(
    "late",
    [-0.0, 2.0, 1e-6, 1e20, 1e16, [3.0], (2.0,), _Text("x"), _Late(2.0, 1.0),
     datetime.datetime(2026, 1, 1), {"z": 1.0, "a": -0.0}],
    ids=repr,
)  # fmt: skip
def test_a_value_changed_between_the_walk_and_the_write_is_caught(
    monkeypatch: pytest.MonkeyPatch, late: object
) -> None:
    """The native path walks the document (types, floats), then orjson writes it: another
    thread may change it in between (found by a defect hunt: -0.0 and 2.0 were written as
    such, a str subclass as a string). Here the write itself changes it first, as such a
    thread would: the answer is the exact path's for the document as written, or its
    refusal, never bytes RFC 8785 would not write."""
    document: dict[str, Any] = {"f": 1.5, "g": [0.25, 1e-9], "s": "a"}
    try:
        answer: object = canonical_while_changed(monkeypatch, document, "f", late)
    except DocumentError as error:
        answer = error.code
    try:
        expected: object = canonical_document_reference(document)
    except DocumentError as error:
        expected = error.code
    assert answer == expected


@pytest.mark.parametrize(
    ("document", "late"),
    [({"a": 2.0}, "x.0]"), ({"a": 2.0, "s": 'q"1.0]'}, 2.5), ({"a": 2.0, "s": "back\\"}, "1.0}"),
     ({"a": 2.0, '"".0]0': 1}, 2.5)],
    ids=["plain", "escaped quote", "trailing backslash", "key"],
)  # fmt: skip
def test_an_integral_float_gone_after_the_walk_leaves_the_strings_as_they_are(
    monkeypatch: pytest.MonkeyPatch, document: dict[str, Any], late: object
) -> None:
    """The walk counted one integral float (2.0); the write holds none, but a string (or a
    key) with '.0' before a delimiter. Dropping that '.0' would still match the count (found
    by two reviews, the second where strings hold escaped quotes or backslashes): only '.0'
    outside strings is dropped, strings told apart with escapes blanked."""
    answer = canonical_while_changed(monkeypatch, document, "a", late)
    assert answer == rfc8785.dumps(document)


@pytest.mark.parametrize(
    "document",
    [{"hosts": "node-1,node-2,node-3"}, {"note": "upgraded to 2.0, then restarted"},
     {"note": "v1.0]", "x": 2.0, "y": [1e-6], "z": "e+16}"}],
)  # fmt: skip
def test_text_that_looks_like_a_float_spelling_keeps_the_native_path(
    document: dict[str, Any],
) -> None:
    """Spellings RFC 8785 does not use are looked for in orjson's writing, outside strings
    only: such text alone does not send a document to the slow path (found by a review, when
    it did on every call)."""
    native = native_canonical(document, documents._DOCUMENT)
    if "y" in document:  # 1e-6 is written 1e-6 by orjson, 0.000001 by RFC 8785: given up
        assert native is None
        document = {k: v for k, v in document.items() if k != "y"}
        native = native_canonical(document, documents._DOCUMENT)
    assert native is not None and native == rfc8785.dumps(document)
