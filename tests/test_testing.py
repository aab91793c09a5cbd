"""earmark.testing, the test doubles a worker's author uses: the clock, the audit and the
in-process sidecar on the model."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest

from earmark.client import (
    AsyncClient,
    ClientError,
    HoldSettledError,
    Refusal,
    RefusalReason,
    Reservation,
)
from earmark.testing import FakeClock, ModelSidecar, assert_invariants


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


async def test_a_worker_runs_the_sdk_against_the_sidecar_on_the_model() -> None:
    """ModelSidecar serves the SDK on 127.0.0.1 without a database: a budget put through
    Admin, a hold reserved, charged and settled, a refusal and a closed hold's error as a
    sidecar answers them, and the model's budget and ledger after."""
    clock = FakeClock(datetime(2026, 12, 2, tzinfo=UTC))
    async with (
        ModelSidecar(clock) as sidecar,
        AsyncClient(sidecar.target, admin_target=sidecar.target) as client,
    ):
        await client.put_budget("worker", 1_000, "tokens")
        held = await client.reserve("worker", 600, lease_seconds=30)
        assert isinstance(held, Reservation)
        refused = await client.reserve("worker", 500)
        await client.charge(held.reservation_id, 100)
        settled = await client.settle(held.reservation_id, 400)
        with pytest.raises(HoldSettledError):
            await client.charge(held.reservation_id, 1)
        read = await client.get_budget("worker")
    assert isinstance(refused, Refusal)
    assert (RefusalReason.INSUFFICIENT_BUDGET, 400) == (refused.reason, refused.remaining)
    assert (400, 200) == (settled.charged, settled.released)
    assert (400, 0, 600) == (read.used, read.held, read.remaining)
    assert ["hold", "charge", "settle"] == [str(e.kind) for e in sidecar.store.ledger]


async def test_the_sidecar_on_the_model_expires_on_its_clock_and_lists_nothing() -> None:
    """A hold whose lease passed on the test's clock is expired by the model's sweeper, and
    Admin's listings, which are SQL, answer UNIMPLEMENTED."""
    clock = FakeClock(datetime(2026, 12, 2, tzinfo=UTC))
    async with ModelSidecar(clock) as sidecar:
        await sidecar.store.put_budget("worker", 100, "tokens")
        async with AsyncClient(sidecar.target, admin_target=sidecar.target) as client:
            held = await client.reserve("worker", 60, lease_seconds=10)
            clock.advance(timedelta(seconds=11))
            swept = await sidecar.store.sweep_once()
            with pytest.raises(ClientError) as listing:
                [budget async for budget in client.list_budgets()]
        budget = await sidecar.store.get_budget("worker")
    assert isinstance(held, Reservation)
    assert (1, 0, 100) == (swept, budget.held, budget.remaining())
    assert grpc.StatusCode.UNIMPLEMENTED == listing.value.code


def docs_testing_block() -> str:
    """The first Python block of docs/sdk.md's "Testing a worker"."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "sdk.md").read_text()
    section = text.split("## Testing a worker", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


async def test_the_docs_example_runs_as_written() -> None:
    """docs/sdk.md's worker test, run as written around a worker that leaves a hold open:
    the sweeper returns it once the clock passes its lease."""
    block = docs_testing_block()

    async def run_my_worker(client: AsyncClient) -> None:
        held = await client.reserve("research", 4_000, lease_seconds=60)
        assert held.admitted

    namespace: dict[str, Any] = {"run_my_worker": run_my_worker}
    exec(compile(block, "docs/sdk.md", "exec"), namespace)
    await namespace["test_my_worker_stops_at_its_budget"]()
