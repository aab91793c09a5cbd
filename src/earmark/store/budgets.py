"""PutBudget's transaction: create a budget, or set what an operator sets on one; and
UpdateBudget's, which sets only the fields an update names (core.updates) on the row it
locked, checked whole with PutBudget's rules (core.specs) and put by PutBudget's rule
(core.puts), which the model runs too."""

from __future__ import annotations

from datetime import datetime

from earmark.core import puts, specs, updates
from earmark.core.model import Budget
from earmark.errors import budget_not_found
from earmark.store import queries
from earmark.store.tx import Conn


async def put(conn: Conn, spec: Budget, now: datetime) -> Budget:
    """Creates spec's budget, or updates its row (locked FOR UPDATE) with what an operator
    sets, by PutBudget's rule (core.puts)."""
    budget_id = spec.budget_id
    budget = await queries.lock_budget_for_update(conn, budget_id)
    if budget is None:
        made = puts.put(puts.PutInput(None, spec, now))
        await queries.admit_unit(conn, made.unit)
        created = await queries.insert_budget(conn, made)
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
    in_use_closed = False
    if puts.unit_changes(budget, spec):
        open_closed, used_closed = await queries.closed_use(conn, budget.budget_id)
        in_use_closed = bool(open_closed or used_closed)
    made = puts.put(puts.PutInput(budget, spec, now, in_use_closed))
    if made.unit != budget.unit:
        await queries.admit_unit(conn, made.unit)
    return await queries.update_budget(conn, made)
