"""The one time abstraction: every timestamp in the journal comes from a Clock."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Protocol


class Clock(Protocol):
    """Injected time. ``now`` is timezone-aware UTC; ``sleep`` waits on this clock's terms."""

    def now(self) -> datetime: ...

    def sleep(self, seconds: float) -> None: ...


def format_instant(moment: datetime) -> str:
    """RFC 3339 UTC with microseconds and a ``Z``: fixed width, so it sorts as text.

    ``isoformat`` (two thirds of ``strftime``'s time, on every event) pads years before
    1000 to four digits, which the C library's ``%Y`` does not."""
    if moment.tzinfo is not UTC:
        if moment.tzinfo is None:
            raise ValueError("instants must be timezone-aware")
        moment = moment.astimezone(UTC)
    return moment.isoformat(timespec="microseconds")[:-6] + "Z"  # "+00:00" -> "Z"


#: RFC 3339 ``date-time`` (section 5.6): a full date, a time with optional fraction, and a
#: ``Z`` or numeric offset. Nothing else is an instant here (no dates alone, no epochs).
_RFC3339 = re.compile(
    # ASCII digits only ([0-9], not \d: that takes every script's digits).
    r"^([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?"
    r"([Zz]|[+-][0-9]{2}:[0-9]{2})$"
)


_GREGORIAN_CYCLE_DAYS = 146_097  # 400 years


def parse_instant(text: object) -> datetime:
    """An RFC 3339 instant, any offset, as an aware UTC datetime, rounded *up* to the
    microsecond (the journal's precision), so ``>= since`` and ``< until`` compare
    exactly as the instants would. Anything else raises ValueError."""
    found = _RFC3339.fullmatch(text) if isinstance(text, str) else None
    if found is None:
        raise ValueError("not an RFC 3339 date-time (e.g. 2026-12-01T09:10:00Z)")
    year, month, day, hour, minute, second, fraction, offset = found.groups()
    digits = fraction or ""
    micros = int((digits + "000000")[:6])
    if len(digits) > 6 and int(digits[6:]) > 0:
        micros += 1  # a finer instant than the journal keeps: round up
    zone = UTC if offset in ("Z", "z") else _offset(offset)
    # A leap second (:60, any fraction) is read as the start of the next second: every
    # instant of the minute before it stays earlier, and the next minute's first is equal
    # (UTC as the journal keeps it has no leap seconds).
    leap = int(second) == 60
    if leap:
        micros = 0
    # Year 0000 is RFC 3339's too, which Python's dates lack: read 400 years (one whole cycle
    # of the Gregorian calendar, so the same days) later and taken back in UTC, where a
    # negative offset may bring it into year 1 (it was refused, found by a defect hunt).
    cycles = 1 if int(year) == 0 else 0
    fields = (int(year) + 400 * cycles, int(month), int(day), int(hour), int(minute))
    moment = datetime(*fields, min(int(second), 59), tzinfo=zone)
    try:
        # In UTC first: a leap second of 9999-12-31 at +01:00 is 23:00 UTC, no overflow.
        utc = moment.astimezone(UTC) + timedelta(seconds=leap, microseconds=micros)
        return utc - timedelta(days=_GREGORIAN_CYCLE_DAYS * cycles)
    except OverflowError:  # before year 1 or after 9999 in UTC: as early or as late as can be
        extreme = datetime.min if moment.year < 5000 else datetime.max
        return extreme.replace(tzinfo=UTC)


def _offset(text: str) -> timezone:
    sign = -1 if text[0] == "-" else 1
    hours, minutes = int(text[1:3]), int(text[4:6])
    if hours > 23 or minutes > 59:
        raise ValueError("the offset is out of range")
    return timezone(sign * timedelta(hours=hours, minutes=minutes))
