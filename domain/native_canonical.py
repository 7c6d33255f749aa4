"""The native path to RFC 8785 bytes: C-level checks, then orjson writes the whole document.

`native_canonical` returns the canonical bytes of a document only when it can vouch for
them, else ``None`` (the caller's slower, exact paths then decide, refusals included):

1. **Types, depth, key counts, size floor**, level by level without a Python loop over the
   values: `gc.get_referents` lists the values of every container of one level (a dict
   whose keys are all exact ``str`` yields its values only; any other dict also yields its
   keys, whose types are then checked too), ``set(map(type, ...))`` says which types occur,
   and only exact ``dict``, ``list``, ``str``, ``int``, ``float``, ``bool`` and ``None`` may.
   No hook of any value can run: only exact built-in containers are traversed, and types are
   hashed only once their metaclass is known to be ``type`` (a metaclass's ``__hash__`` or
   ``__eq__`` never runs).
2. **orjson** writes the document with ``OPT_SORT_KEYS | OPT_STRICT_INTEGER``: it refuses
   non-``str`` keys, lone surrogates and integers beyond ±(2**53 − 1) itself. Its string
   escapes are ECMAScript's, and its key order (UTF-8 bytes, i.e. code points) is RFC 8785's
   (UTF-16 code units) unless a key holds an astral character and another key one of
   U+E000..U+FFFF; then we give up.
3. **Floats**: orjson writes the shortest digits that round-trip, correctly rounded. That
   decimal is unique for every double (an exact tie between two shortest candidates cannot
   occur: see the comment below), so its digits are ECMAScript's; only the notation differs.
   All floats of the document are written once more on their own (no strings in between),
   where the few spellings ECMAScript does not use are found by plain substring searches:
   ``null`` (NaN, infinities), ``-0.0``, exponents ECMAScript writes in full (e-6, e+16..e+20,
   unsigned exponents of older orjson releases). Those documents are given up. Integral
   floats (``2.0``) are written ``2`` by removing ``.0`` before a delimiter in the document's
   bytes; the number of removals must equal the number of integral floats, which proves none
   was inside a string.
4. A once-per-process **calibration** runs the float rules of step 3 on ~4,400 doubles across
   the whole exponent range against the exact formatter: an orjson release that spelled any
   of them otherwise turns the float part of this path off.

`native_canonical_loaded` is the same path for a tree `orjson.loads` has just built (a parser's
result): step 1 has nothing to find there but the depth and key counts, found by a walk of
one pass per level that also gathers the floats.
"""

from __future__ import annotations

import gc
import math
import random
import re
from collections.abc import Callable
from itertools import chain, compress, repeat
from operator import is_
from typing import Any, Final, NamedTuple

import orjson


class Limits(NamedTuple):
    max_keys: int
    max_bytes: int
    max_depth: int


_OPTIONS: Final = orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER
_ALLOWED: Final = frozenset({dict, list, str, int, float, bool, type(None)})
#: orjson writes at most 254 levels; beyond that the slower paths decide.
_ORJSON_MAX_DEPTH: Final = 254
#: Values of one level looked at before giving up (a shared, exponential structure).
_MAX_VALUES: Final = 2_000_000
#: orjson reads an integer literal outside [-2**63, 2**64) as a float, of magnitude 2**63 or
#: more: no float that large from a text is vouched for (the exact path reads an integer).
_INTEGER_AS_FLOAT: Final = 2.0**63
_ASTRAL_LEADS: Final = (b"\xf0", b"\xf1", b"\xf2", b"\xf3", b"\xf4")

# Why orjson's digits are ECMAScript's (checked by the calibration and the property tests):
# both pick the fewest significant digits k such that some k-digit decimal reads back as the
# double x, and among those the one nearest x. A tie would need x = (s + 1/2)·10^q exactly with
# both neighbours reading back as x, so half an ulp of x is at least 10^q / 2 while x is a
# multiple of its ulp. For q >= 1, x = (2s + 1)·5^q·2^(q-1) has at most q - 1 factors of two,
# so its ulp is at most 2^(q-1) < 10^q; for q <= 0, x = (2s + 1) / (2^(1-q)·5^(-q)) needs an
# ulp of at most 2^(q-1) < 10^q. Either way no tie: the nearest shortest decimal is unique,
# whichever correct algorithm (Ryu, Schubfach, zmij, David Gay's) finds it.

#: Integral floats: ``.0`` directly before a delimiter (never in a float ECMAScript writes).
_INTEGRAL: Final = re.compile(rb"\.0(?=[,\]}])")
#: Positive exponents ECMAScript writes in full (below e+21), and unsigned ones.
_FOREIGN_POSITIVE: Final = re.compile(rb"e(?:[0-9]|\+(?:[0-9]|1[0-9]|20)[,\]])")
#: In a list of floats: digits 1-6 become "a", other digits "b", "]" becomes ",", so that
#: ``e-a,`` finds every exponent from e-1 to e-6 (ECMAScript writes those in full).
_EXPONENT_CLASSES: Final = bytes.maketrans(b"1234560789]", b"aaaaaabbbb,")

_float_reference: Callable[[float], str] | None = None
_floats_trusted: bool | None = None


def use_float_reference(formatter: Callable[[float], str]) -> None:
    """The exact ECMAScript formatter the calibration compares orjson's floats with."""
    global _float_reference, _floats_trusted
    _float_reference, _floats_trusted = formatter, None


def native_canonical(value: object, limits: Limits) -> bytes | None:
    """The canonical bytes of ``value``, or ``None`` when a slower path must decide."""
    floats = _vouch(value, limits)
    if floats is None:
        return None
    try:
        out = orjson.dumps(value, option=_OPTIONS)
    except orjson.JSONEncodeError:
        return None
    if not out.isascii() and utf16_order_may_differ(out):
        return None
    if floats:
        return _spell_floats(out, floats) if _float_rules_hold() else None
    return out


def native_canonical_loaded(value: dict[str, Any], limits: Limits) -> bytes | None:
    """`native_canonical` for a tree `orjson.loads` has just built and nothing has touched.

    Such a tree holds only exact built-ins, shares no container and holds no NaN or infinity
    (orjson refuses those literals), so `_vouch`'s type and size walk has nothing to find:
    only the depth, each object's key count and the floats (for their spelling) are looked
    at, by `_loaded_floats`. ``None`` means a slower path must decide, as in `native_canonical`.
    """
    try:
        out = orjson.dumps(value, option=_OPTIONS)
    except orjson.JSONEncodeError:  # an integer beyond ±(2**53 - 1), or too deep for orjson
        return None
    if not out.isascii() and utf16_order_may_differ(out):
        return None
    # Every member writes one ':' (strings may add more): few colons, no wide object.
    floats = _loaded_floats(value, limits, wide=out.count(b":") > limits.max_keys)
    if floats is None:
        return None
    if floats:
        # An integer literal orjson read as a float; the exact path refuses the integer.
        if max(floats) >= _INTEGER_AS_FLOAT or min(floats) <= -_INTEGER_AS_FLOAT:
            return None
        spelled = _spell_floats(out, floats) if _float_rules_hold() else None
        if spelled is None:
            return None
        out = spelled
    return out if len(out) <= limits.max_bytes else None


def _loaded_floats(root: dict[str, Any], limits: Limits, wide: bool) -> list[float] | None:
    """Every float of a tree `orjson.loads` built, or ``None`` past the depth or key limit.

    Level by level like `_vouch`, but with one pass per level: the types need no proof (exact
    built-ins only, so no code of theirs can run), and the walk ends
    at the first level without children (scalars have none) instead of looking for
    containers. ``wide``: some object may hold more than ``limits.max_keys`` members, so the
    objects of big levels are measured.
    """
    referents = gc.get_referents
    floats: list[float] = []
    level: list[Any] = [root]
    depth = 1  # of the values in ``level``
    while True:
        children = referents(*level)  # the values of its containers (their keys are all str)
        if not children:
            return floats
        # A dict's values are among the children: only a big level can hold a wide dict.
        big = wide and len(children) > limits.max_keys
        if big and max([len(c) for c in level if type(c) is dict], default=0) > limits.max_keys:
            return None
        floats += [child for child in children if type(child) is float]  # faster than compress
        level = children
        depth += 1
        if depth > limits.max_depth and any(map(isinstance, level, repeat((dict, list)))):
            return None


def _vouch(root: object, limits: Limits) -> list[float] | None:
    """Every float of ``root`` (with repeats) if its types, depth, key counts and size floor
    pass. The floor counts one byte per value plus every string's and key's characters, so a
    structure that shares objects (and would expand when written) stops before orjson runs."""
    max_depth = min(limits.max_depth, _ORJSON_MAX_DEPTH)
    referents = gc.get_referents
    floats: list[float] = []
    level: list[Any] = [root]
    kinds: list[type] = [dict]
    depth = size = 0
    while True:
        depth += 1  # the containers of ``level`` are at this depth
        if depth > max_depth:
            return None
        dicts = list(compress(level, map(is_, kinds, repeat(dict)))) if depth > 1 else level
        children = referents(*level)  # values (and non-str keys) of its containers
        size += len(children)
        if size > limits.max_bytes or len(children) > _MAX_VALUES:
            return None
        # A dict's values are among the children: only a big level can hold a wide dict.
        if len(children) > limits.max_keys and max(map(len, dicts), default=0) > limits.max_keys:
            return None
        kinds = list(map(type, children))
        # Hash the types only once their metaclass is known to be ``type`` (whose hash is
        # identity): a metaclass's own __hash__ or __eq__ never runs.
        if not all(map(is_, map(type, kinds), repeat(type))):
            return None
        present = set(kinds)
        if not present <= _ALLOWED:
            return None
        try:  # keys are exact str, or (listed among the children) exact int, float, ...
            size += sum(map(len, chain.from_iterable(dicts)))
        except TypeError:  # a key that is not a string: orjson would refuse it
            return None
        if str in present:
            size += sum(map(len, compress(children, map(is_, kinds, repeat(str)))))
        if float in present:
            floats += compress(children, map(is_, kinds, repeat(float)))
        if dict not in present and list not in present:
            return None if size > limits.max_bytes else floats
        level = children


def utf16_order_may_differ(out: bytes) -> bool:
    """Code-point and UTF-16 key order differ only between astral and U+E000..U+FFFF keys.

    ``out`` is compact JSON as orjson (or RFC 8785) writes it. A key is a string followed by
    ``:``; from a character inside a string, the string ends at the first quote not escaped
    (a quote inside a string is only ever written ``\\"``).
    """
    if out.isascii() or not any(lead in out for lead in _ASTRAL_LEADS):
        return False
    if b"\xee" not in out and b"\xef" not in out:
        return False
    return _in_a_key(out, _ASTRAL_LEADS) and _in_a_key(out, (b"\xee", b"\xef"))


def _in_a_key(out: bytes, leads: tuple[bytes, ...]) -> bool:
    """Does a UTF-8 lead byte of ``leads`` (only ever inside strings) occur in a key?"""
    find = out.find
    for lead in leads:
        start = find(lead)
        while start >= 0:
            end = find(b'"', start)
            while _escaped(out, end):
                end = find(b'"', end + 1)
            if out[end + 1] == 0x3A:  # ':'
                return True
            start = find(lead, end)
    return False


def _escaped(out: bytes, quote: int) -> bool:
    """Is the quote at ``quote`` preceded by an odd number of backslashes?"""
    before = quote
    while out[before - 1] == 0x5C:
        before -= 1
    return (quote - before) % 2 == 1


def _spell_floats(out: bytes, floats: list[float]) -> bytes | None:
    """``out`` with ECMAScript's spelling of ``floats`` (all of its floats), or ``None``."""
    written = orjson.dumps(floats)
    if b"n" in written or b"-0.0," in written or written.endswith(b"-0.0]"):
        return None  # null: NaN or an infinity; -0.0 is written 0
    exponents = written.count(b"e")
    if exponents:
        negative = written.count(b"e-")
        if negative and b"e-a," in written.translate(_EXPONENT_CLASSES):
            return None
        if exponents > negative and _FOREIGN_POSITIVE.search(written):
            return None
    integral = written.count(b".0,") + written.endswith(b".0]")
    if not integral:
        return out
    fixed, removed = _INTEGRAL.subn(b"", out)
    # Every integral float is one removal; any other removal was inside a string.
    return fixed if removed == integral else None


def _float_rules_hold() -> bool:
    global _floats_trusted
    if _floats_trusted is None:
        _floats_trusted = _float_reference is not None and _calibrate(_float_reference)
    return _floats_trusted


def calibration_sample() -> list[float]:
    """Doubles across the whole range: each decade's edges, neighbours, random mantissas."""
    rng = random.Random(8785)
    sample = [0.0, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 2.0**53, 0.1]
    for exponent in range(-323, 309):
        decade = float(f"1e{exponent}")
        sample += [decade, math.nextafter(decade, 0.0), decade * rng.uniform(1.0, 9.99)]
    sample += [float(n) for n in (1, 2, 16, 123, 10**15, 2**52 + 1)]
    sample += [rng.random() * 10.0 ** rng.randint(-30, 30) for _ in range(300)]
    sample = [x for x in sample if math.isfinite(x)]
    return sample + [-x for x in sample]


def _calibrate(reference: Callable[[float], str]) -> bool:
    """Does `_spell_floats` give the exact formatter's spelling (or give up) for the sample?

    Checked in groups: a group `_spell_floats` gives up on is checked value by value.
    """
    sample = calibration_sample()
    for start in range(0, len(sample), 64):
        group = sample[start : start + 64]
        verdict = _spelled_as(group, reference)
        if verdict is None:  # some value is given up on: look at each one
            verdict = all(_spelled_as([value], reference) is not False for value in group)
        if not verdict:
            return False
    return True


def _spelled_as(values: list[float], reference: Callable[[float], str]) -> bool | None:
    """True: spelled as the reference; False: spelled otherwise; None: given up."""
    spelled = _spell_floats(orjson.dumps({"x": values}), values)
    if spelled is None:
        return None
    return spelled == b'{"x":[' + ",".join(map(reference, values)).encode() + b"]}"
