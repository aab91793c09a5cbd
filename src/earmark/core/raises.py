"""Temporary limits (issue 47): UpdateBudget's limit_until and reason, and their end. Plain
data in, decisions out, now an argument; the PostgreSQL store (store/budgets.py,
store/sweeper.py, the batches through core.bookkeeping) and the model (store/model.py) run
the same rules.

- An update with limit_until sets a temporary limit. It must name `limit` (by its mask, or
  without a mask by populating it), limit_until must be after now and at most
  limits.limit_raise_days_max days ahead, and reason at most limits.limit_reason_chars_max
  characters; else INVALID_ARGUMENT naming limit_until (or reason), and nothing changes. A
  reason without limit_until says why a permanent change is made, and needs `limit` named
  too. The budget then has limit = the update's limit until limit_until, limit_reason =
  reason, and limit_after = the limit before the update, or, when a raise is already in
  force, the limit_after it had: the limit to go back to is the one before any raise.
- An update or a put that changes the limit without limit_until ends a raise in force: the
  new limit is permanent. One that leaves the limit as it is keeps the raise (core.puts).
- At now >= limit_until the raise ends: limit = limit_after, and limit_until, limit_after
  and limit_reason are cleared. The first transaction that locks the budget's row applies
  it (every batch before deciding its operations, core.bookkeeping.roll_due; a put or an
  update before its own change), a read shows it at once (core.resets.current), and the
  sweeper applies it to idle budgets, at most limits.limit_lapses_per_sweep_max a
  transaction, so that its notice is written on time.
- Every change of an existing budget's limit by PutBudget or UpdateBudget, a raise set
  whatever its limit, and every end of a raise is one ledger entry of kind `limit` (moving
  nothing, in the budget's current period, with the limits before and after, limit_until
  for a raise, and the reason: the update's, or for an end the raise's) and one
  `budget.limit_changed` notice (core.notices.limit_changed_event).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from earmark import limits
from earmark.core import notices
from earmark.core.model import Budget, LedgerEntry, LedgerKind
from earmark.core.notices import Event
from earmark.errors import FailedPrecondition, InvalidArgument, Reason


@dataclass(frozen=True, slots=True)
class Raise:
    """What an update says of its limit besides the limit: until when it is in force (None:
    from now on) and why."""

    until: datetime | None = None
    reason: str = ""


NONE = Raise()


@dataclass(frozen=True, slots=True)
class LimitChange:
    """One change of a budget's limit, from before to after, at at: a raise until until, a
    permanent change (until None), or a raise's end (ended)."""

    budget_id: str
    period_no: int
    before: int | None
    after: int | None
    until: datetime | None
    reason: str
    at: datetime
    ended: bool = False

    def entry(self) -> LedgerEntry:
        """Its ledger entry: kind limit, moving nothing."""
        return LedgerEntry(
            self.budget_id,
            None,
            LedgerKind.LIMIT,
            0,
            0,
            self.at,
            self.period_no,
            limit_before=self.before,
            limit_after=self.after,
            limit_until=self.until,
            reason=self.reason,
        )

    def event(self, budget: Budget) -> Event:
        """Its budget.limit_changed notice, budget as the change left it."""
        return notices.limit_changed_event(
            budget, self.before, self.until, self.reason, self.ended, self.at
        )


def check(given: Raise, named: frozenset[str], now: datetime) -> None:
    """InvalidArgument naming limit_until or reason when an update naming named cannot set
    given; nothing otherwise."""
    if len(given.reason) > limits.limit_reason_chars_max:
        raise InvalidArgument(
            "reason",
            f"has {len(given.reason)} characters; at most {limits.limit_reason_chars_max}",
        )
    if given.until is None:
        if given.reason and "limit" not in named:
            raise InvalidArgument("reason", "says why the limit changes; the update names no limit")
        return
    if "limit" not in named:
        raise InvalidArgument("limit_until", "is when the update's limit ends; name limit too")
    if given.until <= now:
        raise InvalidArgument("limit_until", "must be after now")
    if given.until > now + timedelta(days=limits.limit_raise_days_max):
        raise InvalidArgument(
            "limit_until", f"is more than {limits.limit_raise_days_max} days ahead"
        )


def in_force(budget: Budget, now: datetime) -> bool:
    """The budget has a temporary limit that has not ended."""
    return budget.limit_until is not None and now < budget.limit_until


def due(budget: Budget, now: datetime) -> bool:
    """The budget's temporary limit has ended, and the budget still has it."""
    return budget.limit_until is not None and now >= budget.limit_until


def lapse(budget: Budget, now: datetime) -> LimitChange | None:
    """Ends budget's temporary limit if it is due, on budget itself: the limit goes back to
    limit_after (a new limit: its first refusal is noticed again, core.notices.kept_by_put).
    The change, or None when not due."""
    if not due(budget, now):
        return None
    change = LimitChange(
        budget.budget_id,
        budget.period_no,
        before=budget.limit,
        after=budget.limit_after,
        until=None,
        reason=budget.limit_reason,
        at=now,
        ended=True,
    )
    budget.limit = budget.limit_after
    budget.limit_until = budget.limit_after = None
    budget.limit_reason = ""
    budget.refusing_noticed = False
    return change


def current(budget: Budget, now: datetime) -> Budget:
    """The budget as a read at now sees it: a temporary limit that has ended, ended (the row
    changes with the next transaction that locks it; a read changes nothing)."""
    if not due(budget, now):
        return budget
    seen = replace(budget)
    lapse(seen, now)
    return seen


def applied(
    before: Budget, made: Budget, given: Raise, now: datetime
) -> tuple[Budget, LimitChange | None]:
    """made, the budget a put or an update left from before (whose ended raise has been
    ended: lapse), with given's temporary limit; and the change of limit to record, None when
    the limit stays and no raise is set."""
    if given.until is not None and before.account is not None:
        # The plan's next read sets a cycle's limit and would leave the raise's end to put
        # back a limit the provider no longer has: a cycle is raised in its plan.
        raise FailedPrecondition(
            f"limit_until: budget {before.budget_id!r} is account {before.account!r}'s "
            "billing cycle, whose limit its plan sets; raise the plan instead",
            Reason.CYCLE_BUDGET_NEEDS_ACCOUNT,
            field="limit_until",
            budget_id=before.budget_id,
        )
    if given.until is not None:
        back = before.limit_after if in_force(before, now) else before.limit
        made = replace(made, limit_until=given.until, limit_after=back, limit_reason=given.reason)
    elif made.limit == before.limit:
        return made, None
    change = LimitChange(
        made.budget_id,
        made.period_no,
        before=before.limit,
        after=made.limit,
        until=given.until,
        reason=given.reason,
        at=now,
    )
    return made, change
