"""JSON at the edges: strict input for documents (HTTP bodies, CLI ``--params``) and output
that never fails on a deep document."""

from __future__ import annotations

import json
from typing import Any

import orjson

from domain.documents import MAX_BYTES, DocumentError, canonical_json
from domain.json_text import JSONTextError, parse_json

#: Raw input may carry whitespace the canonical form drops; beyond this it cannot fit.
MAX_RAW_BYTES = 4 * MAX_BYTES


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise DocumentError("invalid_params", "duplicate object key in JSON input")
        result[key] = value
    return result


def _no_constants(name: str) -> Any:
    raise DocumentError("invalid_params", f"{name} is not JSON")


def parse_document(raw: bytes | str, *, empty_is: dict[str, Any] | None = None) -> dict[str, Any]:
    """Parse one JSON object: no duplicate keys, no NaN/Infinity, valid UTF-8.

    The result still has to pass ``canonical_document`` (limits, safe integers,
    scalar values); this only makes sure nothing was silently lost in parsing.
    """
    if len(raw) > MAX_RAW_BYTES:
        raise DocumentError("document_too_large", f"JSON input is over {MAX_RAW_BYTES} bytes")
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise DocumentError("invalid_params", "JSON input is not valid UTF-8") from None
    if not raw.strip():
        if empty_is is not None:
            return dict(empty_is)
        raise DocumentError("invalid_params", "a JSON object is required")
    try:
        value = json.loads(raw, object_pairs_hook=_unique_keys, parse_constant=_no_constants)
    except RecursionError:
        value = _parse_deep(raw)  # deeper than the C parser goes: documents have no depth limit
    except json.JSONDecodeError as error:
        raise DocumentError(
            "invalid_params", f"malformed JSON at line {error.lineno} column {error.colno}"
        ) from None
    except ValueError:  # e.g. an integer over Python's 4,300-digit conversion limit
        raise DocumentError(
            "invalid_params", "JSON input has a number that cannot be read"
        ) from None
    if type(value) is not dict:
        raise DocumentError("invalid_params", "a document must be a JSON object")
    return value


def _parse_deep(raw: str) -> Any:
    try:
        return parse_json(raw)
    except JSONTextError as error:
        raise DocumentError("invalid_params", f"malformed JSON: {error}") from None


def render_json(value: dict[str, Any]) -> bytes:
    """Compact JSON of an answer; past orjson's nesting limit, the canonical writer."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        return canonical_json(value)
