"""Billing cycles: calendar months in UTC by default, or months from an anchor day."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from earmark.core.cycles import Cycle, cycle_at


@pytest.mark.parametrize(
    ("at", "anchor", "start", "end"),
    [
        (
            datetime(2026, 8, 31, 23, 59, 59, tzinfo=UTC),
            1,
            datetime(2026, 8, 1, tzinfo=UTC),
            datetime(2026, 9, 1, tzinfo=UTC),
        ),
        (
            datetime(2026, 9, 1, tzinfo=UTC),
            1,
            datetime(2026, 9, 1, tzinfo=UTC),
            datetime(2026, 10, 1, tzinfo=UTC),
        ),
        (
            datetime(2026, 12, 20, tzinfo=UTC),
            15,
            datetime(2026, 12, 15, tzinfo=UTC),
            datetime(2027, 1, 15, tzinfo=UTC),
        ),
        (
            datetime(2027, 1, 3, tzinfo=UTC),
            15,
            datetime(2026, 12, 15, tzinfo=UTC),
            datetime(2027, 1, 15, tzinfo=UTC),
        ),
        (
            datetime(2026, 3, 1, 1, tzinfo=timezone(timedelta(hours=2))),
            1,
            datetime(2026, 2, 1, tzinfo=UTC),
            datetime(2026, 3, 1, tzinfo=UTC),
        ),
    ],
)
def test_cycle_contains_its_moment(
    at: datetime, anchor: int, start: datetime, end: datetime
) -> None:
    """The cycle of a moment starts at or before it and ends after it, in UTC."""
    cycle = cycle_at(at, anchor)
    assert (start, end) == (cycle.start, cycle.end)
    assert cycle.start <= at < cycle.end


def test_cycle_key_is_its_first_day() -> None:
    """A cycle names itself by its first day."""
    assert "2026-08-01" == cycle_at(datetime(2026, 8, 15, tzinfo=UTC)).key()


def test_a_period_begun_during_a_day_is_keyed_to_the_minute() -> None:
    """A period that starts at 10:30 UTC names itself with its minute."""
    cycle = Cycle(datetime(2026, 12, 1, 10, 30, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC))
    assert "20261201T1030Z" == cycle.key()


@pytest.mark.parametrize(
    ("start", "end", "at", "rolled"),
    [
        # Whole months: the same day of each later month, however long the months are.
        (
            datetime(2026, 11, 15, tzinfo=UTC),
            datetime(2026, 12, 15, tzinfo=UTC),
            datetime(2027, 2, 20, tzinfo=UTC),
            (datetime(2027, 2, 15, tzinfo=UTC), datetime(2027, 3, 15, tzinfo=UTC)),
        ),
        # A yearly plan.
        (
            datetime(2026, 1, 10, tzinfo=UTC),
            datetime(2027, 1, 10, tzinfo=UTC),
            datetime(2027, 1, 10, tzinfo=UTC),
            (datetime(2027, 1, 10, tzinfo=UTC), datetime(2028, 1, 10, tzinfo=UTC)),
        ),
        # Anything else: by its length.
        (
            datetime(2026, 11, 15, tzinfo=UTC),
            datetime(2026, 11, 22, tzinfo=UTC),
            datetime(2026, 12, 1, tzinfo=UTC),
            (datetime(2026, 11, 29, tzinfo=UTC), datetime(2026, 12, 6, tzinfo=UTC)),
        ),
        # A moment inside the period: the period itself.
        (
            datetime(2026, 11, 15, tzinfo=UTC),
            datetime(2026, 12, 15, tzinfo=UTC),
            datetime(2026, 11, 20, tzinfo=UTC),
            (datetime(2026, 11, 15, tzinfo=UTC), datetime(2026, 12, 15, tzinfo=UTC)),
        ),
    ],
)
def test_a_period_rolls_forward_back_to_back(
    start: datetime, end: datetime, at: datetime, rolled: tuple[datetime, datetime]
) -> None:
    """The guess for a period the provider has not confirmed follows the last one."""
    cycle = Cycle(start, end).rolled_to(at)
    assert rolled == (cycle.start, cycle.end)
    assert cycle.contains(at)
