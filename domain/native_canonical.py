"""The native path to RFC 8785 bytes: cheap checks, then orjson writes the whole document.

`native_canonical` returns the canonical bytes of a document only when it can vouch for
them, else ``None`` (the caller's slower, exact paths then decide, refusals included):

1. **Types, depth, key counts, size floor** (`_vouch`): a Python loop over each
   container's values, level by level, with identity tests of exact types only: ``dict``,
   ``list``, ``str``, ``int``, ``float``, ``bool`` and ``None`` pass. No hook of any value
   (nor of its type's metaclass) can run: only exact built-in containers are iterated, and
   nothing is hashed, compared or asked its length but exact built-ins. The keys of every
   object are joined in one C call (their characters for the size floor, and whether any
   holds an astral or a U+E000..U+FFFF character, see step 2).
2. **orjson** writes the document with ``OPT_SORT_KEYS | OPT_STRICT_INTEGER``: it refuses
   non-``str`` keys (subclasses too), lone surrogates and integers beyond ±(2**53 − 1)
   itself. Its string escapes are ECMAScript's, and its key order (UTF-8 bytes, i.e. code
   points) is RFC 8785's (UTF-16 code units) unless a key holds an astral character and
   another one of U+E000..U+FFFF; then we give up (the fragment path sorts those).
3. **Floats**: orjson writes the shortest digits that round-trip, correctly rounded. That
   decimal is unique for every double (an exact tie between two shortest candidates cannot
   occur: see the comment below), so its digits are ECMAScript's; only the notation differs.
   The spellings ECMAScript does not use are looked for in orjson's writing of the document
   itself, outside its strings (quote parity, with escaped quotes and backslashes blanked),
   not in the floats step 1 gathered, so a value another thread changed between the walk
   and the write is caught too: exponents ECMAScript writes in full (e-6, e+16..e+20,
   unsigned exponents of older orjson releases) and ``-0.0`` give the document up. Integral
   floats (``2.0``) are written ``2`` by removing the ``.0`` that ends a number outside
   every string; there must be as many as the walk gathered. NaN and the infinities (orjson
   writes ``null``) are found among the gathered floats; one put in by another thread after
   the walk is written ``null``: canonical bytes, of a value the document held for a moment
   as ``None``. Anything but the exact built-ins put in after the walk (a subclass, a
   dataclass, a date) is refused by orjson itself.
4. A once-per-process **calibration** runs the float rules of step 3 on ~4,400 doubles across
   the whole exponent range against the exact formatter: an orjson release that spelled any
   of them otherwise turns the float part of this path off.

`native_canonical_loaded` is the same path for a tree `orjson.loads` has just built from a
text (a parser's result): step 1 has nothing to find there but the depth, the key counts and
the floats. A text with few brackets and colons bounds the first two by itself; otherwise a
walk of slices decides them (`_loaded_within_limits`). The floats are not gathered: what
could be spelled unlike ECMAScript is found in orjson's writing and kept only outside the
strings (`_spell_found`); only when that cannot decide are they gathered (`_floats_of`).
Whether orjson dropped a duplicate key is proven by counting colons (`members_kept`).
"""

from __future__ import annotations

import gc
import math
import random
import re
from collections.abc import Callable
from itertools import accumulate, chain, repeat
from operator import and_
from typing import Any, Final, NamedTuple

import orjson


class Limits(NamedTuple):
    max_keys: int
    max_bytes: int
    max_depth: int


_OPTIONS: Final = orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER
#: For a document `_vouch` walked: anything but the exact built-ins it lets through (put in
#: by another thread after the walk) is refused, not written as orjson would.
_WRITE_VOUCHED: Final = (
    _OPTIONS
    | orjson.OPT_PASSTHROUGH_SUBCLASS
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
)
#: orjson writes at most 254 levels of containers; beyond that the slower paths decide.
_ORJSON_MAX_DEPTH: Final = 254
#: Values looked at (repeats included) before giving up on a shared, exponential structure.
_MAX_VALUES: Final = 8_000_000
#: Values of one level looked at together: their objects stay in the CPU's caches.
_SLICE: Final = 512
#: orjson reads an integer literal outside [-2**63, 2**64) as a float, of magnitude 2**63 or
#: more: no float that large from a text is vouched for (the exact path reads an integer).
_INTEGER_AS_FLOAT: Final = 2.0**63
_ASTRAL_LEADS: Final = (b"\xf0", b"\xf1", b"\xf2", b"\xf3", b"\xf4")
_HIGH_BMP_LEADS: Final = (b"\xee", b"\xef")
_ASTRAL: Final = re.compile("[\U00010000-\U0010ffff]")
_HIGH_BMP: Final = re.compile("[\ue000-\uffff]")

# Why orjson's digits are ECMAScript's (checked by the calibration and the property tests):
# both pick the fewest significant digits k such that some k-digit decimal reads back as the
# double x, and among those the one nearest x. A tie would need x = (s + 1/2)·10^q exactly with
# both neighbours reading back as x, so half an ulp of x is at least 10^q / 2 while x is a
# multiple of its ulp. For q >= 1, x = (2s + 1)·5^q·2^(q-1) has at most q - 1 factors of two,
# so its ulp is at most 2^(q-1) < 10^q; for q <= 0, x = (2s + 1) / (2^(1-q)·5^(-q)) needs an
# ulp of at most 2^(q-1) < 10^q. Either way no tie: the nearest shortest decimal is unique,
# whichever correct algorithm (Ryu, Schubfach, zmij, David Gay's) finds it.

#: Integral floats: ``.0`` directly before a delimiter (never in a float ECMAScript writes).
INTEGRAL: Final = re.compile(rb"\.0(?=[,\]}])")
#: The pieces of a text between those (a bound method: no Python frame per call).
_cut_at_points: Final = INTEGRAL.split
#: orjson releases before 3.11 write positive exponents unsigned (``1e21``): RFC 8785 never.
_UNSIGNED_EXPONENTS: Final = b"+" not in orjson.dumps(1e300)
#: Exponents ECMAScript writes in full, before a delimiter: e-1..e-6 and e+0..e+20 (and any
#: unsigned one: ECMAScript always signs). One pattern with a literal start, searched for in C.
_IN_FULL: Final = re.compile(
    rb"e(?:-[1-6]|\+(?:[0-9]|1[0-9]|20))[,\]}]" + (rb"|e[0-9]" if _UNSIGNED_EXPONENTS else b"")
)
#: Does a text, orjson's writing, hold an exponent ECMAScript writes otherwise (a match, else
#: ``None``)? Text inside strings may match too: a false alarm only costs the caller's slower
#: path. The one place these rules are written (a bound method: no Python frame per call).
exponent_in_full: Final = _IN_FULL.search

_float_reference: Callable[[float], str] | None = None
_floats_trusted: bool | None = None

_referents: Final = gc.get_referents


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
        # Written a moment after the walk: what another thread changed in between is
        # refused by orjson (a subclass, a dataclass, a date) or found in its writing.
        out = orjson.dumps(value, option=_WRITE_VOUCHED)
    except orjson.JSONEncodeError:
        return None
    if floats and not _float_rules_hold():
        return None
    return _spell_floats(out, floats)


def native_canonical_loaded(value: dict[str, Any], text: bytes, limits: Limits) -> bytes | None:
    """`native_canonical` for a tree `orjson.loads` has just built from ``text``.

    Such a tree holds only exact built-ins, shares no container and holds no NaN or infinity
    (orjson refuses those literals), so no type or size walk has anything to find: what is
    left is whether orjson dropped a member (`members_kept`), the depth, each object's key
    count and the floats' spelling. A text of at most ``max_keys`` colons holds no wider
    object (every member writes one; strings may add more) and one of at most ``max_depth``
    brackets nests no deeper; any other is walked (`_loaded_within_limits`). The floats are
    spelled by `_spell_found`, or, when it cannot decide, from the floats themselves. ``None``
    means a slower path must decide, as in `native_canonical`.
    """
    try:
        out = orjson.dumps(value, option=_OPTIONS)
    except orjson.JSONEncodeError:  # an integer beyond ±(2**53 - 1), or too deep for orjson
        return None
    colons = members_kept(text, out)
    if colons is None or not _float_rules_hold():
        return None
    small = colons <= limits.max_keys and text.count(b"[") + text.count(b"{") <= limits.max_depth
    if not small and not _loaded_within_limits(value, limits):
        return None
    spelled = _spell_found(out)
    if spelled is None:  # a spelling to look at closer: the floats themselves decide
        floats = _floats_of(value)
        if not floats:
            spelled = out  # what looked like one was inside strings
        # An integer literal orjson read as a float; the exact path refuses the integer.
        elif max(floats) >= _INTEGER_AS_FLOAT or min(floats) <= -_INTEGER_AS_FLOAT:
            return None
        else:
            spelled = _spell_floats(out, floats)
    if spelled is None or len(spelled) > limits.max_bytes:
        return None
    if not spelled.isascii() and utf16_order_may_differ(spelled):
        return None
    return spelled


def members_kept(text: bytes, written: bytes) -> int | None:
    """The colons of ``written`` if orjson kept every member of ``text``, else ``None``.

    ``written`` is orjson's writing of what it read from ``text``; orjson keeps the last of
    duplicate keys. The text's colons are its members' separators plus the colons inside
    its strings (literal, or escaped as ``\\u003a``); the writing has one separator per
    member kept plus the same strings' colons (orjson never escapes ':'; sorting keys and
    dropping ``.0`` move none). So the counts are equal exactly when no member was dropped:
    a dropped member takes at least its separator with it, and escapes are never
    undercounted (a ``\\\\u003a`` that is not an escape only makes the counts differ).
    """
    colons = text.count(b":")
    if b"\\" in text and b"\\u" in text:  # one byte is found much faster than two
        colons += text.count(b"\\u003a") + text.count(b"\\u003A")
    return colons if colons == written.count(b":") else None


# -- step 1 for any object ----------------------------------------------------------------------


def _vouch(  # builtins bound as locals: the loop below runs once per value
    root: object,
    limits: Limits,
    _type: type[type] = type,
    _len: Callable[[Any], int] = len,
    _str: type[str] = str,
    _int: type[int] = int,
    _bool: type[bool] = bool,
    _float: type[float] = float,
    _dict: type[dict[Any, Any]] = dict,
    _list: type[list[Any]] = list,
) -> list[float] | None:
    """Every float of ``root`` (with repeats) if its types, depth, key counts and size floor
    pass, level by level.

    A Python loop over each container's values: they lie together in memory, so each value
    is read once, from the cache line its neighbours brought in. (Passes of C-level
    primitives over whole levels, ``map(type, ...)``, ``bytes.translate`` selectors and
    ``itertools.compress``, were measured no faster on the largest documents and three
    times slower on small ones: they read every value several times, level by level, across
    the whole heap.) Only identity tests of exact types: no hook of any value, nor of its
    metaclass, can run. The floor counts one byte per value plus every string's and key's
    characters, checked as it grows, so a structure that shares objects (and would expand
    when written) stops before orjson runs.
    """
    if _type(root) is not _dict:
        return None
    max_depth = min(limits.max_depth, _ORJSON_MAX_DEPTH)
    max_keys, max_bytes = limits.max_keys, limits.max_bytes
    floats: list[float] = []
    add = floats.append
    dicts: list[dict[Any, Any]] = []
    keep = dicts.append
    size = seen = 0
    level: list[Any] = [root]  # the containers at ``depth``
    depth = 1
    while level:
        if depth > max_depth or seen > _MAX_VALUES:
            return None
        children: list[Any] = []
        push = children.append
        for container in level:
            count = _len(container)
            size += count
            if size > max_bytes:
                return None
            if _type(container) is _dict:
                if count > max_keys:
                    return None
                keep(container)
                container = container.values()
            for item in container:
                kind = _type(item)
                if kind is _str:
                    size += _len(item)
                elif kind is _int or kind is _bool or item is None:
                    pass
                elif kind is _float:
                    add(item)
                elif kind is _dict or kind is _list:
                    push(item)
                else:
                    return None
        seen += _len(children)
        level = children
        depth += 1
    try:  # orjson refuses keys that are str subclasses itself
        keys = "".join(chain.from_iterable(dicts))
    except TypeError:  # a key that is no string at all
        return None
    if size + len(keys) > max_bytes:
        return None
    if not keys.isascii() and _ASTRAL.search(keys) and _HIGH_BMP.search(keys):
        return None  # code-point and UTF-16 order may differ: the fragment path sorts
    return floats


# -- step 1 for a tree orjson has just read -----------------------------------------------------


def _floats_of(root: dict[str, Any]) -> list[float]:
    """Every float of a small tree `orjson.loads` built: a Python walk (the calls of a level
    walk cost more on a few dozen values); its depth and widths are known to be within the
    limits."""
    floats: list[float] = []
    add = floats.append
    stack: list[Any] = [root]
    push = stack.append
    while stack:
        container = stack.pop()
        for item in container.values() if type(container) is dict else container:
            kind = type(item)
            if kind is float:
                add(item)
            elif kind is dict or kind is list:
                push(item)
    return floats


def _loaded_within_limits(root: dict[str, Any], limits: Limits) -> bool:
    """Does a tree `orjson.loads` built nest at most ``max_depth`` levels, and hold no object
    of more than ``max_keys`` members?

    Level by level, a slice of `_SLICE` values at a time, each slice's subtrees before the
    next slice (what a slice's values point to is then still in the cache), with no type to
    prove (exact built-ins only, so no code of theirs can run): one `gc.get_referents` call
    per slice, no Python step per value. A dict's members are among its slice's children, so only
    a slice with more than ``max_keys`` children can hold a wide dict, and only its dicts
    are measured. A container deeper than ``max_depth`` is looked for only past it.
    """
    stack: list[tuple[list[Any], int]] = [([root], 1)]
    while stack:
        level, depth = stack.pop()
        if len(level) > _SLICE:
            starts = range(len(level) - (len(level) - 1) % _SLICE - 1, -1, -_SLICE)
            stack += [(level[start : start + _SLICE], depth) for start in starts]
            continue
        if depth > limits.max_depth and any(map(isinstance, level, repeat((dict, list)))):
            return False
        children = _referents(*level)  # the values of its containers (and some dicts' keys)
        if not children:
            continue
        if len(children) > limits.max_keys and _widest(level, limits.max_keys) > limits.max_keys:
            return False
        stack.append((children, depth + 1))
    return True


def _widest(level: list[Any], max_keys: int) -> int:
    """The most members any dict of ``level`` (exact built-ins) has, when over ``max_keys``."""
    try:  # a slice of containers and strings only (of objects, say) is measured in C
        if max(map(len, level)) <= max_keys:
            return 0
    except TypeError:  # a number, bool or None among them: the dicts are picked out
        pass
    return max([len(item) for item in level if type(item) is dict], default=0)


# -- step 2: code-point and UTF-16 key order ----------------------------------------------------


def utf16_order_may_differ(out: bytes) -> bool:
    """Code-point and UTF-16 key order differ only between astral and U+E000..U+FFFF keys.

    ``out`` is compact JSON as orjson (or RFC 8785) writes it. A key is a string followed by
    ``:``; from a character inside a string, the string ends at the first quote not escaped
    (a quote inside a string is only ever written ``\\"``).
    """
    if out.isascii():
        return False
    if not (b"\xf0" in out or b"\xf1" in out or b"\xf2" in out or b"\xf3" in out or b"\xf4" in out):
        return False
    if b"\xee" not in out and b"\xef" not in out:
        return False
    return _in_a_key(out, _ASTRAL_LEADS) and _in_a_key(out, _HIGH_BMP_LEADS)


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


# -- step 3: ECMAScript's spelling of the floats ------------------------------------------------


def _spell_floats(out: bytes, floats: list[float]) -> bytes | None:
    """``out`` with ECMAScript's spelling of its floats, or ``None``.

    ``floats`` are the document's floats as `_vouch` gathered them (all of them, with
    repeats); ``out`` is orjson's writing of the document a moment later. The spellings
    ECMAScript does not use are looked for in ``out`` itself, so a float another thread put
    in between the two reads is caught as well (found by a defect hunt: ``-0.0`` and ``2.0``
    were written as such): an exponent ECMAScript writes in full gives the document up
    unless it lies inside a string, and integral floats lose their ``.0`` where it ends a
    number outside every string (`_without_point_zeros`; ``-0.0`` gives up), and there must
    be as many as the walk gathered. Strings are told apart by quote parity once escaped
    quotes and backslashes are blanked (`_bare_quotes`). NaN and the infinities, which orjson
    writes ``null``, are found among the gathered floats.
    """
    if floats:
        written = orjson.dumps(floats)
        if b"n" in written:
            return None
        integral = written.count(b".0,") + written.endswith(b".0]")
    else:
        integral = 0
    quotes = _bare_quotes(out)
    if _outside_strings(quotes, exponent_in_full):
        return None
    return _without_point_zeros(out, quotes, integral)


def _bare_quotes(out: bytes) -> bytes:
    """``out`` (compact JSON) with each escaped backslash and escaped quote blanked: the same
    length, and its quotes are exactly its strings' ends (``\\\\"`` ends a string,
    ``\\"`` does not). The text itself when it holds no backslash (the usual case)."""
    if b"\\" not in out:
        return out
    return out.replace(b"\\\\", b"__").replace(b'\\"', b"__")


def _outside_strings(out: bytes, search: Callable[..., re.Match[bytes] | None]) -> bool:
    """Does ``search`` (a bound ``Pattern.search`` of no quote or backslash) match ``out``
    outside every string?

    ``out`` is compact JSON whose quotes are all strings' ends (`_bare_quotes`), so a match
    lies inside a string exactly when an odd number of quotes comes before it; the quotes
    are counted from one match to the next, in C."""
    found = search(out)
    quotes, counted = 0, 0
    while found is not None:
        start = found.start()
        quotes += out.count(b'"', counted, start)
        if not quotes & 1:
            return True
        counted = start
        found = search(out, found.end())
    return False


def _spell_found(out: bytes) -> bytes | None:
    """`_spell_floats` for a tree orjson read from a text, without gathering its floats.

    What could be a float spelled unlike ECMAScript is looked for in ``out`` itself: any
    ``e+`` (e+16..e+20 are written in full, and a float of 2**63 or more may be an integer
    literal orjson read as one) gives up (strings too: a false alarm only costs the floats'
    own look), and so does e-1..e-6 outside a string (quote parity tells strings apart, see
    `_bare_quotes`); integral floats lose their ``.0`` (`_without_point_zeros`).
    """
    if _UNSIGNED_EXPONENTS or (b"+" in out and b"e+" in out):
        return None
    quotes = _bare_quotes(out)
    if _outside_strings(quotes, exponent_in_full):  # its e+ rules: already stricter here
        return None
    return _without_point_zeros(out, quotes, None)


def _without_point_zeros(out: bytes, quotes: bytes, integral: int | None) -> bytes | None:
    """``out`` without the ``.0`` that ends each integral float, or ``None`` for a ``-0.0``
    or when there are not ``integral`` of them (``None``: any number).

    ``quotes`` is `_bare_quotes` of ``out``. ``out`` is cut at every ``.0`` before a
    delimiter, in one C call; a cut with an even number of quotes before it lies outside
    every string: it ends an integral float, whose ``.0`` is dropped (``-0.0`` gives up:
    RFC 8785 writes ``0``); one inside a string keeps it. No Python step per cut unless
    some lie inside strings.
    """
    pieces = _cut_at_points(out)
    if len(pieces) == 1:
        return out if not integral else None
    # Whether each cut is inside a string: the parity of the quotes before it (blanking
    # changes no '.0' before a delimiter, so both texts are cut at the same places).
    bare = pieces if quotes is out else _cut_at_points(quotes)
    inside = list(map(and_, accumulate(map(bytes.count, bare[:-1], repeat(b'"'))), repeat(1)))
    in_strings = any(inside)
    # The text before each cut that ends a number (outside every string).
    numbers = (
        [p for p, q in zip(pieces, inside, strict=False) if not q] if in_strings else pieces[:-1]
    )
    if integral is not None and len(numbers) != integral:
        return None  # a float the walk did not see (or saw otherwise)
    if any(map(bytes.endswith, numbers, repeat(b"-0"))):
        return None  # -0.0 is written 0
    if not in_strings:
        return b"".join(pieces)
    kept = [b".0" if quoted else b"" for quoted in inside]
    return b"".join(chain.from_iterable(zip(pieces, [*kept, b""], strict=True)))


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
    for size in (64, 8):  # long and short lists of floats
        for start in range(0, len(sample), size):
            group = sample[start : start + size]
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
