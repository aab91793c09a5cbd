"""A budget's period ending (core.resets): the closed period keeps its counters, the budget
starts again at zero, and a changed calendar starts at the old period's end."""

from __future__ import annotations

from datetime import UTC, datetime

from earmark.core import resets
from earmark.core.model import Budget, PeriodTotals
from earmark.core.periods import Calendar, Period


def at(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[arg-type,misc]


def monthly(**fields: object) -> Budget:
    budget = Budget("b", 1_000, "tokens", used=300, held=200, open_reservations=2)
    budget.period = Period.MONTH
    budget.period_start, budget.period_end = at(2026, 12, 1), at(2027, 1, 1)
    for name, value in fields.items():
        setattr(budget, name, value)
    return budget


def test_a_period_not_yet_ended_does_not_roll() -> None:
    """Before its end a period stays, and nothing is closed."""
    budget = monthly()
    assert (None, 0, 300) == (resets.roll(budget, at(2026, 12, 31, 23)), budget.period_no, 300)


def test_an_ended_period_closes_with_its_counters_and_the_next_starts_at_zero() -> None:
    """At its end the period closes with its counters and noticed thresholds go; the next
    is the month containing now."""
    budget = monthly(noticed_bps=(8000,))
    closed = resets.roll(budget, at(2027, 1, 1))
    expected = PeriodTotals("b", 0, at(2026, 12, 1), at(2027, 1, 1), 1_000, 300, 200, 2)
    assert (expected, 1, (0, 0, 0), (at(2027, 1, 1), at(2027, 2, 1)), ()) == (
        closed,
        budget.period_no,
        (budget.used, budget.held, budget.open_reservations),
        (budget.period_start, budget.period_end),
        budget.noticed_bps,
    )


def test_an_idle_budget_skips_to_the_period_containing_now() -> None:
    """A budget nothing touched for three months closes one period and opens April's."""
    budget = monthly()
    resets.roll(budget, at(2027, 4, 10))
    assert (1, at(2027, 4, 1), at(2027, 5, 1)) == (
        budget.period_no,
        budget.period_start,
        budget.period_end,
    )


def test_a_changed_calendar_starts_at_the_old_periods_end() -> None:
    """A month changed to weeks starts its first week at the month's end, not at the week's
    Monday before it."""
    budget = monthly(period=Period.WEEK, period_anchor=1)
    resets.roll(budget, at(2027, 1, 2))
    assert (at(2027, 1, 1), at(2027, 1, 4)) == (budget.period_start, budget.period_end)


def test_a_read_sees_the_next_period_without_changing_the_row() -> None:
    """current() shows the next period at zero and leaves the budget as it was."""
    budget = monthly()
    seen = resets.current(budget, at(2027, 1, 5))
    assert ((0, at(2027, 1, 1)), (300, at(2026, 12, 1))) == (
        (seen.used, seen.period_start),
        (budget.used, budget.period_start),
    )


def test_a_period_given_to_a_budget_that_never_reset_starts_at_the_next_boundary() -> None:
    """PutBudget giving a DAY period to a budget without one keeps its counting until the
    next midnight in its timezone."""
    budget = Budget("b", 1_000, "tokens")
    window = resets.window_on_put(budget, Calendar(Period.DAY, "Asia/Tokyo"), at(2026, 12, 2, 12))
    assert resets.Window(None, at(2026, 12, 2, 15)) == window
