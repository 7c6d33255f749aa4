"""JSON at the edges: strict input for documents (HTTP bodies, CLI ``--params``) and output
that never fails on a deep document."""

from __future__ import annotations

import gc
import json
from typing import Any, final

import orjson

from domain.documents import (
    MAX_BYTES,
    MAX_DEPTH,
    DocumentError,
    canonical_document,
    canonical_json,
    canonical_loaded_document,
)
from domain.native_canonical import members_kept

#: Raw input may carry whitespace the canonical form drops; beyond this it cannot fit.
MAX_RAW_BYTES = 4 * MAX_BYTES

#: Every digit becomes "0", everything else "x": a run of 19 digits is a plain substring.
_DIGITS_AS_ZERO = bytes(0x30 if 0x30 <= c <= 0x39 else 0x78 for c in range(256))
#: orjson reads an integer outside [-2**63, 2**64) as a float: -9223372036854775809 has only
#: 19 digits, so text with a run of 19 takes the strict path (which reads an integer).
_LONG_INTEGER = b"0" * 19


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise DocumentError("invalid_params", "duplicate object key in JSON input")
        result[key] = value
    return result


def _no_constants(name: str) -> Any:
    raise DocumentError("invalid_params", f"{name} is not JSON")


def _too_deep() -> DocumentError:
    return DocumentError("invalid_params", f"JSON input nests deeper than {MAX_DEPTH} levels")


def parse_document(raw: bytes | str, *, empty_is: dict[str, Any] | None = None) -> dict[str, Any]:
    """Parse one JSON object: no duplicate keys, no NaN/Infinity, valid UTF-8, at most
    ``MAX_DEPTH`` levels deep (decisions P45).

    The result still has to pass ``canonical_document`` (limits, safe integers,
    scalar values); this only makes sure nothing was silently lost in parsing.
    """
    value = _parse(raw, empty_is, MAX_RAW_BYTES)
    if type(value) is not dict:
        raise DocumentError("invalid_params", "a document must be a JSON object")
    _check_depth(value)
    return value


def parse_value(raw: bytes | str, *, max_bytes: int | None = MAX_RAW_BYTES) -> Any:
    """One JSON value of any type, read as strictly as `parse_document` reads an object (no
    key twice, no NaN/Infinity, valid UTF-8, at most ``MAX_DEPTH`` levels), at most
    ``max_bytes`` long (``None``: no limit). For files an auditor checks (a receipt, an
    export's manifest: ``None``, as it grows with the journal), whose own checks then name
    what is wrong with their shape."""
    value = _parse(raw, None, max_bytes)
    _check_depth(value)
    return value


def _parse(raw: bytes | str, empty_is: dict[str, Any] | None, max_bytes: int | None) -> Any:
    if max_bytes is not None and len(raw) > max_bytes:
        raise DocumentError("document_too_large", f"JSON input is over {max_bytes} bytes")
    value = _parse_fast(raw)
    return _parse_strict(raw, empty_is) if value is None else value


def parse_canonical_document(
    raw: bytes | str, *, empty_is: dict[str, Any] | None = None
) -> tuple[dict[str, Any], bytes]:
    """``parse_document(raw)`` and its ``canonical_document`` bytes: the same value, bytes and
    refusals as calling the two, in one orjson read and one write when the text allows it.

    The tree orjson reads needs no type walk; what the text could still hide, a duplicate key
    orjson dropped, is ruled out by the colon count (`members_kept`): both are
    `canonical_loaded_document`'s. Anything not vouched for is decided by the two calls
    themselves, so the answer, and every refusal's code, message and path, is theirs.
    """
    if len(raw) <= MAX_RAW_BYTES:
        loaded = _load(raw)
        if loaded is not None:
            data, value = loaded
            canonical = canonical_loaded_document(value, data)
            if canonical is not None:
                return value, canonical
    value = parse_document(raw, empty_is=empty_is)
    return value, canonical_document(value)


@final
class ParsedDocument:
    """A document read from JSON text with its canonical bytes, made in one pass
    (:func:`parse_canonical_document`): what the HTTP routes and CLI ``--params`` hand to
    ``Application.run`` / ``submit`` so the params are not canonicalised again (decisions
    F132). It exists only by parsing, so its value and bytes always agree; read-only."""

    __slots__ = ("_canonical", "_value")
    _value: dict[str, Any]
    _canonical: bytes

    def __init__(self, raw: bytes | str, *, empty_is: dict[str, Any] | None = None) -> None:
        value, canonical = parse_canonical_document(raw, empty_is=empty_is)
        object.__setattr__(self, "_value", value)
        object.__setattr__(self, "_canonical", canonical)

    def __init_subclass__(cls, **kwargs: object) -> None:
        # A subclass could answer other bytes than its parse made: run/submit trust these.
        raise TypeError("ParsedDocument cannot be subclassed")

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("a ParsedDocument is read-only")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("a ParsedDocument is read-only")

    def __reduce__(self) -> tuple[type[ParsedDocument], tuple[bytes]]:
        """Copied and pickled by parsing its canonical bytes again, never by setting its
        slots: the same bytes and an equal value (a ``1.0`` reads back as ``1``)."""
        return (ParsedDocument, (self._canonical,))

    @property
    def value(self) -> dict[str, Any]:
        return self._value

    @property
    def canonical(self) -> bytes:
        return self._canonical


def _load(raw: bytes | str) -> tuple[bytes, dict[str, Any]] | None:
    """The text's bytes and orjson's reading of them, if it is an object."""
    try:
        data = raw.encode() if isinstance(raw, str) else raw
        value = orjson.loads(data)
    except (UnicodeEncodeError, orjson.JSONDecodeError):
        return None
    return (data, value) if type(value) is dict else None


def _parse_fast(raw: bytes | str) -> Any:
    """orjson's reading when it provably lost nothing, else ``None`` (the strict path decides)."""
    loaded = _load(raw)
    if loaded is None:
        return None
    data, value = loaded
    if _LONG_INTEGER in data.translate(_DIGITS_AS_ZERO):
        return None
    try:
        written = orjson.dumps(value)
    except orjson.JSONEncodeError:
        return None
    return value if members_kept(data, written) is not None else None


def _parse_strict(raw: bytes | str, empty_is: dict[str, Any] | None) -> Any:
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise DocumentError("invalid_params", "JSON input is not valid UTF-8") from None
    # Only a body of no bytes at all is "no body": whitespace alone is not JSON text.
    if not raw and empty_is is not None:
        return dict(empty_is)
    if not raw.strip():
        raise DocumentError("invalid_params", "a JSON object is required")
    try:
        return json.loads(raw, object_pairs_hook=_unique_keys, parse_constant=_no_constants)
    except RecursionError:
        raise _too_deep() from None  # far deeper than any document may be
    except json.JSONDecodeError as error:
        raise DocumentError(
            "invalid_params", f"malformed JSON at line {error.lineno} column {error.colno}"
        ) from None
    except ValueError:  # e.g. an integer over Python's 4,300-digit conversion limit
        raise DocumentError(
            "invalid_params", "JSON input has a number that cannot be read"
        ) from None


def _check_depth(value: Any) -> None:
    """Level by level (no recursion): the values just parsed are exact built-in types."""
    level: list[Any] = [value]
    depth = 1
    while True:
        children = gc.get_referents(*level)
        kinds = set(map(type, children))
        if dict not in kinds and list not in kinds:
            return
        depth += 1
        if depth > MAX_DEPTH:
            raise _too_deep()
        level = children


def render_json(value: dict[str, Any]) -> bytes:
    """Compact JSON of an answer; past orjson's nesting limit, the canonical writer."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        return canonical_json(value)
