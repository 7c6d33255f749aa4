"""An iterative JSON parser: any nesting depth, strict about what would lose data.

orjson (1,024 levels) and the standard library (the recursion limit) stop at depths a
valid document may reach, since documents have no depth limit. This parser keeps an
explicit stack instead, and refuses duplicate keys, NaN/Infinity and over-long integers.
"""

from __future__ import annotations

import re
from json.decoder import scanstring  # type: ignore[attr-defined]  # C-accelerated, untyped
from typing import Any

import orjson

from domain.documents import format_float

_WHITESPACE = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_LITERALS = {"true": True, "false": False, "null": None}
_MAX_INT_DIGITS = 4300  # Python's own int-from-text limit


class JSONTextError(ValueError):
    """The text is not one JSON value that can be read without losing anything."""


class _Open:
    __slots__ = ("container", "key")

    def __init__(self, container: dict[str, Any] | list[Any]) -> None:
        self.container = container
        self.key: str | None = None


def parse_json(text: str) -> Any:
    """Parse exactly one JSON value (RFC 8259) from ``text``."""
    stack: list[_Open] = []
    pos = _skip(text, 0)
    while True:
        value, pos, opened = _value(text, pos)
        if opened is not None:
            pos = _skip(text, pos)
            closer = "}" if isinstance(opened, dict) else "]"
            if text.startswith(closer, pos):
                value, pos = opened, pos + 1
            else:
                stack.append(_Open(opened))
                if isinstance(opened, dict):
                    stack[-1].key, pos = _key(text, pos)
                continue
        # A complete value: attach it, then close every container that ends here.
        while True:
            if not stack:
                end = _skip(text, pos)
                if end != len(text):
                    raise JSONTextError(f"unexpected text after the value at offset {end}")
                return value
            top = stack[-1]
            if isinstance(top.container, dict):
                assert top.key is not None
                if top.key in top.container:
                    raise JSONTextError("duplicate object key")
                top.container[top.key] = value
            else:
                top.container.append(value)
            pos = _skip(text, pos)
            char = text[pos : pos + 1]
            if char == ",":
                pos = _skip(text, pos + 1)
                if isinstance(top.container, dict):
                    top.key, pos = _key(text, pos)
                break  # the next member's value
            if char != ("}" if isinstance(top.container, dict) else "]"):
                raise JSONTextError(f"expected ',' or a closing bracket at offset {pos}")
            value, pos = stack.pop().container, pos + 1


def _skip(text: str, pos: int) -> int:
    match = _WHITESPACE.match(text, pos)
    assert match is not None  # the pattern matches the empty string
    return match.end()


def _key(text: str, pos: int) -> tuple[str, int]:
    if not text.startswith('"', pos):
        raise JSONTextError(f"expected an object key at offset {pos}")
    key, pos = _string(text, pos)
    pos = _skip(text, pos)
    if not text.startswith(":", pos):
        raise JSONTextError(f"expected ':' at offset {pos}")
    return key, _skip(text, pos + 1)


def _string(text: str, pos: int) -> tuple[str, int]:
    try:
        value, end = scanstring(text, pos + 1, True)
    except ValueError as error:
        raise JSONTextError(f"malformed string at offset {pos}") from error
    return value, end


def _value(text: str, pos: int) -> tuple[Any, int, dict[str, Any] | list[Any] | None]:
    """One value at ``pos``: scalars whole; containers only opened (third item)."""
    char = text[pos : pos + 1]
    if char == "{":
        return None, pos + 1, {}
    if char == "[":
        return None, pos + 1, []
    if char == '"':
        value, end = _string(text, pos)
        return value, end, None
    for word, literal in _LITERALS.items():
        if text.startswith(word, pos):
            return literal, pos + len(word), None
    match = _NUMBER.match(text, pos)
    if match is None:
        raise JSONTextError(f"expected a JSON value at offset {pos}")
    number = match.group()
    if match.group(1) or match.group(2):
        return float(number), match.end(), None  # an overflow becomes inf: refused later
    if len(number) > _MAX_INT_DIGITS:
        raise JSONTextError("integer has too many digits")
    return int(number), match.end(), None


def load_canonical(data: bytes) -> Any:
    """Read JSON bytes we wrote ourselves: orjson, or this parser past orjson's depth.

    Documents hold only safe integers (|n| <= 2**53 - 1), so an integer literal beyond
    that range can only be a float whose RFC 8785 form has no fraction (``2.0**60`` is
    written ``1152921504606846976``): it is read back as the float it was.
    """
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        value = parse_json(data.decode("utf-8"))
    if _SIXTEEN_DIGITS in data.translate(_DIGITS_AS_ZERO):  # rare: only then walk the value
        value = _unsafe_ints_to_floats(value)
    return value


#: Every digit becomes "0" and everything else "x": a run of 16 digits is then a plain
#: substring search, ten times cheaper than a regular expression over each event.
_DIGITS_AS_ZERO = bytes(0x30 if 0x30 <= c <= 0x39 else 0x78 for c in range(256))
_SIXTEEN_DIGITS = b"0" * 16
_MAX_SAFE = 2**53 - 1


def integral_floats(root: Any) -> Any:
    """``root`` with every integer beyond ±(2**53 - 1) that is spelled as RFC 8785 spells a
    double read as that double: such floats (``2.0**60`` is ``1152921504606847000``) are
    written without a fraction. Other unsafe integers stay integers (refused as documents)."""
    return _unsafe_ints_to_floats(root, canonical_only=True)


def _unsafe_ints_to_floats(root: Any, canonical_only: bool = False) -> Any:
    def fix(value: Any) -> Any:
        if type(value) is int and not -_MAX_SAFE <= value <= _MAX_SAFE:
            try:
                double = float(value)
            except OverflowError:
                return value
            if not canonical_only or format_float(double) == str(value):
                return double
        return value

    stack = [root]
    while stack:
        node = stack.pop()
        if type(node) is dict:
            for key, item in node.items():
                if type(item) in (dict, list):
                    stack.append(item)
                else:
                    node[key] = fix(item)
        elif type(node) is list:
            for index, item in enumerate(node):
                if type(item) in (dict, list):
                    stack.append(item)
                else:
                    node[index] = fix(item)
    return fix(root)


def scalar_text(text: str, limit: int | None = None) -> str:
    """``text`` cut to ``limit`` characters, lone surrogates spelled out as ``\\udXXX``.

    For text we did not write (handler messages, exception strings): it must be
    recordable as a document string whatever it contains.
    """
    if limit is not None:
        text = text[:limit]
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
