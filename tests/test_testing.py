"""earmark.testing, the test doubles a worker's author uses: the clock and the audit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from earmark.testing import FakeClock, assert_invariants


def test_the_fake_clock_moves_only_when_told() -> None:
    """set and advance move it; reading it twice gives the same time."""
    clock = FakeClock(datetime(2026, 12, 2, tzinfo=UTC))
    first, again = clock(), clock()
    clock.advance(timedelta(minutes=5))
    assert (first, datetime(2026, 12, 2, 0, 5, tzinfo=UTC)) == (again, clock())


async def test_the_invariants_pass_on_a_sound_database_and_fail_on_drift(dsn: str) -> None:
    """A database as the sidecar leaves it passes; a budget whose used moved without a
    ledger row fails, naming it."""
    await assert_invariants(dsn)
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("INSERT INTO units (unit) VALUES ('t') ON CONFLICT DO NOTHING")
        await conn.execute(
            "INSERT INTO budgets (budget_id, limit_units, unit, used) VALUES ('drift', 10, 't', 3)"
        )
    finally:
        await conn.close()
    with pytest.raises(AssertionError) as failed:
        await assert_invariants(dsn)
    assert "drift: used 3 != ledger 0" in str(failed.value)
