"""Budgets across regions (issue 48): the home's and a region's pure rules, one at a time."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from earmark import limits
from earmark.core.regions import (
    HOME_SILENCE,
    LEASE_MARGIN,
    RECLAIM_AFTER,
    SETTLE_GRACE,
    SHARE_LEASE,
    AdmitInput,
    Answer,
    Ask,
    Home,
    HomeShare,
    NeedInput,
    Region,
    RegionRefusal,
    Report,
    Verdict,
    answer_ask,
    apply_report,
    grant_size,
    home_admit,
    reclaim,
    reclaim_due,
    region_admit,
    region_answer,
    region_ask,
    region_expire,
    region_return,
    region_settle,
    share_floor,
)

T0 = datetime(2026, 12, 1, 12, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def ask(region: str = "eu", want: int = 1_000, at: datetime = T0) -> Ask:
    return Ask(region, at, want, 0, 0)


def leased(home: Home, region: str = "eu", want: int = 1_000) -> tuple[Home, Region]:
    """A region that asked at T0 for want and applied the home's answer."""
    asked = answer_ask(home, ask(region, want), T0)
    return asked.home, region_answer(Region(region), asked.answer, T0)


def admit(region: Region, amount: int, at: datetime = T0, hold: str = "h") -> Verdict:
    return region_admit(AdmitInput(region, hold, amount, MINUTE, at)).verdict


def test_a_grant_never_passes_the_limit() -> None:
    """However much regions ask, the home's shares and its own holds stay within the limit."""
    home = Home(limit=1_000, used_local=300, held_local=200)
    for i in range(50):
        home = answer_ask(home, ask(f"r{i % 3}", want=10**9, at=T0), T0).home
    assert (True, True) == (home.committed <= home.limit, home.granted_out <= home.limit)


def test_shares_shrink_near_the_limit() -> None:
    """Each grant is at most a fraction of what is free at the home, so each is smaller."""
    home = Home(limit=100_000)
    sizes = []
    for i in range(4):
        asked = answer_ask(home, ask(f"r{i}", want=10**9), T0)
        home = asked.home
        sizes.append(asked.granted)
    # Capped at a quarter of the limit, then half of what is free.
    assert [25_000, 25_000, 25_000, 12_500] == sizes


def test_below_the_floor_the_home_grants_nothing() -> None:
    """With less free than the floor's worth of a grant, a region gets nothing."""
    home = Home(limit=1_000_000, used_local=1_000_000 - share_floor(1_000_000))
    assert 0 == grant_size(home, "eu", 10**9)


def test_a_region_cut_off_admits_within_its_share_until_its_lease_ends() -> None:
    """Without the home (its calls fail: the agent's every tick tries), a region admits while
    its share has room and its lease lasts, then refuses with a reason of its own, without
    asking."""
    _, region = leased(Home(limit=100_000), want=1_000)
    late = T0 + SHARE_LEASE - LEASE_MARGIN - SETTLE_GRACE
    region = replace(region, failed_at=T0 + MINUTE)
    ok = region_admit(AdmitInput(region, "a", 600, MINUTE, T0 + MINUTE))
    spent = region_admit(AdmitInput(ok.region, "b", 600, MINUTE, T0 + MINUTE))
    cut = replace(ok.region, failed_at=late)
    ended = region_admit(AdmitInput(cut, "c", 1, MINUTE, late))
    assert [
        (Verdict.ADMIT, None),
        (Verdict.REFUSE, RegionRefusal.SHARE_SPENT),
        (Verdict.REFUSE, RegionRefusal.SHARE_LEASE_ENDED),
    ] == [(a.verdict, a.reason) for a in (ok, spent, ended)]


def test_a_hold_that_would_outlive_the_share_is_not_admitted() -> None:
    """A hold must end the settle grace before the region's view of the share's lease."""
    _, region = leased(Home(limit=100_000))
    long = region_admit(AdmitInput(region, "a", 1, SHARE_LEASE, T0))
    assert (Verdict.ASK, RegionRefusal.HOLD_OUTLIVES_SHARE) == (long.verdict, long.reason)


def test_a_region_whose_calls_go_through_asks_however_long_it_was_quiet() -> None:
    """A Reserve the share cannot admit asks the home unless a call to it failed since it
    last answered, within HOME_SILENCE; a region quiet for an hour with its link up asks."""
    _, region = leased(Home(limit=100_000), want=1_000)
    hour = T0 + 60 * MINUTE
    failed = replace(region, failed_at=hour - HOME_SILENCE)
    stale = replace(region, failed_at=hour - HOME_SILENCE - timedelta(microseconds=1))
    assert [Verdict.ASK, Verdict.REFUSE, Verdict.ASK] == [
        admit(region, 5_000, hour),
        admit(failed, 5_000, hour),
        admit(stale, 5_000, hour),
    ]


def test_the_regions_lease_never_outlives_the_homes() -> None:
    """The region counts its lease from when it sent the ask, less the clocks' margin."""
    asked = answer_ask(Home(limit=100_000), ask(at=T0), T0 + timedelta(seconds=3))
    region = region_answer(Region("eu"), asked.answer, T0 + timedelta(seconds=6))
    home_until = asked.home.share("eu").lease_until
    assert home_until is not None
    assert T0 + SHARE_LEASE - LEASE_MARGIN == region.lease_until
    assert region.lease_until < home_until


def test_the_home_never_reclaims_before_the_lease_grace_and_margin() -> None:
    """A share is taken back only once its lease, the settle grace and the margin passed."""
    home, _ = leased(Home(limit=100_000), want=1_000)
    until = T0 + SHARE_LEASE
    early = reclaim(home, "eu", until + RECLAIM_AFTER - timedelta(microseconds=1))
    due = reclaim(home, "eu", until + RECLAIM_AFTER)
    assert (0, 1_000) == (early.amount, due.amount)
    assert (100_000, False) == (
        due.home.free,
        reclaim_due(due.home, "eu", until + RECLAIM_AFTER + MINUTE),
    )


def test_a_report_is_applied_exactly_once_repeated_reordered_or_lost() -> None:
    """Reports carry cumulative counters: a repeat or an older one changes nothing, and a
    later one carries what a lost one said."""
    home, _ = leased(Home(limit=100_000), want=1_000)
    first, second = Report("eu", 0, 100), Report("eu", 50, 300)
    in_order = apply_report(apply_report(home, first), second)
    reordered = apply_report(apply_report(apply_report(home, second), first), second)
    lost_first = apply_report(home, second)
    assert in_order == reordered == lost_first
    assert (300, 50) == (in_order.share("eu").used, in_order.share("eu").returned)


def test_a_region_restart_loses_nothing() -> None:
    """A region's counters, holds and lease are in its database; only what it heard goes."""
    _, region = leased(Home(limit=100_000))
    region = region_admit(AdmitInput(region, "a", 100, MINUTE, T0)).region
    region = region_settle(region, "a", 70, T0 + MINUTE / 2)
    restarted = region.restarted()
    assert (region.report(T0), region.holds, region.lease_until, None) == (
        restarted.report(T0),
        restarted.holds,
        restarted.lease_until,
        restarted.heard_at,
    )


def test_the_last_unit_of_a_budget_can_still_be_spent() -> None:
    """Near the limit the home grants nothing and admits the Reserve the region forwards."""
    home = Home(limit=10, used_local=9)
    asked = answer_ask(home, ask(want=5), T0)
    region = region_answer(Region("eu"), asked.answer, T0)
    forwarded = admit(region, 1)
    at_home = home_admit(asked.home, 1)
    assert (0, Verdict.ASK, True, 0) == (
        asked.granted,
        forwarded,
        at_home.admitted,
        at_home.home.free,
    )


def test_a_region_returns_its_idle_room_and_all_of_it_when_the_home_is_short() -> None:
    """Free room beyond what the region keeps goes back; when the home is short, all of it."""
    _, region = leased(Home(limit=100_000), want=1_000)
    kept = region_return(region, keep=400)
    short = region_return(replace(region, short=True), keep=400)
    assert (600, 1_000) == (kept.returned, short.returned)


def test_a_settle_past_its_hold_or_its_lease_is_late() -> None:
    """Use beyond the hold, or after its lease passed, is recorded in full and counted late."""
    _, region = leased(Home(limit=100_000))
    region = region_admit(AdmitInput(region, "a", 100, MINUTE, T0)).region
    region = region_admit(AdmitInput(region, "b", 100, MINUTE, T0)).region
    over = region_settle(region, "a", 130, T0 + MINUTE / 2)
    after = region_settle(region_expire(over, T0 + 2 * MINUTE), "b", 40, T0 + 2 * MINUTE)
    assert (170, 70, {}) == (after.used, after.late, dict(after.holds))


def test_usage_reported_after_a_reclaim_counts_as_a_late_settle() -> None:
    """Usage a reclaim did not know of is recorded in full at the home, never lost."""
    home, _ = leased(Home(limit=1_000), want=1_000)
    taken = reclaim(home, "eu", T0 + SHARE_LEASE + RECLAIM_AFTER).home
    reported = apply_report(taken, Report("eu", 0, 200))
    assert (200, 200, 800) == (reported.share("eu").used, reported.share("eu").late, reported.free)


def test_a_region_learns_of_a_reclaim_before_it_admits_again() -> None:
    """The answer after a reclaim carries the released level: the old share has no room."""
    home, region = leased(Home(limit=100_000), want=1_000)
    region = region_settle(
        region_admit(AdmitInput(region, "a", 300, MINUTE, T0)).region, "a", 300, T0
    )
    later = T0 + SHARE_LEASE + RECLAIM_AFTER
    home = reclaim(home, "eu", later).home
    asked = answer_ask(home, Ask("eu", later, 0, 0, 0), later)
    region = region_answer(region, asked.answer, later)
    assert (-300, Verdict.ASK) == (region.room, admit(region, 1, later, "b"))


def test_a_region_asks_to_renew_and_to_top_up() -> None:
    """An ask when the lease is near its end or the room is below half the rate's want."""
    _, region = leased(Home(limit=100_000), want=1_000)
    fresh = region_ask(NeedInput(region, 1_000, T0))
    low = region_ask(NeedInput(region, 10_000, T0))
    renew = region_ask(NeedInput(region, 0, T0 + SHARE_LEASE / 2 + MINUTE))
    assert (None, 9_000, 0) == (fresh, low and low.want, renew and renew.want)


def test_reserves_waiting_together_are_granted_as_one_by_one() -> None:
    """Several Reserves in one ask (need their sum, smallest the least one lacks): their
    need whole whenever it is free, past the region's cap as one Reserve's need is; near the
    limit all that is free when one of them fits in it, and nothing when none does."""
    group = region_ask(NeedInput(Region("eu"), 0, T0, need=3_000, smallest=100))
    assert group is not None
    assert (0, 3_000, 100) == (group.want, group.need, group.smallest)
    assert 3_000 == answer_ask(Home(limit=10_000), group, T0).granted
    near = Home(limit=10_000, used_local=9_850)
    fits = replace(group, need=300, smallest=100)
    one_fits = replace(group, need=1_100, smallest=100)
    none_fits = replace(group, need=400, smallest=200)
    alone = replace(group, need=200, smallest=0)
    granted = [answer_ask(near, a, T0).granted for a in (fits, one_fits, none_fits, alone)]
    assert [150, 150, 0, 0] == granted


def test_an_answer_repeated_or_reordered_changes_nothing_more() -> None:
    """Answers carry cumulative grants and are merged by max."""
    home = Home(limit=100_000)
    one = answer_ask(home, ask(want=1_000, at=T0), T0)
    two = answer_ask(one.home, ask(want=1_000, at=T0 + MINUTE), T0 + MINUTE)
    answers: list[Answer] = [one.answer, two.answer]
    forward = Region("eu")
    backward = Region("eu")
    for a in answers:
        forward = region_answer(forward, a, T0 + MINUTE)
    for a in [*reversed(answers), *answers]:
        backward = region_answer(backward, a, T0 + MINUTE)
    assert forward == backward
    share = HomeShare(granted=2_000, lease_until=T0 + MINUTE + SHARE_LEASE, doubt_at=T0 + MINUTE)
    assert (2_000, share) == (
        forward.granted,
        two.home.share("eu"),
    )


def test_the_limits_leave_room_for_a_hold_in_a_renewed_share() -> None:
    """A hold of the shortest lease fits in a share renewed as its renewal falls due."""
    assert limits.lease_seconds_min + limits.region_settle_grace_seconds < (
        limits.region_share_renew_seconds - limits.region_lease_margin_seconds
    )


def test_a_waiting_reserve_gets_the_last_units_wherever_it_asks() -> None:
    """A Reserve's need is granted whole when the home has it free, past the fraction and
    the floor; the next region to need them is granted nothing."""
    home = Home(limit=4)
    first = answer_ask(home, Ask("eu", T0, want=0, returned=0, used=0, need=4), T0)
    second = answer_ask(first.home, Ask("us", T0, want=0, returned=0, used=0, need=4), T0)
    assert (4, 0, 0) == (first.granted, second.granted, second.home.free)


def test_a_reclaim_keeps_what_holds_in_doubt_hold() -> None:
    """A hold whose call was sent stays held past its lease (in doubt); the home, told of
    it, keeps it held when it takes the rest of the share back, and its settle is then
    within the share, not late."""
    home, region = leased(Home(limit=100_000))
    region = region_admit(AdmitInput(region, "a", 300, MINUTE, T0, dispatched=True)).region
    later = T0 + 2 * MINUTE
    region = region_expire(region, later)
    home = apply_report(home, region.report(later))
    due = home.share("eu").lease_until
    assert due is not None
    taken = reclaim(home, "eu", due + RECLAIM_AFTER)
    settled = region_settle(region, "a", 300, due)
    after = apply_report(taken.home, settled.report(due + RECLAIM_AFTER))
    share = after.share("eu")
    assert (300, 0, 0) == (region.doubt(later), settled.late, share.late)
    assert (share.granted - 300, 0) == (taken.amount, share.outstanding)


def test_the_reclaim_waits_out_every_holds_grace_at_the_worst_clocks() -> None:
    """The region's clock a second ahead when it asks and a second behind when its last
    hold ends, the home's a second behind when it answers and a second ahead when it
    reclaims: the reclaim still comes the settle grace after that hold ended (true time)."""
    skew = timedelta(seconds=limits.region_clock_skew_seconds_max)
    asked = answer_ask(Home(limit=100_000), ask(at=T0 + skew), T0 - skew)
    region = region_answer(Region("eu"), asked.answer, T0 + skew)
    assert region.lease_until is not None
    # The last hold the region admits ends the grace before its view of the lease, which
    # its clock (a second behind) reads at true time + skew.
    hold_ends = region.lease_until - SETTLE_GRACE + skew
    share = asked.home.share("eu")
    assert share.lease_until is not None
    # The home's clock (a second ahead) reaches lease + RECLAIM_AFTER at true time - skew.
    reclaimed = share.lease_until + RECLAIM_AFTER - skew
    assert SETTLE_GRACE == reclaimed - hold_ends
