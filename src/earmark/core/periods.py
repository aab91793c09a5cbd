"""Calendar periods a budget resets on: a day, a week, a month, a quarter or a year as a
person in a timezone means it (issue 34's Period), as windows [start, end) in UTC.

A period starts at the local midnight of its first day: a day in America/New_York is 23
hours long when the clocks go forward and 25 when they go back, and a month is 28 to 31
days. The anchor says which day starts the period: for a week the ISO weekday (1 Monday to
7 Sunday), for a month, a quarter or a year the day of the month (1 to 31), a month too
short for the anchor starting its period on its last day instead (anchored on the 31st,
February's period starts on the 28th, or the 29th in a leap year). Anchor 0 means the
first (Monday, the 1st). Quarters start in January, April, July and October, years in
January.

The windows are core.cycles.Cycle, the accounts' billing cycles' type: a cycle is the
month-long period in UTC anchored on a day up to the 28th; a budget's period is the same
idea in the budget's own calendar.
"""

from __future__ import annotations

import calendar
import enum
import functools
import importlib.resources
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from earmark import limits
from earmark.core.cycles import Cycle


class Period(enum.IntEnum):
    """How often a budget resets; the numbers are the wire enum's (UNSPECIFIED: never)."""

    NEVER = 0
    DAY = 1
    WEEK = 2
    MONTH = 3
    QUARTER = 4
    YEAR = 5


# Months a period of each length spans.
_MONTHS = {Period.MONTH: 1, Period.QUARTER: 3, Period.YEAR: 12}


class BadCalendar(ValueError):
    """A period, timezone or anchor that names no calendar; the message names the field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True, slots=True)
class Calendar:
    """When a budget's periods start: its period, its IANA timezone ("" is UTC) and its
    anchor (0: the first weekday or day)."""

    period: Period
    timezone: str = ""
    anchor: int = 0

    def zone(self) -> ZoneInfo:
        return zone_named(self.timezone or "UTC")


# An IANA name: parts of letters, digits, "_", "+" and "-", joined by "/" (no "..", no
# leading "/", nothing a path could climb out with).
_ZONE_NAME = re.compile(r"[A-Za-z0-9_+-]+(?:/[A-Za-z0-9_+-]+)*")


@functools.lru_cache(maxsize=limits.timezones_cached_max)
def zone_named(name: str) -> ZoneInfo:
    """The IANA timezone name names, from the tzdata package's copy of the database when it
    is installed (the server's dependency), so that every sidecar draws the same boundaries
    whatever its host holds ("localtime", a host's own zone, is no IANA name); from the
    host's database otherwise. ZoneInfoNotFoundError for a name that names no zone (a
    folder of zones, like "America", included)."""
    if not _ZONE_NAME.fullmatch(name):
        raise ZoneInfoNotFoundError(name)
    try:
        database = importlib.resources.files("tzdata.zoneinfo")
    except ModuleNotFoundError:
        try:
            return ZoneInfo(name)
        except (OSError, ValueError) as error:
            raise ZoneInfoNotFoundError(name) from error
    found = database.joinpath(*name.split("/"))
    try:
        with found.open("rb") as data:
            return ZoneInfo.from_file(data, key=name)
    except (OSError, ValueError) as error:
        raise ZoneInfoNotFoundError(name) from error


def checked(period: int, timezone: str, anchor: int) -> Calendar:
    """The calendar the three fields name, or BadCalendar naming the field that names none."""
    try:
        kind = Period(period)
    except ValueError:
        raise BadCalendar("period", f"{period} is no Period") from None
    if len(timezone) > limits.timezone_length_max:
        raise BadCalendar("timezone", f"longer than {limits.timezone_length_max} characters")
    if timezone:
        try:
            zone_named(timezone)
        except ZoneInfoNotFoundError:
            raise BadCalendar("timezone", f"{timezone!r} is no IANA timezone") from None
    most = 7 if kind == Period.WEEK else 31
    if kind in (Period.NEVER, Period.DAY):
        most = 0
    if not 0 <= anchor <= most:
        raise BadCalendar(
            "period_anchor",
            f"{anchor} is not from 0 to {most} for {kind.name.lower()} periods",
        )
    return Calendar(kind, timezone, anchor)


def _midnight(day: date, zone: ZoneInfo) -> datetime:
    """The first instant of day in zone, in UTC. A midnight the clocks skip (a zone whose
    change is at 00:00) is the moment of the change, the day's first instant."""
    return datetime.combine(day, time(), zone).astimezone(UTC)


def _month_day(year: int, month: int, anchor: int) -> date:
    """The anchor day of a month, or its last day when the month is shorter."""
    year += (month - 1) // 12
    month = (month - 1) % 12 + 1
    return date(year, month, min(max(anchor, 1), calendar.monthrange(year, month)[1]))


def _first_day(local: date, cal: Calendar) -> date:
    """The first local day of the period local is in."""
    if cal.period == Period.DAY:
        return local
    if cal.period == Period.WEEK:
        weekday = cal.anchor or 1
        return local - timedelta(days=(local.isoweekday() - weekday) % 7)
    months = _MONTHS[cal.period]
    # The period's first month: the last month on the period's grid (January plus a whole
    # number of periods) whose anchor day is not after local.
    index = local.year * 12 + local.month - 1
    index -= index % months
    start = _month_day(index // 12, index % 12 + 1, cal.anchor)
    if start > local:
        index -= months
        start = _month_day(index // 12, index % 12 + 1, cal.anchor)
    return start


def _next_first_day(first: date, cal: Calendar) -> date:
    if cal.period == Period.DAY:
        return first + timedelta(days=1)
    if cal.period == Period.WEEK:
        return first + timedelta(days=7)
    months = _MONTHS[cal.period]
    index = first.year * 12 + first.month - 1 + months
    # The next period's month on the grid (a short month's start moved to its last day,
    # which is still in that month).
    return _month_day(index // 12, index % 12 + 1, cal.anchor)


def period_at(at: datetime, cal: Calendar) -> Cycle | None:
    """The period containing `at`, [start, end) in UTC; None for a budget that never
    resets."""
    if cal.period == Period.NEVER:
        return None
    zone = cal.zone()
    local = at.astimezone(zone).date()
    first = _first_day(local, cal)
    start = _midnight(first, zone)
    if at < start:
        # `at` is in the hour a zone repeats or skips around its midnight: the day before.
        first = _first_day(first - timedelta(days=1), cal)
        start = _midnight(first, zone)
    end = _midnight(_next_first_day(first, cal), zone)
    assert start <= at < end, (at, start, end)
    return Cycle(start=start, end=end)
