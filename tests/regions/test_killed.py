"""A region killed with open holds (issue 48): its sidecar stopped and its PostgreSQL killed
with SIGKILL. What it strands at the home is at most its share, and comes back at the home
the share's lease, the settle grace and the clocks' margin after the home last heard from
it; restarted on the same data, the region's own sweeper expires its holds and its agent
learns of the reclaim."""

from __future__ import annotations

from datetime import timedelta

import pytest

from earmark.core import regions
from earmark.v1 import budget_pb2 as pb
from tests.conftest import CLOCK_START
from tests.helpers import eventually, fetch_budget_row
from tests.regions.conftest import World, fetch, home_share, metric

pytestmark = pytest.mark.xdist_group("regions")

LIMIT = 10_000
SKEW = timedelta(seconds=1)
RECLAIMED = "earmark_region_reclaimed_units_total"


async def test_a_region_killed_with_open_holds_strands_at_most_its_share_until_reclaim(
    world: World,
) -> None:
    """eu (its clock the most skew ahead, the home's the most behind) holds a share with
    three holds, one settled and reported; killed, it strands its outstanding escrow at the
    home, no more than its share, until lease + grace + margin on the home's clock and not a
    second before; restarted past its lease, its sweeper expires the open holds and its
    share's limit drops to what the home left it; ap uses what came back. What callers
    were told never spends past the limit; every ledger audits clean."""
    eu, home = world.regions["eu"], world.home
    home.clock.set(CLOCK_START - SKEW)
    eu.clock.set(CLOCK_START + SKEW)
    await home.admin.PutBudget(pb.PutBudgetRequest(budget_id="b", limit=LIMIT, unit="t"))
    first = await world.reserve("eu", "k1", 100)
    await eu.tick()
    world.advance(timedelta(seconds=4))
    second = await world.reserve("eu", "k2", 500)
    await eu.tick()
    third = await world.reserve("eu", "k3", 300)
    assert first is not None
    assert second is not None
    assert third is not None
    assert (True, True, True) == (first.admitted, second.admitted, third.admitted)
    await world.settle("eu", first.reservation_id, 80)
    await eu.tick()
    share = await home_share(world, "eu")
    assert share is not None
    assert 80 == share["used"]
    before = await fetch_budget_row(eu.dsn, "b")
    assert 800 == before["held"]

    # Killed: the sidecar stopped without settling its holds, then its database killed
    # with SIGKILL to the postmaster.
    await eu.stop()
    world.servers["eu"].kill()

    # Stranded at the home: eu's outstanding escrow, no more than its share.
    share = await home_share(world, "eu")
    assert share is not None
    outstanding = share["granted"] - share["returned"] - share["used"]
    stranded = (await fetch_budget_row(home.dsn, "b"))["held"]
    assert 0 < stranded == outstanding <= share["granted"] - share["returned"]
    free_before = LIMIT - 80 - stranded

    # A second before lease + grace + margin on the home's clock, nothing is taken back...
    due = share["lease_until"] + regions.RECLAIM_AFTER
    world.advance(due - timedelta(seconds=1) - home.clock())
    assert home.side.store is not None
    assert 0 == await home.side.store.reclaim_shares()
    assert stranded == (await fetch_budget_row(home.dsn, "b"))["held"]
    # ... and at that moment the home's sweeper takes it back.
    world.advance(timedelta(seconds=1))

    async def reclaimed() -> bool:
        return (await fetch_budget_row(home.dsn, "b"))["held"] == 0

    await eventually(reclaimed, within_seconds=5, what="eu's share reclaimed at the home")
    assert outstanding == metric(home, RECLAIMED)

    # ap uses what came back: more than was free while eu's share was stranded.
    open_in_eu = 500 + 300
    wanted = (free_before + LIMIT - 80 - open_in_eu) // 2
    assert free_before < wanted <= LIMIT - 80 - open_in_eu
    taken = await world.reserve("ap", "a1", wanted)
    assert taken is not None
    assert taken.admitted

    # eu restarted on the same data (its clock moved with everyone's, past its lease).
    world.servers["eu"].restart()
    eu.dsn = world.servers["eu"].dsn
    await eu.start()

    async def expired() -> bool:
        row = await fetch_budget_row(eu.dsn, "b")
        holds = await fetch(eu.dsn, "SELECT count(*) AS n FROM open_holds")
        return row["held"] == 0 and holds[0]["n"] == 0

    await eventually(expired, within_seconds=5, what="eu's holds expired by its sweeper")
    await eu.tick()

    async def learned() -> bool:
        row = await fetch_budget_row(eu.dsn, "b")
        return bool(row["limit_units"] <= row["used"] == 80)

    await eventually(learned, within_seconds=5, what="eu's share limit after the reclaim")
    after = await fetch_budget_row(eu.dsn, "b")
    assert after["limit_units"] < before["limit_units"]

    # A Reserve in eu now is asked of the home, which grants it only from what is free.
    again = await world.reserve("eu", "k4", LIMIT)
    assert again is not None
    assert (False, pb.REFUSAL_REASON_INSUFFICIENT_BUDGET) == (again.admitted, again.reason)
    await world.settle("ap", taken.reservation_id, wanted)
    await world.regions["ap"].tick()

    async def used() -> bool:
        return (await fetch_budget_row(home.dsn, "b"))["used"] == 80 + wanted

    await eventually(used, within_seconds=5, what="ap's use at the home")
    home_row = await fetch_budget_row(home.dsn, "b")
    assert home_row["used"] + home_row["held"] <= LIMIT
    assert world.told.spent() == 80 + open_in_eu + wanted <= LIMIT
    assert [] == world.told.errors
    await world.audit()
