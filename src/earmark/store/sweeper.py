"""The sweeper's transaction: close the holds whose lease passed."""

from __future__ import annotations

from datetime import datetime

from earmark.core.batch import BatchState, expire_due
from earmark.store import queries, writes
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
    decided = []
    for budget_id in sorted({h.budget_id for h in due}):
        state = BatchState(budget_id=budget_id, budget=budgets.get(budget_id), budgets=budgets)
        state.closed = closed
        state.holds_by_id = {h.reservation_id: h for h in due if h.budget_id == budget_id}
        decided.append((state, expire_due(state, now)))
    await writes.write_decisions(conn, decided)
    return sum(len(d.changed_holds) for _, d in decided)


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
