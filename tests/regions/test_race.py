"""The 32-worker race of the spend-caps article, spread over three regions (issue 48): one
$0.04 call fits a $0.04 budget homed at us, and 32 workers in us, eu and ap ask for it at
the same moment, every region's call to the home through a relay that adds 40 ms each way.
Exactly one is admitted, wherever it asks."""

from __future__ import annotations

import asyncio

import pytest

from earmark.v1 import budget_pb2 as pb
from tests.helpers import eventually, fetch_budget_row
from tests.regions.conftest import HOME, REGIONS, World

pytestmark = pytest.mark.xdist_group("regions")

LIMIT = 40_000
WORKERS = 32


async def test_32_workers_over_three_regions_race_for_one_call(world: World) -> None:
    """32 Reserves of the whole limit, each with its own idempotency key, ~11 per region,
    sent together: one admitted; settled in full, its use reaches the home once, and the
    home's held is 0 after the region's report; every ledger audits clean."""
    await world.home.admin.PutBudget(
        pb.PutBudgetRequest(budget_id="b", limit=LIMIT, unit="usd_micros")
    )
    places = [(HOME, *REGIONS)[i % 3] for i in range(WORKERS)]
    start = asyncio.Event()

    async def worker(i: int) -> tuple[str, pb.ReserveResponse | None]:
        await start.wait()
        return places[i], await world.reserve(places[i], f"w{i}", LIMIT)

    tasks = [asyncio.create_task(worker(i)) for i in range(WORKERS)]
    await asyncio.sleep(0)
    start.set()
    answers = await asyncio.gather(*tasks)

    admitted = [(where, r) for where, r in answers if r is not None and r.admitted]
    assert 1 == len(admitted), answers
    where, winner = admitted[0]
    await world.settle(where, winner.reservation_id, LIMIT)

    async def reported() -> bool:
        row = await fetch_budget_row(world.home.dsn, "b")
        return (row["used"], row["held"]) == (LIMIT, 0)

    await eventually(reported, within_seconds=5, what="the winner's use at the home")
    # Every other worker was refused (none failed with an error), and nothing was spent
    # beyond the limit.
    assert [] == world.told.errors
    assert WORKERS - 1 == len(world.told.refused)
    assert LIMIT == world.told.spent()
    await world.audit()
