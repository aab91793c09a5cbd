"""The home restarted mid-grant (issue 48): a grant the home committed whose answer never
reached the region, asks and reports that failed while the home was down; once the home is
back on the same database, the regions' next ticks carry their cumulative counts, every
share converges, and nothing is granted twice."""

from __future__ import annotations

import asyncio

import pytest

from earmark.v1 import budget_pb2 as pb
from tests.helpers import eventually, fetch_budget_row
from tests.regions.conftest import REGIONS, World, fetch, home_share, metric, region_state

pytestmark = pytest.mark.xdist_group("regions")

LIMIT = 10_000
ASKS = "earmark_region_asks_total"


async def sides_agree(world: World, name: str) -> bool:
    """The home's record of the region's share is the region's own: granted, released
    (what it gave back, or the home took back) and used."""
    at_home = await home_share(world, name)
    there = await region_state(world, name)
    if at_home is None or there is None:
        return False
    used = (await fetch_budget_row(world.regions[name].dsn, "b"))["used"]
    released = max(at_home["returned"], at_home["reclaimed_to"])
    return bool(
        (at_home["granted"], released, at_home["used"])
        == (there["granted"], there["returned"], used)
    )


async def test_the_home_restarted_mid_grant_grants_nothing_twice(world: World) -> None:
    """eu's ask is granted at the home and its answer lost (the link cut while it travels);
    the home stops while ap asks, settles happen in both regions while it is down and their
    reports fail; the home starts again on its database. The next ticks report and learn
    the lost grant: each share's granted, released and used agree on both sides, the lost
    grant counted once, the home's used is what the regions settled; nothing spent past
    the limit; every ledger audits clean."""
    home, eu, ap = world.home, world.regions["eu"], world.regions["ap"]
    await home.admin.PutBudget(pb.PutBudgetRequest(budget_id="b", limit=LIMIT, unit="t"))
    e1 = await world.reserve("eu", "e1", 100)
    a1 = await world.reserve("ap", "a1", 100)
    assert e1 is not None
    assert a1 is not None
    assert (True, True) == (e1.admitted, a1.admitted)

    # eu asks for 1_000 more; the home grants it, and the answer is lost on the way.
    world.relays["eu"].set_delay(0.3)
    asking = asyncio.create_task(world.reserve("eu", "e2", 1_000))

    async def granted() -> bool:
        share = await home_share(world, "eu")
        return share is not None and share["granted"] == 1_100

    try:
        await eventually(granted, within_seconds=5, what="eu's grant at the home")
        world.relays["eu"].cut()
        # The home stops while ap asks.
        ap_asking = asyncio.create_task(world.reserve("ap", "a2", 500))
        await home.stop()
    finally:
        e2 = await asking
    a2 = await ap_asking
    assert e2 is not None
    assert (False, pb.REFUSAL_REASON_INSUFFICIENT_BUDGET) == (e2.admitted, e2.reason)

    # While the home is down: settles in both regions, and their reports fail.
    await world.settle("eu", e1.reservation_id, 60)
    await world.settle("ap", a1.reservation_id, 70)
    failed = metric(ap, ASKS, kind="background", outcome="failed")
    await ap.tick()
    assert metric(ap, ASKS, kind="background", outcome="failed") == failed + 1

    # On a port of its own: see test_the_home_restarted_on_its_region_port_listens_again.
    await world.start_home(same_port=False)
    world.relays["eu"].heal()
    world.relays["eu"].set_delay(0.04)
    for node in (eu, ap):
        await node.tick()

    async def agree() -> bool:
        # A tick a poll: the first calls after the relays came back may find gRPC waiting
        # out its reconnect backoff, and the next tick carries the same counts.
        for node in (eu, ap):
            await node.tick()
        return all([await sides_agree(world, name) for name in REGIONS])

    await eventually(agree, within_seconds=5, what="every share the same on both sides")
    # The lost grant counted once: eu's ticks asked for no more than it had.
    eu_share = await home_share(world, "eu")
    assert eu_share is not None
    assert 1_100 == eu_share["granted"]
    settled_a2 = 0
    if a2 is not None and a2.admitted:
        await world.settle("ap", a2.reservation_id, 500)
        settled_a2 = 500
        await ap.tick()

    async def all_reported() -> bool:
        for node in (eu, ap):
            await node.tick()
        return (await fetch_budget_row(home.dsn, "b"))["used"] == 60 + 70 + settled_a2

    await eventually(all_reported, within_seconds=5, what="the regions' use at the home")
    rows = await fetch(home.dsn, "SELECT region, used FROM region_shares ORDER BY region")
    assert [("ap", 70 + settled_a2), ("eu", 60)] == [(r["region"], r["used"]) for r in rows]
    home_row = await fetch_budget_row(home.dsn, "b")
    assert home_row["used"] + home_row["held"] <= LIMIT
    assert world.told.spent() == 60 + 70 + settled_a2 <= LIMIT
    await world.audit()


async def test_the_home_restarted_on_its_region_port_listens_again(world: World) -> None:
    """The home, eu connected to it through its relay, stops and starts again on the same
    region port at once; eu reaches it there and its next Reserve is asked of it."""
    await world.home.admin.PutBudget(pb.PutBudgetRequest(budget_id="b", limit=LIMIT, unit="t"))
    first = await world.reserve("eu", "e1", 100)
    assert first is not None
    assert first.admitted
    # eu far away while the home stops (300 ms each way): the home closes its end of the
    # link first, and that end waits in TIME_WAIT.
    world.relays["eu"].set_delay(0.3)
    await world.home.stop()
    world.relays["eu"].set_delay(0.04)
    try:
        await world.start_home(same_port=True)
        more = await world.reserve("eu", "e2", 200)
        assert more is not None
        assert more.admitted
    finally:
        assert world.told.spent() <= LIMIT
        if world.home.sidecar is not None:
            await world.audit()
