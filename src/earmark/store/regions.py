"""Budgets across regions (issue 48): the SQL of core/regions.py's rules, on both sides.

At a budget's home, region_shares keeps each region's share (core.regions.HomeShare), and
the budget's row counts the share's outstanding escrow in held and its reported use in
used (migration 0029), so that every admission at the home fits beside the shares as it
fits beside holds. In a region, the budget's row is the share: its limit is what the home
granted less what the region gave back, share_until the share's lease, and its used the
region's use; its Reserves, Charges, Renews and Settles are the region's own batches.

Every transaction here takes its budget's stripe lock first (store/stripes.py), as a batch
on that budget does, so that it and the batches see one another's writes whole.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime

import asyncpg

from earmark import limits
from earmark.core import raises, regions
from earmark.core.model import Budget, LedgerKind, Phase
from earmark.core.periods import Period
from earmark.errors import FailedPrecondition, Reason
from earmark.store import queries
from earmark.store.tx import Conn

# An unlimited budget's shares are sized as if its limit were this (never reached: a
# budget's counters stop at 2^63-1, and limits.limit_units_max is far below it).
UNLIMITED_UNITS = limits.limit_units_max
# The end of a lease that never ends (the open holds of a share without one), and of one
# that ended (the holds in doubt).
FAR = datetime.max.replace(tzinfo=UTC)
DOUBTED = datetime.min.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class ShareAskInput:
    """A region's ask for its share of one budget (the region named by its token)."""

    region: str
    budget_id: str
    ask: regions.Ask


@dataclass(frozen=True, slots=True)
class ShareOutcome:
    """The home's answer, or why it has none (found False: no such budget, or one that
    cannot be shared, with message saying which)."""

    budget_id: str
    found: bool
    message: str = ""
    answer: regions.Answer | None = None
    granted_now: int = 0
    unit: str = ""


# The home's side.


def _share_of(row: asyncpg.Record) -> regions.HomeShare:
    return regions.HomeShare(
        granted=row["granted"],
        returned=row["returned"],
        used=row["used"],
        reclaimed_to=row["reclaimed_to"],
        reclaimed=row["reclaimed"],
        lease_until=row["lease_until"],
        doubt=row["doubt"],
        doubt_at=row["doubt_at"],
    )


def _limit_of(budget: Budget, now: datetime) -> int:
    """The limit shares are granted under: the one that follows a temporary limit whose
    time came (a batch has not ended it yet), less the output escrow only FINAL holds may
    reach (a region's holds are admitted as WORK ones; SOFT overage is never shared);
    none: UNLIMITED_UNITS."""
    limit = budget.limit_after if raises.due(budget, now) else budget.limit
    if limit is None:
        return UNLIMITED_UNITS
    return replace(budget, limit=limit).cap(Phase.WORK) or 0


async def _home_of(conn: Conn, budget: Budget, now: datetime) -> regions.Home:
    """The budget's Home: its row's counters less the shares counted in them."""
    rows = await conn.fetch(
        "SELECT * FROM region_shares WHERE budget_id = $1 ORDER BY region FOR UPDATE",
        budget.budget_id,
    )
    shares = {row["region"]: _share_of(row) for row in rows}
    used_local = budget.used - sum(s.used for s in shares.values())
    held_local = budget.held - sum(s.outstanding for s in shares.values())
    assert used_local >= 0, (budget, shares)
    assert held_local >= 0, (budget, shares)
    return regions.Home(
        limit=_limit_of(budget, now), used_local=used_local, held_local=held_local, shares=shares
    )


async def _write_share(
    conn: Conn,
    budget: Budget,
    region: str,
    moved: tuple[regions.HomeShare, regions.HomeShare],
    kind: LedgerKind,
    now: datetime,
) -> None:
    """Writes a share's move from before to after: its row, the budget's held (by its
    outstanding) and used (by its reported use), and the ledger rows that say so."""
    before, after = moved
    held_delta = after.outstanding - before.outstanding
    used_delta = after.used - before.used
    assert used_delta >= 0
    # Of the use reported now, what lies past the share's level (a grant, which moves no
    # use, may lower the level's excess: the use it absorbs was counted late already).
    late_delta = min(used_delta, max(0, after.late - before.late))
    await conn.execute(
        """
        INSERT INTO region_shares (budget_id, region, granted, returned, used, reclaimed_to,
                                   reclaimed, lease_until, heard_at, doubt, doubt_at)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
        ON CONFLICT (budget_id, region) DO UPDATE SET
            granted = $3, returned = $4, used = $5, reclaimed_to = $6, reclaimed = $7,
            lease_until = $8, heard_at = coalesce($9, region_shares.heard_at), doubt = $10,
            doubt_at = $11
        """,
        budget.budget_id,
        region,
        after.granted,
        after.returned,
        after.used,
        after.reclaimed_to,
        after.reclaimed,
        after.lease_until,
        now if kind is LedgerKind.SHARE else None,
        after.doubt,
        after.doubt_at,
    )
    if not (held_delta or used_delta):
        return
    await conn.execute(
        "UPDATE budgets SET held = held + $2, used = used + $3 WHERE budget_id = $1",
        budget.budget_id,
        held_delta,
        used_delta,
    )
    entries = [(kind, held_delta, used_delta - late_delta), (LedgerKind.LATE_SETTLE, 0, late_delta)]
    for entry_kind, held, used in entries:
        if held or used:
            await conn.execute(
                """
                INSERT INTO ledger (budget_id, kind, held_delta, used_delta, at, period_no,
                                    reason)
                VALUES ($1, $2, $3, $4, $5, $6, $7)
                """,
                budget.budget_id,
                entry_kind.value,
                held,
                used,
                now,
                budget.period_no,
                f"region {region}",
            )


async def answer_share(conn: Conn, given: ShareAskInput, now: datetime) -> ShareOutcome:
    """The home answers one region's ask on one budget (core.regions.answer_ask): applies
    its report, renews its lease and grants what the demarcation rule allows, within the
    budget's limit beside everything used, held and leased out."""
    budget = await queries.lock_budget_for_update(conn, given.budget_id)
    if budget is None or budget.archived_at is not None:
        return ShareOutcome(given.budget_id, found=False, message="no such budget")
    if budget.period is not Period.NEVER:
        return ShareOutcome(
            given.budget_id,
            found=False,
            message="the budget has a period; regions share budgets without one",
        )
    home = await _home_of(conn, budget, now)
    if given.region not in home.shares and len(home.shares) >= limits.regions_per_budget_max:
        return ShareOutcome(
            given.budget_id,
            found=False,
            message=f"the budget has shares in {limits.regions_per_budget_max} regions already",
        )
    before = home.share(given.region)
    ask = given.ask
    report = regions.Report(given.region, ask.returned, ask.used, ask.doubt, ask.sent_at)
    problem = regions.report_problem(before, report)
    if problem is not None:
        field, why = problem
        return ShareOutcome(given.budget_id, found=False, message=f"{field}: {why}")
    # The report first, its use split within the share and past it at the share's level
    # before any grant; then the grant and the lease.
    reported = regions.apply_report(home, report)
    moved = (before, reported.share(given.region))
    await _write_share(conn, budget, given.region, moved, LedgerKind.SHARE, now)
    asked = regions.answer_ask(reported, ask, now)
    moved = (reported.share(given.region), asked.home.share(given.region))
    await _write_share(conn, budget, given.region, moved, LedgerKind.SHARE, now)
    return ShareOutcome(
        given.budget_id,
        found=True,
        answer=asked.answer,
        granted_now=asked.granted,
        unit=budget.unit,
    )


async def reclaim_candidates(conn: Conn, now: datetime, count: int) -> list[tuple[str, str]]:
    """At most count (budget, region) shares whose lease ended the reclaim delay ago and
    that still hold escrow beyond what the region's holds in doubt hold."""
    rows = await conn.fetch(
        """
        SELECT budget_id, region FROM region_shares
        WHERE lease_until <= $1
          AND granted - greatest(returned, reclaimed_to) - used > doubt
        ORDER BY lease_until
        LIMIT $2
        """,
        now - regions.RECLAIM_AFTER,
        count,
    )
    return [(row["budget_id"], row["region"]) for row in rows]


async def reclaim_share(conn: Conn, budget_id: str, region: str, now: datetime) -> int:
    """Takes back a region's expired share of the budget (core.regions.reclaim) if it is
    still due; what it took."""
    budget = await queries.lock_budget_for_update(conn, budget_id)
    if budget is None:
        return 0
    home = await _home_of(conn, budget, now)
    taken = regions.reclaim(home, region, now)
    if taken.amount:
        moved = (home.share(region), taken.home.share(region))
        await _write_share(conn, budget, region, moved, LedgerKind.RECLAIM, now)
    return taken.amount


@dataclass(frozen=True, slots=True)
class RegionSeen:
    """What the home has of one region: its outstanding escrow, over all budgets, and when
    it last heard from it."""

    region: str
    outstanding: int
    heard_at: datetime | None


async def regions_seen(conn: Conn) -> list[RegionSeen]:
    rows = await conn.fetch(
        """
        SELECT region,
               sum(greatest(0, granted - greatest(returned, reclaimed_to) - used)) AS out,
               max(heard_at) AS heard_at
        FROM region_shares GROUP BY region ORDER BY region LIMIT $1
        """,
        limits.regions_max,
    )
    return [RegionSeen(row["region"], int(row["out"]), row["heard_at"]) for row in rows]


# A region's side.


@dataclass(frozen=True, slots=True)
class RegionShare:
    """A region's share of one budget: its durable counters (core.regions.Region, with
    the region's open holds as one total) and its row's limit."""

    budget_id: str
    granted: int
    returned: int
    used: int
    held: int
    lease_until: datetime | None
    # Of held, what its holds in doubt hold.
    doubt: int = 0
    # The unit the share was made in (its budget row's).
    unit: str = ""

    @property
    def room(self) -> int:
        """What the share may still admit (below 0 when late use took it past its level)."""
        return self.granted - self.returned - self.used - self.held

    def region(self, name: str, heard: tuple[datetime | None, bool]) -> regions.Region:
        """As core.regions.Region, heard_at and short what the region last heard (kept in
        memory). The open holds are two: those in doubt, and the rest, ending with the
        share's lease: the rules read only their totals here."""
        holds = {}
        if self.held > self.doubt:
            until = self.lease_until or FAR
            holds["open"] = regions.RegionHold(self.held - self.doubt, until)
        if self.doubt:
            holds["doubt"] = regions.RegionHold(self.doubt, DOUBTED, dispatched=True)
        heard_at, short = heard
        return regions.Region(
            name=name,
            granted=self.granted,
            returned=self.returned,
            used=self.used,
            holds=holds,
            lease_until=self.lease_until,
            heard_at=heard_at,
            short=short,
        )


# A share's holds in doubt: on its budget, or nested on it (also_budget_ids).
_SHARE_ROWS = """
SELECT s.budget_id, s.granted, s.returned, s.lease_until, b.used, b.held, b.unit,
       (SELECT coalesce(sum(r.amount - r.charged), 0)
        FROM in_doubt_holds d JOIN reservations r USING (reservation_id)
        WHERE r.budget_id = s.budget_id OR s.budget_id = ANY (r.also_budget_ids)) AS doubt
FROM region_share_state s JOIN budgets b USING (budget_id)
"""


def _region_share(row: asyncpg.Record) -> RegionShare:
    return RegionShare(
        budget_id=row["budget_id"],
        granted=row["granted"],
        returned=row["returned"],
        used=row["used"],
        held=row["held"],
        lease_until=row["lease_until"],
        doubt=int(row["doubt"]),
        unit=row["unit"],
    )


async def region_shares(conn: Conn, after: str, count: int) -> list[RegionShare]:
    """The region's shares, count at most, by budget id after `after`."""
    rows = await conn.fetch(
        f"{_SHARE_ROWS} WHERE s.budget_id > $1 ORDER BY s.budget_id LIMIT $2", after, count
    )
    return [_region_share(row) for row in rows]


async def region_share(conn: Conn, budget_id: str, *, lock: bool = True) -> RegionShare | None:
    """The region's share of the budget, its rows locked FOR UPDATE unless not lock."""
    locking = " FOR UPDATE" if lock else ""
    row = await conn.fetchrow(f"{_SHARE_ROWS} WHERE s.budget_id = $1{locking}", budget_id)
    return None if row is None else _region_share(row)


async def _write_region(conn: Conn, budget_id: str, region: regions.Region) -> None:
    await conn.execute(
        """
        UPDATE region_share_state SET granted = $2, returned = $3, lease_until = $4
        WHERE budget_id = $1
        """,
        budget_id,
        region.granted,
        region.returned,
        region.lease_until,
    )
    await conn.execute(
        "UPDATE budgets SET limit_units = $2, share_until = $3 WHERE budget_id = $1",
        budget_id,
        region.granted - region.returned,
        region.lease_until,
    )


async def apply_answer(
    conn: Conn, name: str, outcome: ShareOutcome, now: datetime
) -> regions.Region | None:
    """Applies the home's answer to the region's share (core.regions.region_answer),
    making the share's budget row on the first: its limit the share's level, its lease
    the share's. None when the home has no such budget."""
    answer = outcome.answer
    if answer is None:
        return None
    share = await region_share(conn, outcome.budget_id)
    if share is None:
        await _make_share(conn, outcome)
        share = await region_share(conn, outcome.budget_id)
        assert share is not None
    else:
        _require_unit(share, outcome)
    region = regions.region_answer(share.region(name, (None, False)), answer, now)
    await _write_region(conn, outcome.budget_id, region)
    return region


def _require_unit(share: RegionShare, outcome: ShareOutcome) -> None:
    """A share's unit is the one it was made in: an answer in another is not applied."""
    if share.unit != outcome.unit:
        raise FailedPrecondition(
            f"budget {outcome.budget_id!r}: the home answered in {outcome.unit!r}, and this "
            f"region's share of it is in {share.unit!r}",
            Reason.UNIT_MISMATCH,
            budget_id=outcome.budget_id,
        )


async def _make_share(conn: Conn, outcome: ShareOutcome) -> None:
    """The region's budget row for a share of the home's budget, limit 0 until the answer
    is applied; a budget of the id the region already has for itself is refused."""
    budget = await queries.lock_budget_for_update(conn, outcome.budget_id)
    if budget is not None:
        raise FailedPrecondition(
            f"budget {outcome.budget_id!r} exists in this region as its own: a region "
            "admits from a share of a budget homed elsewhere only where it has none of "
            "that id",
            Reason.BUDGET_NOT_SHARED,
            budget_id=outcome.budget_id,
        )
    shares = await conn.fetchval("SELECT count(*) FROM region_share_state")
    if shares >= limits.region_shares_max:
        raise FailedPrecondition(
            f"budget {outcome.budget_id!r}: this region holds shares of "
            f"{limits.region_shares_max} budgets, as many as it may",
            Reason.BUDGET_NOT_SHARED,
            budget_id=outcome.budget_id,
        )
    await queries.admit_unit(conn, outcome.unit)
    made = await queries.insert_budget(
        conn, Budget(budget_id=outcome.budget_id, limit=0, unit=outcome.unit)
    )
    assert made is not None
    await conn.execute("INSERT INTO region_share_state (budget_id) VALUES ($1)", outcome.budget_id)


async def give_back(conn: Conn, name: str, budget_id: str, keep: int, short: bool) -> int:
    """Gives back the share's idle room beyond keep, all of it if the home is short (core.
    regions.region_return), under its stripe lock, so that no Reserve admits from what is
    given; how much it gave."""
    share = await region_share(conn, budget_id)
    if share is None:
        return 0
    region = share.region(name, (None, short))
    returned = regions.region_return(region, keep)
    if returned is region:
        return 0
    await _write_region(conn, budget_id, returned)
    return returned.returned - region.returned


# What operators see (Admin.ListShares).


@dataclass(frozen=True, slots=True)
class ShareView:
    """A share as an operator sees it: at a budget's home (home True), a region's share of
    it; in a region, its share of a budget homed elsewhere (region "")."""

    budget_id: str
    region: str
    home: bool
    granted: int
    released: int
    used: int
    # At the home: escrow held for the region. In a region: its room.
    outstanding: int
    doubt: int
    lease_until: datetime | None
    heard_at: datetime | None = None
    reclaimed: int = 0


async def list_shares(conn: Conn, budget_id: str, after: str) -> tuple[list[ShareView], str]:
    """The shares of at most limits.shares_page_budgets_max budgets (only budget_id's, if
    given) with ids after `after`, home and region alike, by budget then region; and the
    last budget id when more may follow ("" when not)."""
    count = limits.shares_page_budgets_max
    ids = await conn.fetch(
        """
        SELECT budget_id FROM (
            SELECT budget_id FROM region_shares UNION SELECT budget_id FROM region_share_state
        ) k
        WHERE ($1 = '' OR budget_id = $1) AND budget_id > $2
        ORDER BY budget_id LIMIT $3
        """,
        budget_id,
        after,
        count,
    )
    named = [row["budget_id"] for row in ids]
    views: list[ShareView] = []
    for row in await conn.fetch(
        "SELECT * FROM region_shares WHERE budget_id = ANY ($1) ORDER BY budget_id, region",
        named,
    ):
        share = _share_of(row)
        views.append(
            ShareView(
                budget_id=row["budget_id"],
                region=row["region"],
                home=True,
                granted=share.granted,
                released=share.released,
                used=share.used,
                outstanding=share.outstanding,
                doubt=share.doubt,
                lease_until=share.lease_until,
                heard_at=row["heard_at"],
                reclaimed=share.reclaimed,
            )
        )
    for row in await conn.fetch(
        f"{_SHARE_ROWS} WHERE s.budget_id = ANY ($1) ORDER BY s.budget_id", named
    ):
        mine = _region_share(row)
        views.append(
            ShareView(
                budget_id=mine.budget_id,
                region="",
                home=False,
                granted=mine.granted,
                released=mine.returned,
                used=mine.used,
                outstanding=mine.room,
                doubt=mine.doubt,
                lease_until=mine.lease_until,
            )
        )
    views.sort(key=lambda v: (v.budget_id, not v.home, v.region))
    return views, (named[-1] if len(named) == count else "")
