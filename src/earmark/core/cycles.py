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
        """The cycle's part of a budget id: its first day, like 2026-08-01."""
        return self.start.strftime("%Y-%m-%d")


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
