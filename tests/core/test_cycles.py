"""Billing cycles: calendar months in UTC by default, or months from an anchor day."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from earmark.core.cycles import cycle_at


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
