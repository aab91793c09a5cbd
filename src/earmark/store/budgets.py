"""PutBudget's transaction: create a budget, or set what an operator sets on one; and
UpdateBudget's, which sets only the fields an update names (core.updates) on the row it
locked, checked whole with PutBudget's rules (core.specs)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from earmark.core import notices, resets, specs, updates
from earmark.core.model import Budget
from earmark.core.periods import Period
from earmark.errors import FailedPrecondition, InvalidArgument, Reason, budget_not_found
from earmark.store import queries
from earmark.store.tx import Conn


async def put(conn: Conn, spec: Budget, now: datetime) -> Budget:
    """Creates spec's budget, or updates its row (locked FOR UPDATE) with what an operator
    sets; an archived budget is not put again, and a budget in use keeps its unit. A new
    budget with a period starts in the period containing now; an existing one keeps its
    current period, and a changed calendar takes effect at its end (core.resets)."""
    budget_id = spec.budget_id
    budget = await queries.lock_budget_for_update(conn, budget_id)
    if budget is None:
        if not spec.unit:
            raise InvalidArgument("unit", f"is required: budget {budget_id!r} is new")
        await queries.admit_unit(conn, spec.unit)
        window = resets.window_on_put(None, spec.calendar(), now)
        spec = replace(spec, period_start=window.start, period_end=window.end)
        created = await queries.insert_budget(conn, spec)
        if created is not None:
            return created
        # Another sidecar created it since: update the row that won.
        budget = await queries.lock_budget_for_update(conn, budget_id)
        assert budget is not None
    return await _put_on(conn, budget, spec, now)


async def update(conn: Conn, given: specs.Fields, named: frozenset[str], now: datetime) -> Budget:
    """Sets the fields named of given's budget: its row locked FOR UPDATE, read, the
    fields named merged into what it holds, the whole checked as PutBudget checks it, and
    put as PutBudget puts it. The lock makes a concurrent update of another field wait and
    then merge into this one's result, so neither is lost. Not found: NOT_FOUND."""
    budget = await queries.lock_budget_for_update(conn, given.budget_id)
    if budget is None:
        raise budget_not_found(given.budget_id)
    spec = specs.checked(updates.merged(specs.fields_of(budget), given, named)).budget
    return await _put_on(conn, budget, updates.kept(budget, spec, named), now)


async def _put_on(conn: Conn, budget: Budget, spec: Budget, now: datetime) -> Budget:
    """Puts spec on budget, whose row this transaction has locked FOR UPDATE."""
    budget_id = spec.budget_id
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
    new_unit = spec.unit or budget.unit
    if new_unit != budget.unit:
        open_closed, used_closed = await queries.closed_use(conn, budget_id)
        if budget.used or budget.held or budget.open_reservations or open_closed or used_closed:
            raise FailedPrecondition(
                f"budget {budget_id!r} is in use: its unit stays {budget.unit!r}",
                Reason.UNIT_LOCKED,
                field="unit",
                budget_id=budget_id,
                unit=budget.unit,
            )
        await queries.admit_unit(conn, new_unit)
    window = resets.window_on_put(budget, spec.calendar(), now)
    spec = replace(spec, unit=new_unit, period_start=window.start, period_end=window.end)
    return await queries.update_budget(conn, notices.kept_by_put(budget, spec))
