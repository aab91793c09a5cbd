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
