"""Lost and repeated messages between a region and the home (issue 48): every report carries
cumulative counts the home applies by max, so a report lost in a blackhole is carried by
the agent's next tick, and one the home applied whose answer was lost is sent again and
counted once."""

from __future__ import annotations

import asyncio

import pytest

from earmark.v1 import budget_pb2 as pb
from tests.helpers import eventually, fetch_budget_row
from tests.regions.conftest import World, fetch, home_share, metric

pytestmark = pytest.mark.xdist_group("regions")

LIMIT = 10_000
ASKS = "earmark_region_asks_total"


async def home_used(world: World) -> int:
    return int((await fetch_budget_row(world.home.dsn, "b"))["used"])


async def test_a_report_lost_or_repeated_counts_once_at_the_home(world: World) -> None:
    """A settle's report dropped by a blackhole reaches the home with the next tick after
    heal; a report the home applied but whose answer was dropped is sent again, and the
    home's used is the region's used exactly, never more."""
    await world.home.admin.PutBudget(pb.PutBudgetRequest(budget_id="b", limit=LIMIT, unit="t"))
    eu, relay = world.regions["eu"], world.relays["eu"]
    first = await world.reserve("eu", "k1", 300)
    second = await world.reserve("eu", "k2", 200)
    assert first is not None
    assert second is not None
    assert (True, True) == (first.admitted, second.admitted)

    # Lost: the report of the first settle goes into a blackhole.
    relay.blackhole()
    await world.settle("eu", first.reservation_id, 250)
    tick = asyncio.create_task(eu.tick())
    try:

        async def dropped() -> bool:
            return relay.dropped_bytes > 0

        await eventually(dropped, within_seconds=5, what="a tick lost in the blackhole")
        assert 0 == await home_used(world)
    finally:
        relay.heal()
        await tick
    # The next tick carries the lost counts.
    await eu.tick()

    async def reported(used: int) -> bool:
        return await home_used(world) == used

    await eventually(lambda: reported(250), within_seconds=5, what="the report after heal")

    # Repeated: the home applies the second settle's report, its answer is dropped (the
    # relay drops what the home sends, not what it is sent), and the region, which never
    # saw the answer, reports the same counts again.
    await world.settle("eu", second.reservation_id, 150)
    failed = metric(eu, ASKS, kind="background", outcome="failed")
    relay.blackhole(answers_only=True)
    tick = asyncio.create_task(eu.tick())
    try:
        await eventually(lambda: reported(400), within_seconds=5, what="the report at home")
    finally:
        # No answer can come: the call fails at its deadline (limits.region_call_seconds).
        await tick
        relay.heal()
    assert failed + 1 == metric(eu, ASKS, kind="background", outcome="failed")
    answered = metric(eu, ASKS, kind="background", outcome="answered")

    async def sent_again() -> bool:
        await eu.tick()
        return metric(eu, ASKS, kind="background", outcome="answered") > answered

    # The region sends its counts again (it never saw them acknowledged), and the home
    # counts them once.
    await eventually(sent_again, within_seconds=10, what="the counts sent again")
    assert 400 == await home_used(world)
    share = await home_share(world, "eu")
    assert share is not None
    assert 400 == share["used"]
    region_row = await fetch_budget_row(eu.dsn, "b")
    assert 400 == region_row["used"]
    # The home's ledger moved used by the region's reports 400 in all, once.
    moved = await fetch(
        world.home.dsn, "SELECT sum(used_delta) AS s FROM ledger WHERE budget_id = 'b'"
    )
    assert 400 == moved[0]["s"]
    assert 400 == world.told.spent() <= LIMIT
    assert [] == world.told.errors
    await world.audit()
