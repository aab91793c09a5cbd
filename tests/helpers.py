"""Shared test helpers: invariant checks straight from the tables."""

from __future__ import annotations

import asyncpg

from earmark.store.audit import audit


async def assert_invariants(dsn: str) -> None:
    """held = sum of open holds = sum of ledger held deltas, used = sum of ledger charges,
    and nothing beyond the limit but what settles reported past their holds."""
    conn = await asyncpg.connect(dsn)
    try:
        problems = await audit(conn)
    finally:
        await conn.close()
    assert [] == problems


async def fetch_budget_row(dsn: str, budget_id: str) -> asyncpg.Record:
    conn = await asyncpg.connect(dsn)
    try:
        row = await conn.fetchrow("SELECT * FROM budgets WHERE budget_id = $1", budget_id)
    finally:
        await conn.close()
    assert row is not None
    return row
