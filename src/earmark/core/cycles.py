"""Billing cycles: the month-long window an account's usage of a feature counts in.

A cycle starts at 00:00 UTC on the anchor day of a month and ends at the same moment one
month later; with anchor day 1 the cycles are calendar months. Anchor days go up to 28,
so that every month has the day and cycles never shift with the month's length.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from earmark import limits


@dataclass(frozen=True, slots=True)
class Cycle:
    """[start, end) in UTC."""

    start: datetime
    end: datetime

    def key(self) -> str:
        """The cycle's part of a budget id: its first day, like 2026-08-01, for a cycle that
        starts at midnight UTC (every anchor-day cycle, and the provider's periods as a
        rule); one that starts during a day (a plan changed at 10:00 opens a period then)
        adds its minute in ISO 8601's basic form, like 20260801T1000Z, so that it does not
        share the id of a period that began earlier that day."""
        start = self.start.astimezone(UTC)
        if start == start.replace(hour=0, minute=0, second=0, microsecond=0):
            return start.strftime("%Y-%m-%d")
        return start.strftime("%Y%m%dT%H%MZ")

    def contains(self, at: datetime) -> bool:
        return self.start <= at < self.end

    def rolled_to(self, at: datetime) -> Cycle:
        """The cycle containing `at` when periods as long as this one follow it back to
        back: the guess made for a period the provider has not yet confirmed."""
        assert self.start < self.end
        if at < self.end:
            return self
        start, end = self.start.astimezone(UTC), self.end.astimezone(UTC)
        months = (end.year - start.year) * 12 + end.month - start.month
        if start.day <= 28 and start.replace(year=end.year, month=end.month) == end:
            # A period of whole months (Kinde's monthly and yearly plans): the next ones
            # start on the same day of the month, however long the months are.
            cycle = Cycle(start, end)
            while not at < cycle.end:
                cycle = Cycle(cycle.end, _shifted(cycle.end, months))
            return cycle
        length = end - start
        steps = (at - end) // length + 1
        return Cycle(start=start + steps * length, end=end + steps * length)


def _shifted(at: datetime, months: int) -> datetime:
    """`at` so many months later, on the same day (at most the 28th) and time."""
    index = at.month - 1 + months
    return at.replace(year=at.year + index // 12, month=index % 12 + 1)


def _month_start(year: int, month: int, day: int) -> datetime:
    # Months past December roll into the next year.
    year += (month - 1) // 12
    month = (month - 1) % 12 + 1
    return datetime(year, month, day, tzinfo=UTC)


def cycle_at(at: datetime, anchor_day: int = 1) -> Cycle:
    """The cycle containing `at`."""
    assert 1 <= anchor_day <= limits.cycle_anchor_day_max
    at = at.astimezone(UTC)
    start = _month_start(at.year, at.month, anchor_day)
    if at < start:
        start = _month_start(at.year, at.month - 1, anchor_day)
    return Cycle(start=start, end=_month_start(start.year, start.month + 1, anchor_day))


def cycle_budget_id(account: str, feature: str, cycle: Cycle) -> str:
    """The id of an account's budget for feature in cycle, ACCOUNT/FEATURE/YYYY-MM-DD: known
    without reading the plan, so that a Reserve's permission is checked before anything is
    read or written for it."""
    return f"{account}/{feature}/{cycle.key()}"
