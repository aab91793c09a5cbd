"""A region cut off from the home for longer than its share's lease (issue 48): it admits
within its share alone while cut, refuses with a reason of its own once its lease ended on
its clock, and the home takes the share back once the lease ended on the home's clock the
settle grace and the clocks' margin ago; the other regions then use what came back, and the
cut region's use, reported after heal, counts at the home once."""

from __future__ import annotations

from datetime import timedelta

import pytest

from earmark.core import regions
from earmark.v1 import budget_pb2 as pb
from tests.conftest import CLOCK_START
from tests.helpers import eventually, fetch_budget_row
from tests.regions.conftest import World, home_share, metric

pytestmark = pytest.mark.xdist_group("regions")

LIMIT = 10_000
SKEW = timedelta(seconds=1)
RECLAIMED = "earmark_region_reclaimed_units_total"


async def test_a_region_cut_off_past_its_lease_refuses_and_its_share_comes_back(
    world: World,
) -> None:
    """eu (its clock the most skew behind, the home's the most ahead) builds a share from
    its admission rate, is cut, admits to the end of its share alone and settles; past its
    lease it refuses with SHARE_LEASE_ENDED; the home reclaims the share's outstanding
    escrow, ap is admitted more than was free before; after heal eu's use reaches the home
    once. What callers were told never spends past the limit; every ledger audits clean."""
    eu, home, relay = world.regions["eu"], world.home, world.relays["eu"]
    home.clock.set(CLOCK_START + SKEW)
    eu.clock.set(CLOCK_START - SKEW)
    await home.admin.PutBudget(pb.PutBudgetRequest(budget_id="b", limit=LIMIT, unit="t"))

    # A share sized from eu's rate: 600 admitted over 4 s.
    first = await world.reserve("eu", "k1", 100)
    await eu.tick()
    world.advance(timedelta(seconds=4))
    second = await world.reserve("eu", "k2", 500)
    await eu.tick()
    assert first is not None
    assert second is not None
    assert (True, True) == (first.admitted, second.admitted)

    relay.cut()
    row = await fetch_budget_row(eu.dsn, "b")
    room = row["limit_units"] - row["used"] - row["held"]
    assert room > 0, row
    # Cut off, eu admits to the end of its share, alone, and refuses one unit more.
    within = await world.reserve("eu", "k3", room)
    beyond = await world.reserve("eu", "k4", 1)
    assert within is not None
    assert beyond is not None
    assert within.admitted
    assert (False, pb.REFUSAL_REASON_INSUFFICIENT_BUDGET) == (beyond.admitted, beyond.reason)
    for reservation, used in ((first, 100), (second, 400), (within, room - 50)):
        await world.settle("eu", reservation.reservation_id, used)
    settled_in_eu = 100 + 400 + room - 50

    # What the home leased to eu, none of it reported used: held at the home.
    share = await home_share(world, "eu")
    assert share is not None
    outstanding = share["granted"] - share["returned"] - share["used"]
    home_row = await fetch_budget_row(home.dsn, "b")
    assert (0, outstanding) == (home_row["used"], home_row["held"])
    free_before = LIMIT - outstanding

    # Time passes everywhere alike (the skews kept), past eu's lease on its clock and the
    # home's reclaim delay on the home's.
    eu_lease = row["share_until"]
    past = max(
        eu_lease - eu.clock() + timedelta(seconds=1),
        share["lease_until"] + regions.RECLAIM_AFTER - home.clock(),
    )
    world.advance(past)
    assert eu.clock() > eu_lease
    late = await world.reserve("eu", "k5", 1)
    assert late is not None
    assert (False, pb.REFUSAL_REASON_SHARE_LEASE_ENDED) == (late.admitted, late.reason)
    assert 7 == pb.REFUSAL_REASON_SHARE_LEASE_ENDED

    async def reclaimed() -> bool:
        return (await fetch_budget_row(home.dsn, "b"))["held"] == 0

    await eventually(reclaimed, within_seconds=5, what="eu's share reclaimed at the home")
    assert outstanding == metric(home, RECLAIMED)

    # ap is admitted more than was free at the home before the reclaim (within what eu's
    # unreported use leaves of the limit).
    wanted = free_before + (LIMIT - free_before - settled_in_eu) // 2
    assert free_before < wanted <= LIMIT - settled_in_eu
    taken = await world.reserve("ap", "a1", wanted)
    assert taken is not None
    assert taken.admitted
    await world.settle("ap", taken.reservation_id, wanted)
    await world.regions["ap"].tick()

    # After heal, eu's next ticks renew and report: its use counts at the home once.
    relay.heal()
    await eu.tick()

    async def reported() -> bool:
        # A tick a poll: the first call after heal may find gRPC waiting out its reconnect
        # backoff, and the next tick carries the same counts.
        await eu.tick()
        at_home = await home_share(world, "eu")
        return at_home is not None and at_home["used"] == settled_in_eu

    await eventually(reported, within_seconds=5, what="eu's use reported after heal")

    async def all_used() -> bool:
        await world.regions["ap"].tick()
        return (await fetch_budget_row(home.dsn, "b"))["used"] == settled_in_eu + wanted

    await eventually(all_used, within_seconds=5, what="ap's and eu's use at the home")
    await eu.tick()
    assert settled_in_eu + wanted == (await fetch_budget_row(home.dsn, "b"))["used"]
    assert world.told.spent() == settled_in_eu + wanted <= LIMIT
    assert [] == world.told.errors
    await world.audit()
