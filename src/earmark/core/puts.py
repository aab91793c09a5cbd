"""PutBudget's rule, once (issue 47): the budget a put leaves, from the budget as stored (or
None) and the checked spec (core.specs). The PostgreSQL store (store/budgets.py) runs it on
the row it locked and writes what it returns; the model (store/model.py) on its dictionary.

A new budget starts in the period containing now. An existing one keeps its counters, its
cycle, its archive and rate counts, its current period (a changed calendar takes effect at
the period's end, core.resets) and its template; its overage flag is spec's (PutBudget
clears it, an update that names nothing about it keeps it: core.updates.kept), its notices
what core.notices.kept_by_put keeps. A put that changes the limit ends a temporary limit in
force (the put's limit is the budget's from now on; core.raises sets a new one after the
put, and ends one whose time has come before it), one that keeps it keeps the temporary
limit, and a put by hand on a budget made from a template detaches it from the template's
later changes."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from earmark.core import notices, resets
from earmark.core.model import Budget
from earmark.core.periods import Period
from earmark.errors import FailedPrecondition, InvalidArgument, Reason


@dataclass(frozen=True, slots=True)
class PutInput:
    """One put: the budget as stored (None: new), the checked spec, and whether a closed
    period of the budget has open holds or was used (then its unit is in use)."""

    budget: Budget | None
    spec: Budget
    now: datetime
    in_use_closed: bool = False
    # False for a template's change reaching a budget made from it at a new period.
    by_hand: bool = True


def unit_changes(budget: Budget | None, spec: Budget) -> bool:
    """Whether the put would change an existing budget's unit (the store then reads whether
    a closed period of it is in use, for PutInput.in_use_closed)."""
    return budget is not None and bool(spec.unit) and spec.unit != budget.unit


def put(given: PutInput) -> Budget:
    """The budget the put leaves, or the error naming why it is refused; nothing else
    changes."""
    budget, spec, now = given.budget, given.spec, given.now
    budget_id = spec.budget_id
    if budget is None:
        if not spec.unit:
            raise InvalidArgument("unit", f"is required: budget {budget_id!r} is new")
        window = resets.window_on_put(None, spec.calendar(), now)
        return replace(spec, period_start=window.start, period_end=window.end)
    if budget.archived_at is not None:
        raise FailedPrecondition(
            f"budget {budget_id!r} was archived; a new budget needs a new id",
            Reason.BUDGET_ARCHIVED,
            budget_id=budget_id,
        )
    if budget.account is not None and spec.period != Period.NEVER:
        # A billing cycle's period is the provider's: its budget is the period.
        raise FailedPrecondition(
            f"period: budget {budget_id!r} is account {budget.account!r}'s billing cycle, "
            "whose period the billing provider sets",
            Reason.CYCLE_BUDGET_NEEDS_ACCOUNT,
            field="period",
            budget_id=budget_id,
        )
    unit = spec.unit or budget.unit
    in_use = budget.used or budget.held or budget.open_reservations or given.in_use_closed
    if unit != budget.unit and in_use:
        raise FailedPrecondition(
            f"budget {budget_id!r} is in use: its unit stays {budget.unit!r}",
            Reason.UNIT_LOCKED,
            field="unit",
            budget_id=budget_id,
            unit=budget.unit,
        )
    window = resets.window_on_put(budget, spec.calendar(), now)
    spec = notices.kept_by_put(budget, spec)
    kept_raise = spec.limit == budget.limit
    return replace(
        budget,
        limit=spec.limit,
        unit=unit,
        default_estimate=spec.default_estimate,
        estimate_policy=spec.estimate_policy,
        escrow_bps=spec.escrow_bps,
        overage_policy=spec.overage_policy,
        overage_limit=spec.overage_limit,
        overage_since=spec.overage_since,
        noticed_bps=spec.noticed_bps,
        refusing_noticed=spec.refusing_noticed,
        period=spec.period,
        timezone=spec.timezone,
        period_anchor=spec.period_anchor,
        period_start=window.start,
        period_end=window.end,
        threshold_bps=spec.threshold_bps,
        threshold_basis=spec.threshold_basis,
        mode=spec.mode,
        admissions_per_minute=spec.admissions_per_minute,
        units_per_minute=spec.units_per_minute,
        max_open_holds=spec.max_open_holds,
        max_admissions=spec.max_admissions,
        closes_at=spec.closes_at,
        # The same limit keeps a temporary one in force; another is permanent (core.raises).
        limit_until=budget.limit_until if kept_raise else None,
        limit_after=budget.limit_after if kept_raise else None,
        limit_reason=budget.limit_reason if kept_raise else "",
        changed_by_hand=budget.changed_by_hand
        or (given.by_hand and budget.template_id is not None),
    )
