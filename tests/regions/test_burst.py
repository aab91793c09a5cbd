"""A burst of Reserves at a budget a region has no share of yet (issue 48): they wait for the
home together, so the home answers a call or two, not one a Reserve, and every one of
them is admitted, past the region's cap of a quarter of the limit as one Reserve's need
is."""

from __future__ import annotations

import asyncio

import pytest

from earmark.v1 import budget_pb2 as pb
from tests.regions.conftest import DELAY_SECONDS, World, home_share, metric

pytestmark = pytest.mark.xdist_group("regions")

LIMIT = 10_000
# 3,000 in all: past a region's cap (limits.region_share_bps_max, 2,500 of this limit).
RESERVES = 30
AMOUNT = 100
ASKS = "earmark_region_asks_total"
# One way: a call to the home takes a second, so every Reserve of the burst comes while
# the first one's call is under way (and the call is still within limits.region_call_seconds).
SLOW_LINK_SECONDS = 0.5


async def test_a_burst_of_reserves_at_a_fresh_budget_asks_the_home_at_most_twice(
    world: World,
) -> None:
    """Thirty Reserves at once in eu of a budget eu has no share of: those that come before
    the first call reads its batch ask together, those that come while it is under way
    together once it is answered; all thirty are admitted, and the home granted eu exactly
    what they hold."""
    await world.home.admin.PutBudget(pb.PutBudgetRequest(budget_id="b", limit=LIMIT, unit="t"))
    eu = world.regions["eu"]
    world.relays["eu"].set_delay(SLOW_LINK_SECONDS)
    before = metric(eu, ASKS, kind="reserve", outcome="answered")

    answers = await asyncio.gather(*(world.reserve("eu", f"k{i}", AMOUNT) for i in range(RESERVES)))

    assert [True] * RESERVES == [a is not None and a.admitted for a in answers]
    assert metric(eu, ASKS, kind="reserve", outcome="answered") - before in (1, 2)
    share = await home_share(world, "eu")
    assert share is not None
    assert RESERVES * AMOUNT == share["granted"]
    assert [] == world.told.errors
    assert RESERVES * AMOUNT == world.told.spent()
    world.relays["eu"].set_delay(DELAY_SECONDS)
    await world.audit()
