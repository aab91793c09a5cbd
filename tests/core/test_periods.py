"""Calendar periods as a person in a timezone means them: days of 23 and 25 hours across a
change of daylight saving time, months anchored on the 31st through February, weeks from
Monday, quarters and years; each period follows the last with no gap."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from earmark.core.cycles import Cycle
from earmark.core.periods import BadCalendar, Calendar, Period, checked, period_at

NEW_YORK = "America/New_York"


def utc(year: int, month: int, day: int, hour: int = 0) -> datetime:
    return datetime(year, month, day, hour, tzinfo=UTC)


def local(zone: str, year: int, month: int, day: int, hour: int = 0) -> datetime:
    """That local time in zone, as an instant in UTC."""
    return datetime(year, month, day, hour, tzinfo=ZoneInfo(zone)).astimezone(UTC)


def hours(cycle: Cycle | None) -> float:
    assert cycle is not None
    return (cycle.end - cycle.start) / timedelta(hours=1)


def test_a_new_york_day_is_23_hours_in_march_and_25_in_november() -> None:
    """2026's clocks go forward on 8 March and back on 1 November in New York: those days
    are 23 and 25 hours long, each from local midnight to local midnight."""
    day = Calendar(Period.DAY, NEW_YORK)
    march = period_at(local(NEW_YORK, 2026, 3, 8, 12), day)
    november = period_at(local(NEW_YORK, 2026, 11, 1, 12), day)
    assert Cycle(local(NEW_YORK, 2026, 3, 8), local(NEW_YORK, 2026, 3, 9)) == march
    assert Cycle(local(NEW_YORK, 2026, 11, 1), local(NEW_YORK, 2026, 11, 2)) == november
    assert (23.0, 25.0, 24.0) == (
        hours(march),
        hours(november),
        hours(period_at(local(NEW_YORK, 2026, 7, 4, 12), day)),
    )


def test_resets_at_is_right_just_before_and_at_the_boundary() -> None:
    """A microsecond before local midnight the period ends at it; at it, the next one
    starts there."""
    day = Calendar(Period.DAY, NEW_YORK)
    boundary = local(NEW_YORK, 2026, 11, 2)
    before = period_at(boundary - timedelta(microseconds=1), day)
    after = period_at(boundary, day)
    assert before is not None
    assert after is not None
    assert (boundary, boundary) == (before.end, after.start)


def test_a_month_anchored_on_the_31st_starts_on_februarys_last_day() -> None:
    """Anchored on the 31st, February's period starts on the 28th, or on the 29th in 2028,
    a leap year, and March's on the 31st again."""
    month = Calendar(Period.MONTH, "", 31)
    assert [
        Cycle(utc(2026, 1, 31), utc(2026, 2, 28)),
        Cycle(utc(2026, 2, 28), utc(2026, 3, 31)),
        Cycle(utc(2028, 2, 29), utc(2028, 3, 31)),
        Cycle(utc(2026, 4, 30), utc(2026, 5, 31)),
    ] == [
        period_at(utc(2026, 2, 15), month),
        period_at(utc(2026, 3, 1), month),
        period_at(utc(2028, 3, 30, 23), month),
        period_at(utc(2026, 5, 1), month),
    ]


def test_a_week_anchored_on_monday_starts_at_local_midnight() -> None:
    """A Wednesday's week, in Tokyo, runs from Monday 00:00 to the next Monday 00:00 there;
    anchor 0 is Monday too, and anchor 7 weeks start on Sundays."""
    wednesday = local("Asia/Tokyo", 2026, 12, 2, 9)
    monday = local("Asia/Tokyo", 2026, 11, 30)
    expected = Cycle(monday, monday + timedelta(days=7))
    sunday = local("Asia/Tokyo", 2026, 11, 29)
    assert [expected, expected, Cycle(sunday, sunday + timedelta(days=7))] == [
        period_at(wednesday, Calendar(Period.WEEK, "Asia/Tokyo", anchor)) for anchor in (1, 0, 7)
    ]


def test_quarters_and_years_start_on_their_grid() -> None:
    """Quarters start in January, April, July and October; years in January; both on the
    anchor day."""
    assert [
        Cycle(utc(2026, 10, 1), utc(2027, 1, 1)),
        Cycle(utc(2026, 7, 15), utc(2026, 10, 15)),
        Cycle(utc(2026, 1, 1), utc(2027, 1, 1)),
        Cycle(utc(2025, 1, 15), utc(2026, 1, 15)),
    ] == [
        period_at(utc(2026, 12, 2), Calendar(Period.QUARTER)),
        period_at(utc(2026, 10, 2), Calendar(Period.QUARTER, "", 15)),
        period_at(utc(2026, 12, 2), Calendar(Period.YEAR)),
        period_at(utc(2026, 1, 14), Calendar(Period.YEAR, "", 15)),
    ]


def test_a_budget_without_a_period_never_resets() -> None:
    """Period unspecified: no window."""
    assert period_at(utc(2026, 12, 2), Calendar(Period.NEVER)) is None


@pytest.mark.parametrize(
    ("period", "timezone", "anchor", "field"),
    [
        (9, "", 0, "period"),
        (Period.DAY, "Mars/Olympus_Mons", 0, "timezone"),
        (Period.DAY, "../etc/passwd", 0, "timezone"),
        (Period.DAY, "x" * 65, 0, "timezone"),
        (Period.DAY, "", 1, "period_anchor"),
        (Period.WEEK, "", 8, "period_anchor"),
        (Period.MONTH, "", 32, "period_anchor"),
        (Period.YEAR, "", -1, "period_anchor"),
    ],
)
def test_what_names_no_calendar_is_refused_naming_the_field(
    period: int, timezone: str, anchor: int, field: str
) -> None:
    """An unknown period, a timezone that is not IANA's, and an anchor outside its
    period's days are refused, each naming its field."""
    with pytest.raises(BadCalendar) as refused:
        checked(period, timezone, anchor)
    assert field == refused.value.field


ZONES = ["UTC", NEW_YORK, "Europe/London", "Australia/Lord_Howe", "America/Santiago",
         "Asia/Kathmandu", "Pacific/Apia"]  # fmt: skip


@given(
    at=st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1)),
    zone=st.sampled_from(ZONES),
    period=st.sampled_from([p for p in Period if p != Period.NEVER]),
    anchor=st.integers(0, 31),
)
def test_periods_contain_their_instant_and_follow_each_other(
    at: datetime, zone: str, period: Period, anchor: int
) -> None:
    """Any instant is in its period; the period is its own start's; the next period
    starts where it ends; and it starts on a local day's first instant."""
    most = {Period.DAY: 0, Period.WEEK: 7}.get(period, 31)
    cal = checked(period, zone, min(anchor, most))
    instant = at.replace(tzinfo=UTC)
    found = period_at(instant, cal)
    assert found is not None
    following = period_at(found.end, cal)
    assert following is not None
    start_local = found.start.astimezone(ZoneInfo(zone))
    first_instant = datetime.combine(start_local.date(), datetime.min.time(), ZoneInfo(zone))
    assert (True, found, found.end) == (
        found.start <= instant < found.end,
        period_at(found.start, cal),
        following.start,
    )
    assert first_instant.astimezone(UTC) == found.start
