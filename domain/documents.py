"""RFC 8785 canonical documents: strict validation and exact canonical bytes (DW-DOC-1..3).

One module, one thing: a document's rules and its canonical bytes. Three paths give the same
bytes and the same refusals: a native one (`domain.native_canonical`: C-level type checks,
then orjson writes everything), a fragment path (a Python walk that formats every float
itself) and the exact, iterative reference path. A faster path only ever answers when it can
vouch for its bytes; anything else, every refusal included, is decided by the next one.
`canonical_loaded_document` is the native path for a tree orjson has just read (parsers only).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Final

import orjson

from domain.errors import InvalidRequest
from domain.native_canonical import Limits as _Limits
from domain.native_canonical import (
    native_canonical,
    native_canonical_loaded,
    use_float_reference,
)

MAX_KEYS: Final = 1024
MAX_BYTES: Final = 1_048_576
MAX_SAFE_INTEGER: Final = 2**53 - 1
#: Nesting: the root object is level 1, each object or array inside adds one (decisions P45).
MAX_DEPTH: Final = 128
#: Journal envelopes ({at, context, data}) wrap documents, so they get room for one
#: full-size document plus its surroundings; everything else about them is identical.
ENVELOPE_MAX_BYTES: Final = 4 * MAX_BYTES
#: Envelopes nest a document a few levels down (``data.params``: two); eight to spare.
ENVELOPE_MAX_DEPTH: Final = MAX_DEPTH + 8

_DOCUMENT: Final = _Limits(MAX_KEYS, MAX_BYTES, MAX_DEPTH)
_ENVELOPE: Final = _Limits(MAX_KEYS, ENVELOPE_MAX_BYTES, ENVELOPE_MAX_DEPTH)
#: Answers and records read back (written before the depth limit existed): no limits.
_UNLIMITED: Final = _Limits(2**62, 2**62, 2**62)

#: orjson refuses nesting deeper than 254 levels; past this depth the reference path writes.
_FAST_MAX_DEPTH: Final = 200
#: orjson range-checks integers itself (exactly ±(2**53 - 1)) and, as a second line of
#: defence, refuses subclasses; it sorts keys by code point, so objects whose UTF-16 order
#: differs are written separately (see `_utf16_ordered`).
_ORJSON_OPTIONS: Final = (
    orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER | orjson.OPT_PASSTHROUGH_SUBCLASS
)
#: Error paths stay short: keys are cut at this length, deep paths keep only both ends.
_PATH_KEY_MAX: Final = 64
_PATH_MAX_SEGMENTS: Final = 32

_INVALID: Final = "invalid_params"
_TOO_LARGE: Final = "document_too_large"

#: ECMAScript JSON.stringify escapes: the two-character forms, then `\u00xx` for the
#: remaining C0 controls. Nothing else (not "/", DEL or U+2028) is escaped.
_ESCAPES: Final[dict[int, str]] = {
    **{c: f"\\u{c:04x}" for c in range(0x20)},
    ord('"'): '\\"',
    ord("\\"): "\\\\",
    ord("\b"): "\\b",
    ord("\f"): "\\f",
    ord("\n"): "\\n",
    ord("\r"): "\\r",
    ord("\t"): "\\t",
}

#: type.__name__'s own descriptor: reads the C-level name, so no metaclass code can run.
_TYPE_NAME: Final[Any] = type.__dict__["__name__"]

_Segment = str | int


class DocumentError(InvalidRequest):
    """A document that is not canonicalisable; the message names a JSON path, never a value.

    An `InvalidRequest` (bad input, its own codes): ``except InvalidRequest`` catches every
    ``invalid_params``, a typed operation's params refused in process (an InvalidRequest)
    and the same refusal read from an HTTP answer (this class) alike (found by a defect
    hunt, stop 36: over HTTP it escaped such a handler)."""

    CODES: Final = frozenset({_INVALID, _TOO_LARGE})

    def __init__(self, code: str, message: str, path: str = "$") -> None:
        if code not in self.CODES:
            raise ValueError(f"DocumentError code must be one of {sorted(self.CODES)}")
        super().__init__(f"{message} at {path}", code)
        self.path = path


class _RejectError(Exception):
    """A violation found by the reference walk; ``located`` errors get the current JSON path."""

    def __init__(self, code: str, message: str, *, located: bool = True) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.located = located


class _FallbackError(Exception):
    """The fast path cannot finish (too deep, or the document is invalid): the reference decides."""


# -- public API ---------------------------------------------------------------------------------


def sha256_digest(canonical: bytes) -> str:
    """``sha256:<hex>`` of canonical bytes: how params, outcomes and Versions are named."""
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


def canonical_document(value: object) -> bytes:
    """Validate ``value`` as a BlackOps document and return its RFC 8785 canonical UTF-8 bytes.

    Native path first, then the fragment path (a walk that checks exact types and formats
    floats, then orjson). Anything neither can vouch for goes to
    `canonical_document_reference`, so every error (and its path) is decided by one walk only.
    """
    return _canonical(value, _DOCUMENT)


def canonical_loaded_document(value: object, text: bytes) -> bytes | None:
    """`canonical_document`'s bytes for a tree `orjson.loads` has just built from ``text``,
    or ``None``.

    For parsers only: the tree must be orjson's reading of ``text``, untouched (exact
    built-ins, nothing shared), which spares the type walk. ``None`` (a limit may be
    exceeded, or a spelling is not vouched for) means `canonical_document` decides,
    refusals included. Whether orjson dropped a duplicate key is the caller's to prove.
    """
    if type(value) is not dict:
        return None
    return native_canonical_loaded(value, text, _DOCUMENT)


def canonical_document_reference(value: object) -> bytes:
    """Same contract as `canonical_document`, written iteratively without orjson."""
    return _canonical_reference(value, _DOCUMENT)


def canonical_document_fragments(value: object) -> bytes:
    """Same contract as `canonical_document`, without the native path (for the tests)."""
    return _canonical_fragments(value, _DOCUMENT)


def canonical_envelope(value: object) -> bytes:
    """The journal's own records: every document rule, but up to ``ENVELOPE_MAX_BYTES`` and
    ``ENVELOPE_MAX_DEPTH``, so nothing deeper can ever be journaled."""
    return _canonical(value, _ENVELOPE)


def canonical_json(value: object) -> bytes:
    """Every value rule, no size, key or depth limit: for answers built from documents
    already accepted (HTTP bodies, CLI output) and for records read back, at any depth."""
    return _canonical(value, _UNLIMITED)


def _canonical(value: object, limits: _Limits) -> bytes:
    _check_root(value)
    out = native_canonical(value, limits)
    if out is not None:
        return _check_output(out, limits)
    return _canonical_fragments(value, limits)


def _canonical_fragments(value: object, limits: _Limits) -> bytes:
    _check_root(value)
    try:
        out = orjson.dumps(_FastPath(limits).object(value, 1), option=_ORJSON_OPTIONS)
    except (_FallbackError, _RejectError, orjson.JSONEncodeError, RecursionError):
        # RecursionError: the caller was already deep in its own stack; the reference is flat.
        return _canonical_reference(value, limits)
    return _check_output(out, limits)


def _canonical_reference(value: object, limits: _Limits) -> bytes:
    _check_root(value)
    text = _ReferenceWriter(limits).write(value)
    # Every string was checked for lone surrogates, so strict UTF-8 encoding cannot fail.
    return _check_output(text.encode("utf-8"), limits)


# -- shared rules -------------------------------------------------------------------------------


def _check_root(value: object) -> None:
    if type(value) is not dict:
        raise DocumentError(_INVALID, "document root must be a JSON object")


def _too_large(limits: _Limits) -> str:
    return f"canonical document exceeds {limits.max_bytes} bytes"


def _check_output(out: bytes, limits: _Limits) -> bytes:
    if len(out) > limits.max_bytes:
        raise DocumentError(_TOO_LARGE, _too_large(limits))
    return out


def _unsupported(value: object) -> _RejectError:
    name = _TYPE_NAME.__get__(type(value))
    return _RejectError(_INVALID, f"unsupported type {name!r}: only exact JSON built-ins")


def _check_int(value: int) -> None:
    if not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
        raise _RejectError(_INVALID, "integer outside the safe range ±(2**53 - 1)")


def _utf8_size(text: str) -> int:
    """UTF-8 length of a string; rejects lone surrogates (not Unicode scalar values)."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise _RejectError(_INVALID, "string contains a lone surrogate") from None


def _utf16_key(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def format_float(value: float) -> str:
    """ECMAScript Number::toString of a finite double (RFC 8785 §3.2.2.3).

    repr and ECMAScript both pick the shortest round-tripping digits; they only differ in
    where they switch to exponent notation and how they spell it, which is fixed up here.
    """
    text = repr(value)
    if text.endswith(".0"):  # integral and |x| < 1e16: fixed notation in both
        return "0" if value == 0 else text[:-2]  # -0.0 is written 0
    if "e" in text:
        return _exponent_repr_to_es(text)
    if "n" in text:  # "nan", "inf", "-inf"
        raise _RejectError(_INVALID, "number must be finite (no NaN or Infinity)")
    return text  # fixed notation with a fraction: already identical


def _exponent_repr_to_es(text: str) -> str:
    mantissa, _, exp = text.partition("e")
    exponent = int(exp)
    if exponent >= 21 or exponent < -6:
        # Exponent notation in both; ECMAScript never zero-pads the exponent.
        return f"{mantissa}e{'+' if exponent > 0 else '-'}{abs(exponent)}"
    # 1e-6 <= |x| < 1e-4 or 1e16 <= |x| < 1e21: ECMAScript writes these in full.
    sign = "-" if mantissa.startswith("-") else ""
    digits = mantissa.lstrip("-").replace(".", "")
    if exponent < 0:
        return f"{sign}0.{'0' * (-exponent - 1)}{digits}"
    return sign + digits + "0" * (exponent + 1 - len(digits))


# Size floors: fewest bytes a container adds beyond the 1 byte its parent already counted for
# it (every value takes at least one byte). Key characters and string lengths are added by
# the callers. Summed over a document they never exceed its canonical length.


def _object_floor(members: int) -> int:
    # "{}" or "{" + members * ('"":' + value + "," or "}"), minus the parent's byte.
    return 5 * members if members else 1


def _array_floor(items: int) -> int:
    # "[]" or "[" + items * (value + "," or "]"), minus the parent's byte.
    return 2 * items if items else 1


def _render_path(segments: list[_Segment]) -> str:
    """JSONPath-style location, e.g. ``$.items[3].name``; very deep paths keep both ends."""
    if len(segments) > _PATH_MAX_SEGMENTS:
        head, tail = segments[:8], segments[8 - _PATH_MAX_SEGMENTS :]
        return _render_segments("$", head) + _render_segments("…", tail)
    return _render_segments("$", segments)


def _render_segments(start: str, segments: list[_Segment]) -> str:
    parts = [start]
    for segment in segments:
        if isinstance(segment, int):
            parts.append(f"[{segment}]")
            continue
        shown = segment if len(segment) <= _PATH_KEY_MAX else segment[:_PATH_KEY_MAX] + "…"
        if shown.isascii() and shown.isidentifier():
            parts.append(f".{shown}")
        else:
            parts.append(f"[{json.dumps(shown)}]")
    return "".join(parts)


# -- fast path: vouch for a document, then let orjson write it ---------------------------------


class _FastPath:
    """Recursive validating copy for orjson: floats become pre-formatted `orjson.Fragment`.

    It never reports an error itself: anything it cannot vouch for raises `_FallbackError`
    and the reference walk decides. ``size`` is a running lower bound of the output, so a
    shared sub-tree (a DAG that expands exponentially) is abandoned before it is materialised.
    No cycle tracking: a cycle exceeds the depth limit. ``Any`` is deliberate: the walk
    narrows with ``type(v) is X``, which mypy cannot follow through a local.
    """

    __slots__ = ("limits", "max_depth", "size")

    def __init__(self, limits: _Limits) -> None:
        self.limits = limits
        self.max_depth = min(limits.max_depth, _FAST_MAX_DEPTH)  # the root is depth 1
        self.size = 0

    def object(self, obj: Any, depth: int) -> Any:
        if depth > self.max_depth or len(obj) > self.limits.max_keys:
            raise _FallbackError
        self._grow(_object_floor(len(obj)))  # a huge input is refused before it is walked
        chars = 0
        ascii_keys = True
        out: dict[str, Any] = {}
        for key, value in obj.items():
            if type(key) is not str:
                raise _FallbackError
            if not key.isascii():
                ascii_keys = False
            chars += len(key)
            kind = type(value)
            if kind is str:
                chars += len(value)
            elif kind is float:
                value = orjson.Fragment(format_float(value))
            elif kind is not int and kind is not bool and value is not None:
                value = self._child(value, depth)
            out[key] = value
        self._grow(chars)
        return out if ascii_keys else _utf16_ordered(out)

    def array(self, items: Any, depth: int) -> Any:
        if depth > self.max_depth:
            raise _FallbackError
        self._grow(_array_floor(len(items)))
        chars = 0
        out: list[Any] = []
        append = out.append
        for value in items:
            kind = type(value)
            if kind is str:
                chars += len(value)
            elif kind is float:
                value = orjson.Fragment(format_float(value))
            elif kind is not int and kind is not bool and value is not None:
                value = self._child(value, depth)
            append(value)
        self._grow(chars)
        return out

    def _child(self, value: Any, depth: int) -> Any:
        kind = type(value)
        if kind is dict:
            return self.object(value, depth + 1)
        if kind is list:
            return self.array(value, depth + 1)
        raise _FallbackError

    def _grow(self, size: int) -> None:
        self.size += size
        if self.size > self.limits.max_bytes:
            raise _FallbackError


def _utf16_ordered(obj: dict[str, Any]) -> Any:
    """Keep ``obj`` for orjson's code-point sort unless RFC 8785's UTF-16 order differs.

    They differ only between astral characters and U+E000..U+FFFF; such an object is written
    here in UTF-16 order and embedded as a Fragment, out of reach of OPT_SORT_KEYS.
    """
    keys = sorted(obj, key=_utf16_key)
    if keys == sorted(obj):
        return obj
    members = (orjson.dumps(k) + b":" + orjson.dumps(obj[k], option=_ORJSON_OPTIONS) for k in keys)
    return orjson.Fragment(b"{" + b",".join(members) + b"}")


# -- reference path: iterative writer, no orjson, no recursion ---------------------------------


class _Frame:
    """One open container of the reference writer."""

    __slots__ = ("container", "ident", "keys", "position", "segment")

    def __init__(self, container: Any, ident: int, keys: list[str] | None) -> None:
        self.container = container
        self.ident = ident
        self.keys = keys  # None for arrays
        self.position = 0
        self.segment: _Segment = ""  # key or index of the member being written


class _ReferenceWriter:
    """Explicit-stack validating writer: any depth, and the one place errors are decided.

    ``ancestors`` holds the ids of open containers, so a cycle is refused where it closes
    while a shared, acyclic sub-tree is simply written again. ``size`` is a running lower
    bound of the output that stops an exponentially shared DAG early.
    """

    __slots__ = ("ancestors", "limits", "out", "size", "stack")

    def __init__(self, limits: _Limits) -> None:
        self.limits = limits
        self.size = 0
        self.ancestors: set[int] = set()
        self.out: list[str] = []
        self.stack: list[_Frame] = []

    def write(self, root: Any) -> str:
        try:
            self._open(root)
            while self.stack:
                self._step(self.stack[-1])
        except _RejectError as reject:
            located = [frame.segment for frame in self.stack] if reject.located else []
            raise DocumentError(reject.code, reject.message, _render_path(located)) from None
        return "".join(self.out)

    def _grow(self, amount: int) -> None:
        self.size += amount
        if self.size > self.limits.max_bytes:
            # Size belongs to the whole document, so it is reported at the root.
            raise _RejectError(_TOO_LARGE, _too_large(self.limits), located=False)

    def _step(self, frame: _Frame) -> None:
        container, position = frame.container, frame.position
        if position == len(container):
            self.stack.pop()
            self.ancestors.discard(frame.ident)
            self.out.append("]" if frame.keys is None else "}")
            return
        frame.position = position + 1
        if position:
            self.out.append(",")
        if frame.keys is None:
            frame.segment = position
            item = container[position]
        else:
            key = frame.segment = frame.keys[position]
            self.out.append(_quote(key) + ":")
            item = container[key]
        self._value(item)

    def _open(self, container: Any) -> None:
        ident = id(container)
        if ident in self.ancestors:
            raise _RejectError(_INVALID, "document contains a cycle")
        if len(self.stack) >= self.limits.max_depth:
            raise _RejectError(
                _INVALID, f"document nests deeper than {self.limits.max_depth} levels"
            )
        if type(container) is dict:
            keys = _sorted_keys(container, self.limits.max_keys)
            self._grow(_object_floor(len(keys)) + sum(map(len, keys)))
            self.out.append("{")
        else:
            keys = None
            self._grow(_array_floor(len(container)))
            self.out.append("[")
        self.ancestors.add(ident)
        self.stack.append(_Frame(container, ident, keys))

    def _value(self, item: Any) -> None:
        kind = type(item)
        if kind is str:
            self._grow(_utf8_size(item) + 1)
            self.out.append(_quote(item))
        elif kind is int:
            _check_int(item)
            self.out.append(str(item))
        elif kind is float:
            self.out.append(format_float(item))
        elif kind is dict or kind is list:
            self._open(item)
        elif kind is bool:
            self.out.append("true" if item else "false")
        elif item is None:
            self.out.append("null")
        else:
            raise _unsupported(item)


def _sorted_keys(obj: dict[Any, Any], max_keys: int) -> list[str]:
    """Check the keys of ``obj`` and return them in RFC 8785 (UTF-16 code unit) order."""
    if len(obj) > max_keys:
        raise _RejectError(_TOO_LARGE, f"object has more than {max_keys} keys")
    for key in obj:
        if type(key) is not str:
            raise _RejectError(_INVALID, "object key must be a string")
        _utf8_size(key)
    return sorted(obj, key=_utf16_key)


def _quote(text: str) -> str:
    return '"' + text.translate(_ESCAPES) + '"'


use_float_reference(format_float)
