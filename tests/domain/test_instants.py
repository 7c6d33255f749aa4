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
