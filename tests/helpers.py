"""Shared test helpers: invariant checks straight from the tables."""

from __future__ import annotations

import asyncpg

INVARIANTS = """
SELECT b.budget_id, b.limit_units, b.used, b.held, b.open_reservations,
       coalesce((SELECT sum(r.amount - r.charged) FROM reservations r
                 WHERE r.budget_id = b.budget_id AND r.state = 1), 0) AS open_held,
       (SELECT count(*) FROM reservations r
         WHERE r.budget_id = b.budget_id AND r.state = 1) AS open_count,
       coalesce((SELECT sum(l.used_delta) FROM ledger l WHERE l.budget_id = b.budget_id), 0)
           AS ledger_used,
       coalesce((SELECT sum(l.held_delta) FROM ledger l WHERE l.budget_id = b.budget_id), 0)
           AS ledger_held,
       coalesce((SELECT sum(greatest(0, r.settled_used - r.amount)) FROM reservations r
                 WHERE r.budget_id = b.budget_id AND r.state = 2), 0)
       + coalesce((SELECT sum(l.used_delta) FROM ledger l
                   WHERE l.budget_id = b.budget_id AND l.kind = 'late_settle'), 0) AS overshoot
FROM budgets b ORDER BY b.budget_id
"""


async def assert_invariants(dsn: str) -> None:
    """held = sum of open holds = sum of ledger held deltas, used = sum of ledger charges,
    and nothing beyond the limit but what settles reported past their holds."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(INVARIANTS)
    finally:
        await conn.close()
    for row in rows:
        name = row["budget_id"]
        assert row["open_held"] == row["held"], f"{name}: held != sum of open holds"
        assert row["ledger_held"] == row["held"], f"{name}: held != sum of ledger held"
        assert row["ledger_used"] == row["used"], f"{name}: used != sum of ledger charges"
        assert row["open_count"] == row["open_reservations"], f"{name}: open count drifted"
        if row["limit_units"] is not None:
            assert row["used"] + row["held"] - row["overshoot"] <= row["limit_units"], (
                f"{name}: admitted beyond the limit"
            )


async def fetch_budget_row(dsn: str, budget_id: str) -> asyncpg.Record:
    conn = await asyncpg.connect(dsn)
    try:
        row = await conn.fetchrow("SELECT * FROM budgets WHERE budget_id = $1", budget_id)
    finally:
        await conn.close()
    assert row is not None
    return row
