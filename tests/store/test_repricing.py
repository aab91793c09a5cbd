"""The repricer against a real PostgreSQL and a live sidecar: its passes page on past holds
it cannot move, so that those never starve the holds behind them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from earmark import limits
from earmark.server import Sidecar
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running, running, sidecar_settings
from tests.helpers import FakeClock, assert_invariants, eventually, fetch_budget_row
from tests.service.test_money import SHAPE, gpt4o

NOW = datetime(2026, 8, 15, 12, 0, tzinfo=UTC)
CLOCK_START = NOW
# What SHAPE holds at the first price, and at the dearer one the test moves to.
CHEAP, DEAR = 45_000, 180_000
STUCK = limits.reprice_holds_per_pass_max + 100


@pytest.fixture
async def side(dsn: str, socket_dir: Path, clock: FakeClock) -> AsyncIterator[Running]:
    async with running(Sidecar(sidecar_settings(dsn, socket_dir), clock=clock), dsn) as s:
        await s.admin.PutPrice(pb.PutPriceRequest(price=gpt4o(NOW - timedelta(days=1))))
        yield s


async def reserve(side: Running, budget_id: str, keys: range) -> None:
    """Holds SHAPE on budget_id once a key, a hundred at a time."""
    for start in range(keys.start, keys.stop, 100):
        await asyncio.gather(
            *(
                side.budget.Reserve(
                    pb.ReserveRequest(budget_id=budget_id, shape=SHAPE, idempotency_key=f"k{n}")
                )
                for n in range(start, min(start + 100, keys.stop))
            )
        )


async def test_holds_the_repricer_cannot_move_do_not_starve_one_behind_them(
    side: Running, clock: FakeClock
) -> None:
    """More holds than a pass takes, on a budget with no room for a dearer price, all older
    than a hold on a roomy budget: that hold is still repriced, the others keep their
    price."""
    room = DEAR - CHEAP - 1
    for budget_id, limit in (("full", STUCK * CHEAP + room), ("roomy", 1_000_000)):
        await side.admin.PutBudget(
            pb.PutBudgetRequest(budget_id=budget_id, limit=limit, unit="usd_micros")
        )
    await reserve(side, "full", range(STUCK))
    clock.advance(timedelta(seconds=1))
    await reserve(side, "roomy", range(1))
    await side.admin.PutPrice(
        pb.PutPriceRequest(price=gpt4o(clock() + timedelta(seconds=10), 10_000_000, 40_000_000))
    )
    clock.advance(timedelta(seconds=30))

    async def repriced() -> bool:
        return DEAR == (await fetch_budget_row(side.dsn, "roomy"))["held"]

    await eventually(repriced, within_seconds=60, what="the hold behind the stuck ones repriced")
    assert STUCK * CHEAP == (await fetch_budget_row(side.dsn, "full"))["held"]
    await assert_invariants(side.dsn)
