"""Budgets across regions (issue 48) in the store: the home's shares and a region's, each in
its own database on one server, moved by hand as the region's sidecar moves them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import timedelta

import pytest

from earmark.core import regions
from earmark.core.model import Outcome, Policies, RefusalReason
from earmark.core.ops import ChargeOp, RenewOp, RenewResult, ReserveOp, ReserveResult, SettleOp
from earmark.core.periods import Calendar, Period
from earmark.errors import FailedPrecondition, InvalidArgument, Reason
from earmark.store.regions import ShareAskInput, ShareOutcome
from earmark.store.store import Store
from tests.helpers import FakeClock, assert_invariants, fetch_budget_row

EU = "eu"
DAILY = Policies(calendar=Calendar(Period.DAY))
MINUTE = timedelta(minutes=1)


@dataclass
class Pair:
    home: Store
    region: Store
    clock: FakeClock
    home_dsn: str
    region_dsn: str

    async def ask(self, want: int, need: int = 0, budget_id: str = "b") -> ShareOutcome:
        """The region asks the home and applies its answer, as its sidecar does."""
        shares = await self.region.region_shares()
        share = next((s for s in shares if s.budget_id == budget_id), None)
        returned, used, doubt = (
            (0, 0, 0) if share is None else (share.returned, share.used, share.doubt)
        )
        ask = regions.Ask(EU, self.clock(), want, returned, used, need, doubt)
        (outcome,) = await self.home.answer_shares([ShareAskInput(EU, budget_id, ask)])
        await self.region.apply_share_answer(EU, outcome)
        return outcome

    async def audit(self) -> None:
        await assert_invariants(self.home_dsn)
        await assert_invariants(self.region_dsn)


@pytest.fixture
async def pair(dsn: str, region_dsn: str, clock: FakeClock) -> AsyncIterator[Pair]:
    home = await Store.open(dsn, clock=clock)
    region = await Store.open(region_dsn, clock=clock)
    try:
        await home.put_budget("b", 10_000, "usd_micros")
        yield Pair(home, region, clock, dsn, region_dsn)
    finally:
        await region.close()
        await home.close()


def reserve(amount: int, key: str, lease: timedelta = MINUTE) -> ReserveOp:
    return ReserveOp(
        budget_id="b",
        idempotency_key=key,
        amount=amount,
        lease=lease,
        new_reservation_id=f"00000000-0000-4000-8000-{abs(hash(key)) % 10**12:012d}",
    )


async def admit(store: Store, amount: int, key: str, lease: timedelta = MINUTE) -> ReserveResult:
    result = await store.submit(reserve(amount, key, lease))
    assert isinstance(result, ReserveResult)
    return result


async def test_a_grant_is_held_at_the_home_and_is_the_regions_limit(pair: Pair) -> None:
    """A share granted is held on the home's budget (its Reserves fit beside it) and is the
    limit of the region's budget row, leased until the share's lease less the margin."""
    outcome = await pair.ask(want=2_000)
    home = await fetch_budget_row(pair.home_dsn, "b")
    region = await fetch_budget_row(pair.region_dsn, "b")
    until = pair.clock() + regions.SHARE_LEASE - regions.LEASE_MARGIN
    assert (2_000, 2_000, 0) == (outcome.granted_now, home["held"], home["used"])
    assert (2_000, until, "usd_micros") == (
        region["limit_units"],
        region["share_until"],
        region["unit"],
    )
    refused = await admit(pair.home, 8_001, "home-1")
    assert (False, 8_000) == (refused.admitted, refused.remaining)
    await pair.audit()


async def test_a_region_admits_alone_and_its_use_reaches_the_home_once(pair: Pair) -> None:
    """The region admits within its share, refuses past it, and its settled use, reported
    twice, counts once at the home: used there, and the escrow less by as much."""
    await pair.ask(want=2_000)
    first = await admit(pair.region, 1_500, "r-1")
    over = await admit(pair.region, 600, "r-2")
    settled = await pair.region.submit(SettleOp(first.reservation_id, 1_200, Outcome.SUCCEEDED))
    assert settled is not None
    await pair.ask(want=0)
    await pair.ask(want=0)
    home = await fetch_budget_row(pair.home_dsn, "b")
    assert (True, False, RefusalReason.INSUFFICIENT_BUDGET) == (
        first.admitted,
        over.admitted,
        over.reason,
    )
    assert (1_200, 800) == (home["used"], home["held"])
    await pair.audit()


async def test_a_hold_must_end_the_grace_before_the_share(pair: Pair) -> None:
    """A Reserve whose lease and the settle grace outlive the share is refused with a reason
    of its own, and one after the share's lease ended with another; a Renew stops at the
    grace before the share's lease."""
    await pair.ask(want=2_000)
    left = regions.SHARE_LEASE - regions.LEASE_MARGIN
    long = await admit(pair.region, 10, "long", lease=left)
    short = await admit(pair.region, 10, "short")
    renewed = await pair.region.submit(RenewOp(short.reservation_id, left))
    assert isinstance(renewed, RenewResult)
    pair.clock.advance(left)
    ended = await admit(pair.region, 10, "ended")
    assert (RefusalReason.HOLD_OUTLIVES_SHARE, RefusalReason.SHARE_LEASE_ENDED) == (
        long.reason,
        ended.reason,
    )
    cap = pair.clock() - regions.SETTLE_GRACE
    assert cap == renewed.expires_at
    await pair.audit()


async def test_an_expired_share_is_taken_back_and_later_use_is_late(pair: Pair) -> None:
    """Once the share's lease, the grace and the margin passed, the home takes back its
    escrow (and not before); use the region reports after is a late settle, and the region
    learns of the reclaim from the next answer."""
    await pair.ask(want=2_000)
    held = await admit(pair.region, 500, "r-1")
    pair.clock.advance(regions.SHARE_LEASE + regions.RECLAIM_AFTER - timedelta(seconds=1))
    early = await pair.home.reclaim_shares()
    pair.clock.advance(timedelta(seconds=1))
    taken = await pair.home.reclaim_shares()
    # The hold's lease passed long ago: its settle is late in the region too.
    await pair.region.submit(SettleOp(held.reservation_id, 300, Outcome.SUCCEEDED))
    await pair.ask(want=0)
    home = await fetch_budget_row(pair.home_dsn, "b")
    region = await fetch_budget_row(pair.region_dsn, "b")
    assert (0, 2_000) == (early, taken)
    assert (300, 0) == (home["used"], home["held"])
    assert 0 == region["limit_units"]
    await pair.audit()


async def test_idle_room_goes_back(pair: Pair) -> None:
    """The region gives back its room beyond what it keeps, and the home's free grows once
    the return is reported."""
    await pair.ask(want=2_000)
    given = await pair.region.give_back_share(EU, "b", 500, short=False)
    await pair.ask(want=0)
    home = await fetch_budget_row(pair.home_dsn, "b")
    region = await fetch_budget_row(pair.region_dsn, "b")
    assert (1_500, 500, 500) == (given, region["limit_units"], home["held"])
    await pair.audit()


async def test_the_last_units_go_to_whoever_asks(pair: Pair) -> None:
    """Near the limit, a waiting Reserve's need is granted whole though the demarcation
    rule would grant nothing."""
    await admit(pair.home, 9_990, "home-1")
    background = await pair.ask(want=1_000)
    needed = await pair.ask(want=0, need=10)
    assert (0, 10) == (background.granted_now, needed.granted_now)
    assert (await admit(pair.region, 10, "r-1")).admitted
    await pair.audit()


async def test_a_budget_with_a_period_is_not_shared(pair: Pair) -> None:
    """Regions share budgets without a period: the home says why, and nothing is made."""
    await pair.home.put_budget("p", 100, "usd_micros", policies=DAILY)
    outcome = await pair.ask(want=10, budget_id="p")
    assert (False, []) == (outcome.found, await pair.region.region_shares())


async def test_a_region_budget_of_its_own_is_not_made_a_share(pair: Pair) -> None:
    """A share never takes over a budget the region has as its own."""
    await pair.region.put_budget("b", 5, "usd_micros")
    with pytest.raises(FailedPrecondition) as raised:
        await pair.ask(want=10)
    assert Reason.BUDGET_NOT_SHARED == raised.value.reason


async def test_an_operator_changes_a_shared_budget_at_its_home_only(pair: Pair) -> None:
    """In a region, a share's budget is not put, updated or archived by hand; at the home,
    a budget with shares takes no period and is not archived while they are leased."""
    await pair.ask(want=2_000)
    refusals = []
    for change in (
        pair.region.put_budget("b", 5, "usd_micros"),
        pair.region.archive_budget("b"),
        pair.home.archive_budget("b"),
    ):
        with pytest.raises(FailedPrecondition) as raised:
            await change
        refusals.append(raised.value.reason)
    with pytest.raises(InvalidArgument) as period:
        await pair.home.put_budget("b", 10_000, "usd_micros", policies=DAILY)
    assert [Reason.BUDGET_IS_SHARE, Reason.BUDGET_IS_SHARE, Reason.BUDGET_HAS_OPEN_HOLDS] == (
        refusals
    )
    assert "period" == period.value.field
    await pair.audit()


async def test_a_reclaim_keeps_what_holds_in_doubt_hold(pair: Pair) -> None:
    """A region's hold whose call was sent (charged) goes into doubt past its lease; the
    region reports it, and the home's reclaim leaves it held (2,000 granted, 100 charged,
    400 in doubt: 1,500 taken back): its settle is then within the share, not late."""
    await pair.ask(want=2_000)
    held = await admit(pair.region, 500, "r-1")
    await pair.region.submit(ChargeOp(held.reservation_id, "c-1", 100))
    pair.clock.advance(2 * MINUTE)
    await pair.region.sweep_once()
    await pair.ask(want=0)
    pair.clock.advance(regions.SHARE_LEASE + regions.RECLAIM_AFTER)
    taken = await pair.home.reclaim_shares()
    await pair.region.submit(SettleOp(held.reservation_id, 450, Outcome.SUCCEEDED))
    await pair.ask(want=0)
    # The ask renewed the share; once it lapses again, what the hold in doubt held and its
    # settle did not use comes back too.
    pair.clock.advance(regions.SHARE_LEASE + regions.RECLAIM_AFTER)
    rest = await pair.home.reclaim_shares()
    home = await fetch_budget_row(pair.home_dsn, "b")
    region = await fetch_budget_row(pair.region_dsn, "b")
    assert (1_500, 50) == (taken, rest)
    assert (450, 0, 0) == (home["used"], home["held"], region["held"])
    await pair.audit()


async def test_use_past_the_share_is_late_once_and_the_next_grant_goes_through(
    pair: Pair,
) -> None:
    """A region's settle past its share counts late at the home once, and the share is
    granted again afterwards: the grant absorbs the excess, and nothing is counted twice."""
    await pair.ask(want=1_000)
    held = await admit(pair.region, 1_000, "r-1")
    await pair.region.submit(SettleOp(held.reservation_id, 1_500, Outcome.SUCCEEDED))
    await pair.ask(want=0)
    again = await pair.ask(want=0, need=800)
    home = await fetch_budget_row(pair.home_dsn, "b")
    region = await fetch_budget_row(pair.region_dsn, "b")
    assert (True, 800) == (again.found, again.granted_now)
    # 1,800 granted, 1,500 used: 300 of room in the region, held for it at the home.
    assert (1_500, 300, 300) == (home["used"], home["held"], region["limit_units"] - 1_500)
    await pair.audit()


async def test_a_region_back_after_a_reclaim_reports_late_use_and_asks_again(pair: Pair) -> None:
    """Cut off past its lease, a region's share is taken back; its late settle is counted
    once when it comes back, and its next grant goes first to that late use (which the
    home counts already): it holds nothing more at the home."""
    await pair.ask(want=2_000)
    held = await admit(pair.region, 500, "r-1")
    pair.clock.advance(regions.SHARE_LEASE + regions.RECLAIM_AFTER)
    await pair.home.reclaim_shares()
    await pair.region.submit(SettleOp(held.reservation_id, 400, Outcome.SUCCEEDED))
    back = await pair.ask(want=0, need=100)
    home = await fetch_budget_row(pair.home_dsn, "b")
    assert (True, 100, 400, 0) == (back.found, back.granted_now, home["used"], home["held"])
    await pair.audit()


async def test_a_report_the_home_cannot_believe_changes_nothing(pair: Pair) -> None:
    """A region reporting more given back, or more in doubt, than it was ever granted is
    answered not found, with the field, and nothing at the home moves."""
    await pair.ask(want=1_000)
    before = await fetch_budget_row(pair.home_dsn, "b")
    outcomes = []
    for returned, doubt in ((5_000, 0), (0, 5_000)):
        ask = regions.Ask(EU, pair.clock(), 0, returned, 0, 0, doubt)
        (outcome,) = await pair.home.answer_shares([ShareAskInput(EU, "b", ask)])
        outcomes.append((outcome.found, outcome.message.split(":")[0]))
    after = await fetch_budget_row(pair.home_dsn, "b")
    assert [(False, "returned"), (False, "doubt")] == outcomes
    assert (before["held"], before["used"]) == (after["held"], after["used"])
    await pair.audit()


async def test_a_shared_budget_keeps_its_unit_at_its_home(pair: Pair) -> None:
    """With shares out, the home's budget cannot change its unit (a grant in tokens would
    become a region's limit in dollars)."""
    await pair.ask(want=1_000)
    await pair.region.give_back_share(EU, "b", 0, short=False)
    await pair.ask(want=0)
    with pytest.raises(FailedPrecondition) as raised:
        await pair.home.put_budget("b", 10_000, "tokens")
    assert Reason.UNIT_LOCKED == raised.value.reason


async def test_an_answer_in_another_unit_is_not_applied_in_the_region(pair: Pair) -> None:
    """A region's share keeps the unit it was made in: an answer naming another is refused
    UNIT_MISMATCH and changes nothing."""
    first = await pair.ask(want=1_000)
    before = await fetch_budget_row(pair.region_dsn, "b")
    other = replace(first, unit="tokens")
    with pytest.raises(FailedPrecondition) as raised:
        await pair.region.apply_share_answer(EU, other)
    after = await fetch_budget_row(pair.region_dsn, "b")
    assert (Reason.UNIT_MISMATCH, before) == (raised.value.reason, after)
    await pair.audit()
