"""Instants as the journal writes them (domain/clock.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.clock import format_instant, parse_instant

ZONES = st.builds(
    timezone, st.integers(-23 * 60 + 1, 23 * 60 - 1).map(lambda m: timedelta(minutes=m))
)


@given(st.datetimes(min_value=datetime(1001, 1, 2), timezones=st.just(UTC) | ZONES))
def test_an_instant_is_utc_with_microseconds_and_a_z(moment: datetime) -> None:
    text = format_instant(moment)
    assert text == moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert len(text) == 27 and parse_instant(text) == moment


def test_years_before_1000_keep_the_fixed_width() -> None:
    assert format_instant(datetime(999, 12, 31, 23, 59, 59, 5, tzinfo=UTC)) == (
        "0999-12-31T23:59:59.000005Z"
    )


def test_a_naive_datetime_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        format_instant(datetime(2026, 12, 6, 12, 0))


@pytest.mark.parametrize(
    "text",
    [
        "٢٠١٦-01-01T00:00:00Z",
        "２０１６-01-01T00:00:00Z",
        "2016-01-01T00:00:0٠Z",
        "2016-01-01T00:00:00+0१:00",
    ],
)
def test_only_ascii_digits_are_rfc_3339(text: str) -> None:
    """Python's \\d takes every script's digits; RFC 3339's are ASCII (found by a hunt)."""
    with pytest.raises(ValueError, match="RFC 3339"):
        parse_instant(text)


def test_a_leap_second_is_the_start_of_the_next_second() -> None:
    """Every instant of the second before a leap second stays earlier than it (it was read
    as :59, so an instant at 23:59:59.5 fell on the wrong side of since and until)."""
    leap = parse_instant("2016-12-31T23:59:60Z")
    assert leap == datetime(2017, 1, 1, tzinfo=UTC)
    assert parse_instant("2016-12-31T23:59:60.5Z") == leap
    assert parse_instant("2016-12-31T23:59:59.5Z") < leap
    assert parse_instant("9999-12-31T23:59:60Z") == datetime.max.replace(tzinfo=UTC)


def test_a_leap_second_with_an_offset_is_taken_in_utc() -> None:
    """At the year 9999 edge, the extra second added before converting overflowed to the
    largest instant (found by review)."""
    assert parse_instant("9999-12-31T23:59:60+01:00") == datetime(9999, 12, 31, 23, tzinfo=UTC)


def test_year_zero_is_an_instant_too() -> None:
    """RFC 3339's ``date-fullyear`` is any four digits; Python's dates start at year 1, so
    0000 was refused, even at an offset that puts it in year 1 in UTC (found by a defect hunt,
    stop 37). Before year 1 in UTC it is as early as can be, as 10000 is as late."""
    assert parse_instant("0000-12-31T23:30:00-01:00") == datetime(1, 1, 1, 0, 30, tzinfo=UTC)
    earliest = datetime.min.replace(tzinfo=UTC)
    for text in ("0000-01-01T00:00:00Z", "0000-02-29T12:00:00Z", "0000-12-31T23:59:60Z"):
        assert parse_instant(text) == earliest, text
    assert parse_instant("0000-12-31T23:59:60-00:01") == datetime(1, 1, 1, 0, 1, tzinfo=UTC)
    with pytest.raises(ValueError, match="day is out of range"):
        parse_instant("0000-02-30T00:00:00Z")  # no such day, in year 0 as in any other
