"""The sweeper's transactions: close the holds whose lease passed, and end the temporary
limits of idle budgets whose time came (core.raises)."""

from __future__ import annotations

from datetime import datetime

from earmark.core import bookkeeping
from earmark.core.batch import BatchDecision, BatchState, expire_due
from earmark.store import queries, templates, writes
from earmark.store.tx import Conn


async def sweep(conn: Conn, now: datetime, batch_size: int) -> int:
    """Closes at most batch_size holds whose lease passed before now (returned, or put in
    doubt when charged); holds another transaction has locked are skipped, so sweepers
    never close one twice. How many it closed."""
    due = await queries.claim_due(conn, now, batch_size)
    if not due:
        return 0
    named = sorted({b for h in due for b in h.budget_ids()})
    budgets, _ = await queries.lock_budgets(conn, named)
    closed = await queries.load_periods(conn, budgets, due)
    # A period the sweep closes takes its template's newer settings, as a batch's would.
    found = await templates.for_rolls(conn, budgets.values(), now)
    decided = []
    for budget_id in sorted({h.budget_id for h in due}):
        state = BatchState(budget_id=budget_id, budget=budgets.get(budget_id), budgets=budgets)
        state.closed = closed
        state.templates = found
        state.holds_by_id = {h.reservation_id: h for h in due if h.budget_id == budget_id}
        decided.append((state, expire_due(state, now)))
    await writes.write_decisions(conn, decided)
    refreshed = {b.budget_id: b for _, d in decided for b in d.refreshed.values()}
    await templates.write_refreshed(conn, refreshed.values())
    return sum(len(d.changed_holds) for _, d in decided)


# The budgets whose temporary limit has ended and is still on their row, the earliest first
# (the partial index budgets_limit_until, migration 0027).
LAPSES_DUE = """
SELECT budget_id FROM budgets WHERE limit_until <= $1 ORDER BY limit_until LIMIT $2"""


async def lapse_raises(conn: Conn, now: datetime, batch_size: int) -> int:
    """Ends the temporary limits of at most batch_size budgets whose limit_until has passed,
    as the next batch on each would (core.bookkeeping.roll_due, which closes an ended period
    too): their rows locked in id order, the ledger entry, notice and limit of each written.
    Run in READ COMMITTED: the rows are read again once locked, and one a batch ended
    meanwhile is left alone. How many it ended."""
    named = [row["budget_id"] for row in await conn.fetch(LAPSES_DUE, now, batch_size)]
    if not named:
        return 0
    budgets, _ = await queries.lock_budgets(conn, sorted(named))
    found = await templates.for_rolls(conn, budgets.values(), now)
    decided = []
    for budget_id, budget in sorted(budgets.items()):
        state = BatchState(budget_id=budget_id, budget=budget, budgets={budget_id: budget})
        state.templates = found
        decision = BatchDecision()
        bookkeeping.roll_due(state, decision, now)
        if decision.touched:
            decided.append((state, decision))
    await writes.write_decisions(conn, decided)
    await templates.write_refreshed(conn, [b for _, d in decided for b in d.refreshed.values()])
    return sum(len(d.lapsed) for _, d in decided)


# The rows of holds that batches closed (migration 0020), skipping those another sidecar's
# sweeper is deleting; EvalPlanQual's recheck of the deadline in READ COMMITTED keeps a row
# that got one meanwhile.
FORGET_CLOSED = """
DELETE FROM open_holds WHERE reservation_id = ANY(ARRAY(
    SELECT reservation_id FROM open_holds WHERE expires_at IS NULL
    LIMIT $1 FOR UPDATE SKIP LOCKED))
    AND expires_at IS NULL
"""
# Rows deleted per sweep at most: more than a sidecar's batches close between two sweeps.
FORGET_CLOSED_MAX = 10_000


async def forget_closed(conn: Conn, limit: int = FORGET_CLOSED_MAX) -> int:
    """Deletes at most limit rows of open_holds without a deadline: holds closed by a batch,
    which sets the deadline to NULL rather than deleting (a DELETE would read the table's
    few index pages under SERIALIZABLE). Run in READ COMMITTED, where it conflicts with no
    serializable transaction. How many it deleted."""
    done = await conn.execute(FORGET_CLOSED, limit)
    return int(done.split()[-1])
