"""Budgets across regions (issue 48): a budget's home leases shares of it to other regions,
each an escrow the region admits from alone (O'Neil's escrow transactions; Barbará and
Garcia-Molina's demarcation protocol; Doorman's leases). Pure rules: plain data and `now`
in, the new state and the message to send out; the store and the service do the rest.

Every counter is cumulative and only grows, and every message carries counters, never
deltas, applied by max: a message lost, repeated or reordered is harmless (the next one
carries as much), and a report is applied exactly once by construction.

The home counts a region's share by its footprint, max(granted - released, used): what it
granted and was not given back, or what the region reported using if that is more (a late
settle, or usage reported after a reclaim, adds to the budget's use as any late settle
does). released is the most of what the region reported returning and of the level a
reclaim set. A region merges the home's released into its own returned, so that a reclaim
reaches it before it admits from the share again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum

from earmark import limits
from earmark.core.model import Budget
from earmark.errors import FailedPrecondition, Reason

SHARE_LEASE = timedelta(seconds=limits.region_share_lease_seconds)
RENEW_BEFORE = timedelta(seconds=limits.region_share_renew_seconds)
SETTLE_GRACE = timedelta(seconds=limits.region_settle_grace_seconds)
LEASE_MARGIN = timedelta(seconds=limits.region_lease_margin_seconds)
HOME_SILENCE = timedelta(seconds=limits.region_home_silence_seconds)
# The home takes back an expired share this long after its lease ended on the home's clock:
# the region's view of the lease ended LEASE_MARGIN before on the true time's worst reading
# of the two clocks, and every hold of it ended SETTLE_GRACE before that view, so by then
# every hold ended at least the grace before.
RECLAIM_AFTER = LEASE_MARGIN
# How far a region's ask's sent_at may be from the home's clock when the home reads it: the
# two clocks' skews, and behind by a call's longest wait too. Further, the region's clock
# is wrong (its lease would outlive the home's) and its ask is refused.
SENT_AHEAD_MAX = LEASE_MARGIN
SENT_BEHIND_MAX = LEASE_MARGIN + timedelta(seconds=limits.region_call_seconds)


# The home's side.


@dataclass(frozen=True, slots=True)
class HomeShare:
    """What the home knows of one region's share, every counter cumulative."""

    granted: int = 0
    # The most the region reported returning, and using.
    returned: int = 0
    used: int = 0
    # The returned level the last reclaim set (granted - used - doubt then), and all
    # reclaims took.
    reclaimed_to: int = 0
    reclaimed: int = 0
    # On the home's clock; None before the first ask.
    lease_until: datetime | None = None
    # What the region's holds in doubt held when it last reported (a dispatched hold whose
    # lease passed stays held until settled or resolved, as at the home), and when it sent
    # that report on its clock: a reclaim leaves it held. Not cumulative: the newest report
    # wins.
    doubt: int = 0
    doubt_at: datetime | None = None

    @property
    def released(self) -> int:
        return max(self.returned, self.reclaimed_to)

    @property
    def footprint(self) -> int:
        """What the share takes of the limit: granted and not given back, or more if the
        region reported using more."""
        return max(self.granted - self.released, self.used)

    @property
    def outstanding(self) -> int:
        """Of the share, what the region has not reported using: the escrow a reclaim
        takes back."""
        return max(0, self.granted - self.released - self.used)

    @property
    def late(self) -> int:
        """Usage the region reported beyond its share (after a reclaim, or settles past
        their holds that its room could not absorb)."""
        return max(0, self.used - (self.granted - self.released))


@dataclass(frozen=True, slots=True)
class Home:
    """The home's ledger of one budget: its own holds and use, and each region's share."""

    limit: int
    used_local: int = 0
    held_local: int = 0
    # Of used_local, what settles past their holds added.
    late_local: int = 0
    shares: Mapping[str, HomeShare] = field(default_factory=dict)

    @property
    def committed(self) -> int:
        """Used, held and leased out: what a new hold or grant at the home must fit beside."""
        return self.used_local + self.held_local + sum(s.footprint for s in self.shares.values())

    @property
    def free(self) -> int:
        return self.limit - self.committed

    @property
    def granted_out(self) -> int:
        """The home's own invariant's left side: its holds and use within them, and every
        share granted and not given back; at most the limit at every moment."""
        shares = sum(s.granted - s.released for s in self.shares.values())
        return self.used_local - self.late_local + self.held_local + shares

    def share(self, region: str) -> HomeShare:
        return self.shares.get(region, HomeShare())

    def with_share(self, region: str, share: HomeShare) -> Home:
        return replace(self, shares={**self.shares, region: share})


@dataclass(frozen=True, slots=True)
class Report:
    """A region's outbox: its cumulative returned and used, sent again until acknowledged
    by a later one (resending is harmless), and what its holds in doubt hold at sent_at."""

    region: str
    returned: int
    used: int
    doubt: int = 0
    sent_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Ask:
    """A region's ask for a renewal and want more units, sent at sent_at on its clock, with
    its report; need > 0: a Reserve its room could not admit waits on the answer, and the
    home grants at least need if it has that much free (the demarcation rule's "whichever
    region asks": the budget's last units go to the Reserve that asks for them)."""

    region: str
    sent_at: datetime
    want: int
    returned: int
    used: int
    need: int = 0
    doubt: int = 0
    # > 0: need is what several Reserves waiting together lack, this the least one of them
    # lacks (grant_size).
    smallest: int = 0


@dataclass(frozen=True, slots=True)
class Answer:
    """The home's answer to an ask: its cumulative grant and released level for the region,
    the ask's sent_at echoed (the region's lease counts from it), and whether the home is
    short (the region then returns all its free room)."""

    region: str
    asked_at: datetime
    granted: int
    released: int
    short: bool


@dataclass(frozen=True, slots=True)
class Asked:
    home: Home
    answer: Answer
    granted: int


@dataclass(frozen=True, slots=True)
class Reclaim:
    home: Home
    amount: int


@dataclass(frozen=True, slots=True)
class HomeAdmission:
    admitted: bool
    home: Home


def share_floor(limit: int) -> int:
    """The smallest grant the home makes: smaller ones are admitted at the home instead."""
    return max(1, limit * limits.region_share_bps_min // limits.bps_per_unit)


def want_for(units_per_minute: int) -> int:
    """What a region asks for at its recent admission rate."""
    return int(units_per_minute * limits.region_share_rate_seconds) // 60


def keep_for(units_per_minute: int) -> int:
    """The free room a region keeps at its recent admission rate; it returns the rest."""
    return int(units_per_minute * limits.region_share_keep_seconds) // 60


def grant_size(home: Home, region: str, want: int, need: int = 0, smallest: int = 0) -> int:
    """What the home grants a region asking for want: at most a fraction of what is free at
    the home, at most what keeps the region's outstanding share within its cap, and nothing
    below the floor (the demarcation rule: shares shrink near the limit); but a waiting
    Reserve's need whenever the home has that much free, so that the budget's last units are
    admitted wherever they are asked for. Several Reserves waiting together (smallest > 0:
    need is their sum, smallest the least one lacks) are granted much as they would be one
    by one: their need whenever it is free, else all that is free if one of them fits in
    it (what the others cannot use goes back with the region's next tick)."""
    assert want >= 0
    assert 0 <= smallest <= need
    share = home.share(region)
    capped = home.limit * limits.region_share_bps_max // limits.bps_per_unit - share.outstanding
    fraction = max(0, home.free) * limits.region_grant_fraction_bps // limits.bps_per_unit
    size = min(want, capped, fraction)
    size = size if size >= share_floor(home.limit) else 0
    if size < need <= home.free:
        return need
    if 0 < smallest <= home.free and size < home.free < need:
        return home.free
    return size


def apply_report(home: Home, report: Report) -> Home:
    """Applies a region's cumulative report by max: repeated, reordered or stale reports
    change nothing, and usage after a reclaim counts as a late settle does. Its doubt is
    taken if it was sent after the doubt the home has."""
    share = home.share(report.region)
    merged = replace(
        share, returned=max(share.returned, report.returned), used=max(share.used, report.used)
    )
    newer = report.sent_at is not None and (
        share.doubt_at is None or report.sent_at >= share.doubt_at
    )
    if newer:
        merged = replace(merged, doubt=report.doubt, doubt_at=report.sent_at)
    return home if merged == share else home.with_share(report.region, merged)


def answer_ask(home: Home, ask: Ask, now: datetime) -> Asked:
    """Applies the ask's report, renews the region's lease (from now, on the home's clock)
    and grants what grant_size allows; a grant is asserted to keep the home within its
    limit."""
    home = apply_report(home, Report(ask.region, ask.returned, ask.used, ask.doubt, ask.sent_at))
    size = grant_size(home, ask.region, ask.want, ask.need, ask.smallest)
    share = home.share(ask.region)
    until = now + SHARE_LEASE
    lease_until = until if share.lease_until is None else max(share.lease_until, until)
    before = home.committed
    home = home.with_share(
        ask.region, replace(share, granted=share.granted + size, lease_until=lease_until)
    )
    if size:
        assert home.committed <= home.limit, (before, size, home)
        assert home.granted_out <= home.limit, home
    after = home.share(ask.region)
    answer = Answer(
        region=ask.region,
        asked_at=ask.sent_at,
        granted=after.granted,
        released=after.released,
        short=home.free < share_floor(home.limit),
    )
    return Asked(home=home, answer=answer, granted=size)


def sent_at_problem(sent_at: datetime, now: datetime) -> str | None:
    """Why the home does not believe an ask sent at sent_at (the region's clock) read at now
    (the home's): None when the clocks agree within the skew the design assumes."""
    if sent_at > now + SENT_AHEAD_MAX:
        return (
            f"is {(sent_at - now).total_seconds():.3f} s ahead of the home's clock; at most "
            f"{SENT_AHEAD_MAX.total_seconds():g} s (the region's clock is wrong)"
        )
    if sent_at < now - SENT_BEHIND_MAX:
        return (
            f"is {(now - sent_at).total_seconds():.3f} s behind the home's clock; at most "
            f"{SENT_BEHIND_MAX.total_seconds():g} s (the region's clock is wrong, or the ask "
            "waited too long)"
        )
    return None


def report_problem(share: HomeShare, report: Report) -> tuple[str, str] | None:
    """Why the home does not believe a region's report on its share, as (field, why): it
    cannot have given back, or hold in doubt, more than it was ever granted."""
    if report.returned > share.granted:
        return "returned", f"is {report.returned}; the region was granted {share.granted}"
    if report.doubt > share.granted:
        return "doubt", f"is {report.doubt}; the region was granted {share.granted}"
    return None


def reclaim_due(home: Home, region: str, now: datetime) -> bool:
    """A share is taken back once its lease ended, on the home's clock, the clocks' margin
    ago: every hold the region admitted from it ended the settle grace before, but those in
    doubt, which the home keeps held."""
    share = home.share(region)
    if share.lease_until is None or share.outstanding <= share.doubt:
        return False
    return now >= share.lease_until + RECLAIM_AFTER


def reclaim(home: Home, region: str, now: datetime) -> Reclaim:
    """Takes back a dead or cut-off region's outstanding escrow when due (nothing before),
    but what its holds in doubt hold: they may yet be settled or resolved at all of it."""
    if not reclaim_due(home, region, now):
        return Reclaim(home=home, amount=0)
    share = home.share(region)
    kept = min(share.doubt, share.outstanding)
    amount = share.outstanding - kept
    level = share.granted - share.used - kept
    taken = replace(share, reclaimed_to=level, reclaimed=share.reclaimed + amount)
    assert taken.outstanding == kept
    return Reclaim(home=home.with_share(region, taken), amount=amount)


def home_admit(home: Home, amount: int) -> HomeAdmission:
    """A hold at the home (its own workers', or a Reserve a region forwarded) fits beside
    everything used, held and leased out."""
    assert amount >= 0
    if home.committed + amount > home.limit:
        return HomeAdmission(admitted=False, home=home)
    return HomeAdmission(admitted=True, home=replace(home, held_local=home.held_local + amount))


def home_settle(home: Home, held: int, used: int) -> Home:
    """Settles a home hold that still held `held` (0 once it expired) at used: the use past
    the hold is late."""
    assert 0 <= held <= home.held_local
    assert used >= 0
    return replace(
        home,
        held_local=home.held_local - held,
        used_local=home.used_local + used,
        late_local=home.late_local + max(0, used - held),
    )


def home_expire(home: Home, held: int) -> Home:
    """A home hold's lease passed: what it held returns."""
    assert 0 <= held <= home.held_local
    return replace(home, held_local=home.held_local - held)


# A region's side.


@dataclass(frozen=True, slots=True)
class RegionHold:
    amount: int
    # On the region's clock.
    until: datetime
    # Its call was sent: past its lease it is in doubt, still held, until settled (as at
    # the home; an undispatched one closes).
    dispatched: bool = False

    def in_doubt(self, now: datetime) -> bool:
        return self.dispatched and now >= self.until


@dataclass(frozen=True, slots=True)
class Region:
    """A region's share of one budget, durable in its own database except heard_at,
    failed_at and short (what it last heard, and when a call to the home last failed, kept
    in memory)."""

    name: str
    granted: int = 0
    returned: int = 0
    used: int = 0
    # Of used, what settles past their holds added.
    late: int = 0
    holds: Mapping[str, RegionHold] = field(default_factory=dict)
    # Its view of the share's lease, on its clock: never outlives the home's.
    lease_until: datetime | None = None
    heard_at: datetime | None = None
    failed_at: datetime | None = None
    short: bool = False

    @property
    def held(self) -> int:
        return sum(h.amount for h in self.holds.values())

    @property
    def room(self) -> int:
        """What the region may still admit alone (negative after a reclaim it had not
        reported all its use before, or settles past their holds)."""
        return self.granted - self.used - self.returned - self.held

    def doubt(self, now: datetime) -> int:
        """What its holds in doubt hold."""
        return sum(h.amount for h in self.holds.values() if h.in_doubt(now))

    def report(self, now: datetime) -> Report:
        return Report(self.name, self.returned, self.used, self.doubt(now), now)

    def restarted(self) -> Region:
        """After a crash: the database's counters, holds and lease; nothing it heard."""
        return replace(self, heard_at=None, failed_at=None, short=False)


class Verdict(StrEnum):
    ADMIT = "admit"
    # Ask the home for the shortfall (Ask.need), then admit or refuse on its answer.
    ASK = "ask"
    REFUSE = "refuse"


class RegionRefusal(StrEnum):
    """Why a region's share cannot admit a hold."""

    SHARE_SPENT = "share_spent"
    SHARE_LEASE_ENDED = "share_lease_ended"
    # The share's lease ends before the hold's would (and the grace after it).
    HOLD_OUTLIVES_SHARE = "hold_outlives_share"


@dataclass(frozen=True, slots=True)
class AdmitInput:
    region: Region
    hold_id: str
    amount: int
    lease: timedelta
    now: datetime
    dispatched: bool = False


@dataclass(frozen=True, slots=True)
class RegionAdmission:
    """ADMIT: region holds the hold. Else reason says why the share could not; ASK if the
    home answered recently (the Reserve waits on an ask for what it needs), REFUSE if not.
    need: what the room lacks for the hold."""

    verdict: Verdict
    region: Region
    reason: RegionRefusal | None = None
    need: int = 0


def lease_refusal(
    lease_until: datetime | None, until: datetime, now: datetime
) -> RegionRefusal | None:
    """Whether a share whose lease ends at lease_until (the region's view) cannot admit a
    hold ending at until: every hold ends the settle grace before the share's lease, so
    that the home's reclaim never finds one open."""
    if lease_until is None or now + SETTLE_GRACE >= lease_until:
        return RegionRefusal.SHARE_LEASE_ENDED
    if until + SETTLE_GRACE > lease_until:
        return RegionRefusal.HOLD_OUTLIVES_SHARE
    return None


def renew_cap(lease_until: datetime) -> datetime:
    """The furthest a hold admitted from a share whose lease ends at lease_until may be
    renewed to."""
    return lease_until - SETTLE_GRACE


def may_ask(heard_at: datetime | None, failed_at: datetime | None, now: datetime) -> bool:
    """A Reserve the share cannot admit waits on an ask unless a call to the home failed
    since the home last answered, within HOME_SILENCE: a region cut off refuses at once,
    and one whose link is up asks however long it had nothing to say."""
    if failed_at is None or (heard_at is not None and heard_at >= failed_at):
        return True
    return now - failed_at > HOME_SILENCE


def region_admit(op: AdmitInput) -> RegionAdmission:
    """Admits a hold alone iff it fits in the share's room and ends the settle grace before
    the region's view of the share's lease."""
    region, now = op.region, op.now
    assert op.amount >= 0
    assert op.hold_id not in region.holds
    until = now + op.lease
    reason = lease_refusal(region.lease_until, until, now)
    if reason is None and region.used + region.returned + region.held + op.amount > region.granted:
        reason = RegionRefusal.SHARE_SPENT
    if reason is None:
        holds = {**region.holds, op.hold_id: RegionHold(op.amount, until, op.dispatched)}
        return RegionAdmission(verdict=Verdict.ADMIT, region=replace(region, holds=holds))
    verdict = Verdict.ASK if may_ask(region.heard_at, region.failed_at, now) else Verdict.REFUSE
    need = max(1, op.amount - max(0, region.room))
    return RegionAdmission(verdict=verdict, region=region, reason=reason, need=need)


def region_settle(region: Region, hold_id: str, used: int, now: datetime) -> Region:
    """Settles a hold at used: in full, whatever it held. Past its hold, or after its lease
    passed (whether or not it was swept) unless it is in doubt, the use is late."""
    assert used >= 0
    hold = region.holds.get(hold_id)
    live = hold is not None and (now < hold.until or hold.in_doubt(now))
    held = hold.amount if hold is not None and live else 0
    holds = {k: v for k, v in region.holds.items() if k != hold_id}
    return replace(
        region, used=region.used + used, late=region.late + max(0, used - held), holds=holds
    )


def region_expire(region: Region, now: datetime) -> Region:
    """Closes the holds whose lease passed, but those in doubt: what they held is room
    again."""
    holds = {k: v for k, v in region.holds.items() if now < v.until or v.in_doubt(now)}
    return region if len(holds) == len(region.holds) else replace(region, holds=holds)


def region_return(region: Region, keep: int) -> Region:
    """Gives back the free room beyond keep (all of it if the home is short); reported by
    the outbox."""
    assert keep >= 0
    kept = 0 if region.short else keep
    give = max(0, region.room - kept)
    return region if give == 0 else replace(region, returned=region.returned + give)


@dataclass(frozen=True, slots=True)
class NeedInput:
    region: Region
    units_per_minute: int
    now: datetime
    # What a waiting Reserve lacks (RegionAdmission.need), 0 for the background's asks.
    need: int = 0
    # > 0: need is what several Reserves waiting together lack (a region's agent sends them
    # in one ask), and this the least one of them lacks (grant_size); 0 for one Reserve.
    smallest: int = 0


def region_ask(op: NeedInput) -> Ask | None:
    """An ask when the region's lease needs renewing (unless the share is idle: no room, no
    holds, no rate) or its room is below half of what it admits in the rate window (a top
    up), else None; with need, always one."""
    region, now = op.region, op.now
    assert 0 <= op.smallest <= op.need
    want = want_for(op.units_per_minute)
    # A share with neither room nor holds, that wants nothing, lets its lease end: the
    # home may then archive the budget, and a Reserve asks again when it needs it.
    idle = region.room <= 0 and not region.holds and want == 0
    renew = not idle and (region.lease_until is None or region.lease_until - now < RENEW_BEFORE)
    low = region.room < want // 2
    if not (renew or low or op.need):
        return None
    more = max(0, want - max(0, region.room))
    doubt = region.doubt(now)
    return Ask(region.name, now, more, region.returned, region.used, op.need, doubt, op.smallest)


def region_answer(region: Region, answer: Answer, now: datetime) -> Region:
    """Applies the home's answer by max: its grant, its released level (a reclaim the region
    had not seen), and a lease counted from when the region sent the ask, less the margin
    for the clocks."""
    assert answer.region == region.name
    until = answer.asked_at + SHARE_LEASE - LEASE_MARGIN
    lease_until = until if region.lease_until is None else max(region.lease_until, until)
    return replace(
        region,
        granted=max(region.granted, answer.granted),
        returned=max(region.returned, answer.released),
        lease_until=lease_until,
        heard_at=now if region.heard_at is None else max(region.heard_at, now),
        short=answer.short,
    )


def require_not_share(budget: Budget) -> None:
    """An operator changes a budget at its home: in a region, a share's row follows the
    home's answers alone."""
    if budget.share_until is not None:
        raise FailedPrecondition(
            f"budget {budget.budget_id!r} is this region's share of a budget homed "
            "elsewhere: change it at its home",
            Reason.BUDGET_IS_SHARE,
            budget_id=budget.budget_id,
        )
