"""A budget's refusals for want of room (issue 43): a HARD budget refuses before its used
reaches the limit (money held for calls still running counts), so a threshold of 100% or
the exhausted alert can stay silent while a team is blocked. Each Reserve a budget refuses
with INSUFFICIENT_BUDGET is counted on the budget's row for its current period, with the
first and the latest. The first of a period, and the first after a put changed the limit
(a new promise, which a budget that never resets would otherwise never be told about
again), writes the budget.refusing notice, in the refusing batch's transaction: once
across replicas, since a second sidecar's batch that read the budget unnoticed conflicts
on its row and retries to read it noticed, and the events' unique key (the period and the
count it fired at) backs it. A new period starts the count again (core.resets)."""

from __future__ import annotations

from datetime import datetime

from earmark.core.model import Budget


def count(budget: Budget, now: datetime) -> bool:
    """Counts a refusal on budget at now; True when it is to be noticed (marked so)."""
    budget.refusals += 1
    if budget.first_refused_at is None:
        budget.first_refused_at = now
    # A sidecar whose clock is behind another's never moves the latest back.
    if budget.last_refused_at is None or now > budget.last_refused_at:
        budget.last_refused_at = now
    if budget.refusing_noticed:
        return False
    budget.refusing_noticed = True
    return True


def start_period(budget: Budget) -> None:
    """A new period's count starts at zero."""
    budget.refusals = 0
    budget.first_refused_at = budget.last_refused_at = None
    budget.refusing_noticed = False
