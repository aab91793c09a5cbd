"""A region whose link to the home is up but quiet (issue 48): a Reserve its share cannot
admit must still be asked of the home, which has room; a region refuses at once only when
it is cut off (a call to the home failed since it last answered). A regression test: the
agent once refused after HOME_SILENCE without a call, however quiet the link was."""

from __future__ import annotations

from datetime import timedelta

import pytest

from earmark.core import regions
from earmark.v1 import budget_pb2 as pb
from tests.helpers import fetch_budget_row
from tests.regions.conftest import World

pytestmark = pytest.mark.xdist_group("regions")

LIMIT = 10_000


async def test_a_region_quiet_for_longer_than_home_silence_still_asks_the_home(
    world: World,
) -> None:
    """eu holds a share with no room left; after HOME_SILENCE and a second of quiet on every
    clock (its ticks had nothing to send: no renewal due, no use to report, rate 0), a
    Reserve of 500 is asked of the home, which has 9_900 free, and admitted."""
    eu = world.regions["eu"]
    await world.home.admin.PutBudget(pb.PutBudgetRequest(budget_id="b", limit=LIMIT, unit="t"))
    first = await world.reserve("eu", "k1", 100)
    assert first is not None
    assert first.admitted
    await eu.tick()
    world.advance(regions.HOME_SILENCE + timedelta(seconds=1))
    await eu.tick()
    more = await world.reserve("eu", "k2", 500)
    assert more is not None
    assert (True, pb.REFUSAL_REASON_UNSPECIFIED) == (more.admitted, more.reason)
    home_row = await fetch_budget_row(world.home.dsn, "b")
    assert (0, 600) == (home_row["used"], home_row["held"])
    assert 600 == world.told.spent() <= LIMIT
    assert [] == world.told.errors
    await world.audit()
