"""When a budget's period ends: the closed period keeps its counters (the holds reserved in
it settle there), and the budget starts again at zero used and zero held.

A budget's row counts one period at a time, number period_no. The first transaction that
locks the row at or after period_end closes the period: nothing has to run at the boundary
itself, and every sidecar closes it the same way, since the next period follows from the
row alone. A calendar changed by PutBudget is the one the next periods follow: the current
period keeps its end, so that a change takes effect at the next boundary.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from earmark.core import raises, refusals
from earmark.core.model import Budget, PeriodTotals
from earmark.core.periods import Calendar, period_at
from earmark.core.raises import LimitChange


@dataclass(frozen=True, slots=True)
class Window:
    """A budget's current period: [start, end), either side open (None)."""

    start: datetime | None
    end: datetime | None


def due(budget: Budget, now: datetime) -> bool:
    """The budget's current period has ended."""
    return budget.period_end is not None and now >= budget.period_end


def next_window(cal: Calendar, since: datetime, now: datetime) -> Window:
    """The period that follows one ending at since, as of now: the calendar's period
    containing now, begun no earlier than since (a calendar changed by PutBudget starts at
    the old period's end, not before it); from since on without end for one that never
    resets."""
    period = period_at(now, cal)
    if period is None:
        return Window(start=since, end=None)
    return Window(start=max(since, period.start), end=period.end)


def roll(budget: Budget, now: datetime) -> PeriodTotals | None:
    """Closes the budget's period if it has ended: returns the closed period's totals and
    starts the budget's counters again at zero in the period containing now (an idle budget
    skips the periods nothing happened in: they would be empty). None when not due."""
    if not due(budget, now):
        return None
    assert budget.period_end is not None
    closed = PeriodTotals(
        budget_id=budget.budget_id,
        period_no=budget.period_no,
        period_start=budget.period_start,
        period_end=budget.period_end,
        limit=budget.limit,
        used=budget.used,
        held=budget.held,
        open_reservations=budget.open_reservations,
    )
    window = next_window(budget.calendar(), budget.period_end, now)
    budget.period_no += 1
    budget.period_start, budget.period_end = window.start, window.end
    budget.open_earlier += budget.open_reservations
    budget.used = budget.held = budget.open_reservations = 0
    budget.noticed_bps = ()
    budget.exceeded_noticed = False
    budget.overage_since = None
    budget.admissions = 0
    refusals.start_period(budget)
    return closed


def window_on_put(budget: Budget | None, cal: Calendar, now: datetime) -> Window:
    """The current period of a budget PutBudget sets the calendar cal on: a new budget's is
    cal's period containing now; a budget that has a period keeps it (cal starts at its
    end); one that never reset gets a first boundary, cal's next, and counts until then
    from its start."""
    if budget is None:
        period = period_at(now, cal)
        return Window(None, None) if period is None else Window(period.start, period.end)
    if budget.period_end is not None:
        return Window(budget.period_start, budget.period_end)
    # Not before the period's start: a sidecar whose clock is behind the one that opened
    # the period would otherwise end it before it began.
    since = now if budget.period_start is None else max(now, budget.period_start)
    period = period_at(since, cal)
    return Window(budget.period_start, None if period is None else period.end)


def advance(budget: Budget, now: datetime) -> tuple[PeriodTotals | None, LimitChange | None]:
    """roll, and the end of a temporary limit whose time has come (core.raises.lapse) in the
    period it ended in: before the roll when it ended by the period's end."""
    end = budget.period_end
    first = budget.limit_until is not None and (end is None or budget.limit_until <= end)
    change = raises.lapse(budget, now) if first else None
    closed = roll(budget, now)
    if not first:
        change = raises.lapse(budget, now)
    return closed, change


def current(budget: Budget, now: datetime) -> Budget:
    """The budget as a read at now sees it: one whose period has ended but that no
    transaction has closed yet reads as the next period, at zero, and one whose temporary
    limit has ended reads with the limit after it (the row is closed by the next
    transaction that locks it; a read changes nothing)."""
    if not due(budget, now) and not raises.due(budget, now):
        return budget
    seen = replace(budget, rate=replace(budget.rate))
    advance(seen, now)
    return seen
