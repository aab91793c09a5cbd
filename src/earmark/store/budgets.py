"""PutBudget's transaction: create a budget, or set what an operator sets on one; and
UpdateBudget's, which sets only the fields an update names (core.updates) on the row it
locked, checked whole with PutBudget's rules (core.specs) and put by PutBudget's rule
(core.puts), which the model runs too; each with the changes of the budget's limit
(core.raises): a temporary limit ended, set or replaced."""

from __future__ import annotations

from datetime import datetime

from earmark.core import puts, raises, regions, specs, updates
from earmark.core.model import Budget
from earmark.core.periods import Period
from earmark.errors import FailedPrecondition, InvalidArgument, Reason, budget_not_found
from earmark.store import queries, writes
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
    ended = raises.lapse(budget, now)
    return await _put_on(conn, budget, spec, now, ended, raises.NONE)


async def update(
    conn: Conn,
    given: specs.Fields,
    named: frozenset[str],
    now: datetime,
    raised: raises.Raise = raises.NONE,
) -> Budget:
    """Sets the fields named of given's budget: its row locked FOR UPDATE, read, the
    fields named merged into what it holds, the whole checked as PutBudget checks it, and
    put as PutBudget puts it, with raised's temporary limit (core.raises). The lock makes a
    concurrent update of another field wait and then merge into this one's result, so
    neither is lost. Not found: NOT_FOUND."""
    raises.check(raised, named, now)
    budget = await queries.lock_budget_for_update(conn, given.budget_id)
    if budget is None:
        raise budget_not_found(given.budget_id)
    # A temporary limit whose time came ends first: the merge starts from the limit after it.
    ended = raises.lapse(budget, now)
    spec = specs.checked(updates.merged(specs.fields_of(budget), given, named)).budget
    return await _put_on(conn, budget, updates.kept(budget, spec, named), now, ended, raised)


async def _put_on(
    conn: Conn,
    budget: Budget,
    spec: Budget,
    now: datetime,
    ended: raises.LimitChange | None,
    raised: raises.Raise,
) -> Budget:
    """Puts spec on budget, whose row this transaction has locked FOR UPDATE (and whose
    temporary limit ended was ended), with raised's temporary limit; writes the changes of
    its limit (core.raises) with it."""
    regions.require_not_share(budget)
    in_use_closed = False
    if puts.unit_changes(budget, spec):
        open_closed, used_closed = await queries.closed_use(conn, budget.budget_id)
        in_use_closed = bool(open_closed or used_closed)
    made = puts.put(puts.PutInput(budget, spec, now, in_use_closed))
    changes_shared = made.period is not Period.NEVER or made.unit != budget.unit
    if changes_shared and await conn.fetchval(
        "SELECT 1 FROM region_shares WHERE budget_id = $1 LIMIT 1", budget.budget_id
    ):
        if made.unit != budget.unit:
            raise FailedPrecondition(
                f"budget {budget.budget_id!r} has shares in other regions, in its unit "
                f"{budget.unit!r}: its unit stays (docs/regions.md)",
                Reason.UNIT_LOCKED,
                budget_id=budget.budget_id,
            )
        raise InvalidArgument(
            "period",
            "the budget has shares in other regions, and regions share budgets without a "
            "period (docs/regions.md)",
        )
    made, change = raises.applied(budget, made, raised, now)
    if made.unit != budget.unit:
        await queries.admit_unit(conn, made.unit)
    stored = await queries.update_budget(conn, made)
    changes = [(c, b) for c, b in ((ended, budget), (change, stored)) if c is not None]
    await writes.write_limit_changes(
        conn, [c.entry() for c, _ in changes], events=[c.event(b) for c, b in changes]
    )
    return stored
