"""PutBudget's rules for the model in memory: store/budgets.py's checks, in the same order
and with the same errors, on a budget held in a dictionary rather than a locked row."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from earmark.core import notices, resets
from earmark.core.model import Budget
from earmark.core.periods import Period
from earmark.errors import FailedPrecondition, InvalidArgument, Reason


def put_checked(
    budget: Budget | None, spec: Budget, now: datetime, *, in_use_closed: bool
) -> Budget:
    """The budget PutBudget leaves: spec's new budget in the period containing now, or
    budget with what an operator sets (its counters, cycle, archive and rate counts stay,
    its overage flag is spec's (PutBudget's clears it; core.updates.kept), its notices
    what core.notices.kept_by_put keeps, and a changed calendar takes effect at the current
    period's end). in_use_closed: a closed period of it has open holds or was used."""
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
        raise FailedPrecondition(
            f"period: budget {budget_id!r} is account {budget.account!r}'s billing cycle, "
            "whose period the billing provider sets",
            Reason.CYCLE_BUDGET_NEEDS_ACCOUNT,
            field="period",
            budget_id=budget_id,
        )
    unit = spec.unit or budget.unit
    in_use = budget.used or budget.held or budget.open_reservations or in_use_closed
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
    )
