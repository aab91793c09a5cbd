"""The operator's reads and hands outside the batches: pages of a budget's holds and
ledger and of every budget's held or in-doubt holds (read, then converted paced: see
store.scans), archiving a budget, and the totals the in-doubt and overage alerts watch."""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Generic, TypeVar

import asyncpg

from earmark import limits
from earmark.core import regions, resets
from earmark.core.model import Budget, Hold, HoldState, LedgerEntry, LedgerKind, UnitTotals
from earmark.errors import FailedPrecondition, InvalidArgument, Reason, budget_not_found
from earmark.store import queries
from earmark.store.named import NamedQuery
from earmark.store.rows import BUDGET_COLUMNS, HOLD_COLUMN_NAMES, budget_from_row
from earmark.store.tx import Conn

_NIL = str(uuid.UUID(int=0))
T = TypeVar("T")

# A budget's holds in keyset order (owner, idempotency_key, reservation_id): its own, by
# the reservations' unique index, and those nested under it, by hold_scopes' primary key
# (migration 0007). Each arm reads at most a page and one row; the union is cut to that.
LIST_HOLDS = NamedQuery(f"""
WITH page AS (
    (SELECT owner, idempotency_key, reservation_id FROM reservations
     WHERE budget_id = $budget_id
         AND (owner, idempotency_key, reservation_id) > ($owner, $key, $after::uuid)
         AND ($state::smallint IS NULL OR state = $state::smallint)
     ORDER BY owner, idempotency_key, reservation_id
     LIMIT $rows)
    UNION ALL
    (SELECT s.owner, s.idempotency_key, s.reservation_id
     FROM hold_scopes s JOIN reservations r USING (reservation_id)
     WHERE s.budget_id = $budget_id
         AND (s.owner, s.idempotency_key, s.reservation_id) > ($owner, $key, $after::uuid)
         AND ($state::smallint IS NULL OR r.state = $state::smallint)
     ORDER BY s.owner, s.idempotency_key, s.reservation_id
     LIMIT $rows)
)
SELECT {", ".join(f"r.{name}" for name in HOLD_COLUMN_NAMES)}
FROM page p JOIN reservations r USING (reservation_id)
ORDER BY p.owner, p.idempotency_key, p.reservation_id
LIMIT $rows
""")

# Every budget's open holds in one state, oldest first: the state's side table (open_holds
# has the held ones, and closed ones the sweeper has yet to delete, which the state leaves
# out; in_doubt_holds the ones in doubt: migrations 0002, 0007 and 0020),
# each row's reservation read by its primary key, in keyset order (created_at,
# reservation_id). A page reads the state's whole side table, which the open holds bound;
# no index on reservations is added for it, so a Settle's update stays HOT (migration
# 0002). Closed holds (settled, expired) have no side table and list per budget only.
_HOLDS_ACROSS = """
SELECT {columns}
FROM {side} s JOIN reservations r USING (reservation_id)
WHERE r.state = $state::smallint AND (r.created_at, r.reservation_id) > ($at, $after::uuid)
ORDER BY r.created_at, r.reservation_id
LIMIT $rows
"""
LIST_HOLDS_ACROSS = {
    state: NamedQuery(
        _HOLDS_ACROSS.format(
            columns=", ".join(f"r.{name}" for name in HOLD_COLUMN_NAMES), side=side
        )
    )
    for state, side in ((HoldState.HELD, "open_holds"), (HoldState.IN_DOUBT, "in_doubt_holds"))
}
# The first page's cursor: before every created_at.
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

LIST_LEDGER = NamedQuery("""
SELECT l.entry_id, l.budget_id, l.reservation_id, l.kind, l.held_delta, l.used_delta, l.at,
    l.period_no, l.limit_before, l.limit_after, l.limit_until, coalesce(l.reason, '') AS reason,
    CASE WHEN l.kind = 'resolve' THEN c.evidence ELSE '' END AS evidence
FROM ledger l LEFT JOIN calls c ON c.reservation_id = l.reservation_id
WHERE l.budget_id = $budget_id AND l.entry_id > $after
ORDER BY l.entry_id
LIMIT $rows
""")


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a listing; next_page_token is empty on the last."""

    items: list[T]
    next_page_token: str
    # A page of holds: which of its expired holds an operator released (Hold.released),
    # read in the same turn as the page.
    released: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class LedgerRow:
    entry_id: int
    entry: LedgerEntry
    # A resolve's evidence (earmark reconcile's), from its call's record; "" for others.
    evidence: str = ""


@dataclass(frozen=True, slots=True)
class WatchTotals:
    """What the in-doubt and overage alerts watch, over every budget."""

    in_doubt: int
    # How long the oldest in-doubt hold has been in doubt; 0 without one.
    in_doubt_oldest_seconds: float
    budgets_in_overage: int


def encode_token(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


def _decode(token: str) -> object:
    try:
        return json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (binascii.Error, ValueError):
        raise InvalidArgument("page_token", "is not a token this sidecar gave") from None


def _plain(text: str) -> bool:
    """Text PostgreSQL takes: no NUL, and UTF-8 (a lone surrogate is not)."""
    if "\x00" in text:
        return False
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _hold_cursor(token: str) -> tuple[str, str, str]:
    if not token:
        return "", "", _NIL
    found = _decode(token)
    # A forged token could carry what PostgreSQL refuses in text (NUL): refused here.
    if (
        isinstance(found, list)
        and len(found) == 3
        and all(isinstance(part, str) and _plain(part) for part in found)
    ):
        owner, key, after = found
        try:
            return owner, key, str(uuid.UUID(after))
        except ValueError:
            pass
    raise InvalidArgument("page_token", "is not a token this sidecar gave")


def time_cursor(token: str, start: datetime = _EPOCH) -> tuple[datetime, str]:
    """The (time, reservation_id) a page in time order starts after: holds across budgets
    by created_at, calls by sent_at; without a token, start."""
    if not token:
        return start, _NIL
    found = _decode(token)
    if (
        isinstance(found, list)
        and len(found) == 2
        and all(isinstance(part, str) and _plain(part) for part in found)
    ):
        at, after = found
        try:
            created = datetime.fromisoformat(at)
            if created.tzinfo is not None:
                return created, str(uuid.UUID(after))
        except ValueError:
            pass
    raise InvalidArgument("page_token", "is not a token this sidecar gave")


def _ledger_cursor(token: str) -> int:
    if not token:
        return 0
    found = _decode(token)
    if isinstance(found, int) and not isinstance(found, bool) and 0 <= found <= limits.int64_max:
        return found
    raise InvalidArgument("page_token", "is not a token this sidecar gave")


async def _require_budget(conn: Conn, budget_id: str) -> None:
    if await conn.fetchval("SELECT 1 FROM budgets WHERE budget_id = $1", budget_id) is None:
        raise budget_not_found(budget_id)


async def hold_rows(
    conn: Conn, budget_id: str, state: HoldState | None, size: int, token: str
) -> list[asyncpg.Record]:
    """The rows of one page of the budget's holds (its own and those nested under it), in
    keyset order, and one more if there is a next page: see hold_page."""
    owner, key, after = _hold_cursor(token)
    await _require_budget(conn, budget_id)
    args = LIST_HOLDS.args(
        budget_id=budget_id,
        owner=owner,
        key=key,
        after=after,
        state=None if state is None else int(state),
        rows=size + 1,
    )
    return await conn.fetch(LIST_HOLDS.sql, *args)


def hold_page(holds: list[Hold], size: int) -> Page[Hold]:
    """The page of hold_rows' holds; the next page's token is empty on the last page."""
    if len(holds) <= size:
        return Page(holds, "")
    last = holds[size - 1]
    return Page(holds[:size], encode_token([last.owner, last.idempotency_key, last.reservation_id]))


async def holds_across_rows(
    conn: Conn, state: HoldState, size: int, token: str
) -> list[asyncpg.Record]:
    """The rows of one page of every budget's holds in state (HELD or IN_DOUBT), oldest
    first, and one more if there is a next page: see holds_across_page."""
    at, after = time_cursor(token)
    query = LIST_HOLDS_ACROSS[state]
    args = query.args(state=int(state), at=at, after=after, rows=size + 1)
    return await conn.fetch(query.sql, *args)


def holds_across_page(holds: list[Hold], size: int) -> Page[Hold]:
    """The page of holds_across_rows' holds; the next page's token is empty on the last."""
    if len(holds) <= size:
        return Page(holds, "")
    last = holds[size - 1]
    return Page(holds[:size], encode_token([last.created_at.isoformat(), last.reservation_id]))


async def ledger_rows(conn: Conn, budget_id: str, size: int, token: str) -> list[asyncpg.Record]:
    """The rows of one page of the budget's ledger, oldest first, and one more if there is
    a next page: see ledger_page."""
    after = _ledger_cursor(token)
    await _require_budget(conn, budget_id)
    args = LIST_LEDGER.args(budget_id=budget_id, after=after, rows=size + 1)
    return await conn.fetch(LIST_LEDGER.sql, *args)


def ledger_row(row: asyncpg.Record) -> LedgerRow:
    reservation_id = row["reservation_id"]
    return LedgerRow(
        entry_id=row["entry_id"],
        entry=LedgerEntry(
            budget_id=row["budget_id"],
            reservation_id=None if reservation_id is None else str(reservation_id),
            kind=LedgerKind(row["kind"]),
            held_delta=row["held_delta"],
            used_delta=row["used_delta"],
            at=row["at"],
            period_no=row["period_no"],
            limit_before=row["limit_before"],
            limit_after=row["limit_after"],
            limit_until=row["limit_until"],
            reason=row["reason"],
        ),
        evidence=row["evidence"] or "",
    )


def ledger_page(rows: list[LedgerRow], size: int) -> Page[LedgerRow]:
    """The page of ledger_rows' entries; the next page's token is empty on the last page."""
    if len(rows) <= size:
        return Page(rows, "")
    return Page(rows[:size], encode_token(rows[size - 1].entry_id))


# Budgets in id order after the cursor, keeping those whose id starts with the prefix: a
# scan of the primary key in its order that filters the prefix, so a page reads the ids
# from the cursor on until it has its rows (with a prefix that sorts late or matches few,
# that can be many; Admin's listings run on their own pool and gate for that reason).
LIST_BUDGETS = f"""
SELECT {BUDGET_COLUMNS} FROM budgets
WHERE budget_id > $1 AND starts_with(budget_id, $2)
ORDER BY budget_id
LIMIT $3
"""


def _budget_cursor(token: str) -> str:
    if not token:
        return ""
    found = _decode(token)
    # A forged token could carry what PostgreSQL refuses in text: refused here.
    if isinstance(found, str) and _plain(found):
        return found
    raise InvalidArgument("page_token", "is not a token this sidecar gave")


async def budget_rows(conn: Conn, prefix: str, size: int, token: str) -> list[asyncpg.Record]:
    """The rows of one page of budgets whose id starts with prefix, in id order, and one
    more if there is a next page: see budget_page."""
    return await conn.fetch(LIST_BUDGETS, _budget_cursor(token), prefix, size + 1)


def budget_page(budgets: list[Budget], size: int) -> Page[Budget]:
    """The page of budget_rows' budgets; the next page's token is empty on the last page."""
    if len(budgets) <= size:
        return Page(budgets, "")
    return Page(budgets[:size], encode_token(budgets[size - 1].budget_id))


async def archive_budget(conn: Conn, budget_id: str, now: datetime) -> Budget:
    """Archives a budget with no open holds (READ COMMITTED, the row locked FOR UPDATE, so
    that a batch holding it is waited for and its holds counted); archiving twice answers
    the first archive."""
    budget = await queries.lock_budget_for_update(conn, budget_id)
    if budget is None:
        raise budget_not_found(budget_id)
    if budget.archived_at is not None:
        return budget
    regions.require_not_share(budget)
    # Holds reserved in a closed period are open holds of the budget too.
    open_holds = budget.open_reservations + (await queries.closed_use(conn, budget_id))[0]
    if open_holds:
        raise FailedPrecondition(
            f"budget {budget_id!r} has {open_holds} open holds; settle, "
            "resolve or release them first",
            Reason.BUDGET_HAS_OPEN_HOLDS,
            budget_id=budget_id,
        )
    # At its home (issue 48): shares leased to regions are open holds too, and a share whose
    # lease has not ended may still report use.
    leased = await conn.fetchval(
        "SELECT count(*) FROM region_shares WHERE budget_id = $1 "
        "AND (granted - greatest(returned, reclaimed_to) - used > 0 OR lease_until > $2)",
        budget_id,
        now,
    )
    if leased:
        raise FailedPrecondition(
            f"budget {budget_id!r} has shares leased to {leased} regions; they come back "
            "when the regions return them or their leases end",
            Reason.BUDGET_HAS_OPEN_HOLDS,
            budget_id=budget_id,
        )
    row = await conn.fetchrow(
        "UPDATE budgets SET archived_at = $2, updated_at = now() WHERE budget_id = $1 "
        f"RETURNING {BUDGET_COLUMNS}",
        budget_id,
        now,
    )
    assert row is not None
    return budget_from_row(row)


async def watch_totals(conn: Conn, now: datetime) -> WatchTotals:
    row = await conn.fetchrow(
        "SELECT (SELECT count(*) FROM in_doubt_holds) AS in_doubt, "
        "(SELECT min(since) FROM in_doubt_holds) AS oldest, "
        "(SELECT count(*) FROM budgets WHERE overage_since IS NOT NULL "
        "AND archived_at IS NULL) AS overage"
    )
    assert row is not None
    oldest = row["oldest"]
    age = 0.0 if oldest is None else max(0.0, (now - oldest).total_seconds())
    return WatchTotals(row["in_doubt"], age, row["overage"])


async def open_holds_by_unit(conn: Conn) -> list[UnitTotals]:
    """Open holds, held and used units, summed over the budgets of each unit and every
    period of theirs: a hold open across its budget's boundary is still held, and a reset
    does not take back what was spent."""
    rows = await conn.fetch(
        "SELECT b.unit, sum(c.open_reservations)::float8 AS holds, "
        "sum(c.held)::float8 AS held, sum(c.used)::float8 AS used "
        "FROM budgets b JOIN ("
        "  SELECT budget_id, open_reservations, held, used FROM budgets"
        "  UNION ALL"
        "  SELECT budget_id, open_reservations, held, used FROM budget_periods"
        ") c USING (budget_id) GROUP BY b.unit ORDER BY b.unit"
    )
    return [UnitTotals(r["unit"], r["holds"], r["held"], r["used"]) for r in rows]


async def most_used_budgets(conn: Conn, count: int, now: datetime) -> list[Budget]:
    """The count live budgets that refused in their current period first (a blocked team
    is the one to watch), then those with the highest (used + held) / limit, unlimited ones
    last; each as a read at now sees it (a period ended but not yet closed reads as the
    next, at zero: core.resets.current)."""
    rows = await conn.fetch(
        f"SELECT {BUDGET_COLUMNS} FROM budgets WHERE archived_at IS NULL "
        "ORDER BY (refusals > 0 AND refusals_period_no = period_no "
        "    AND (period_end IS NULL OR period_end > $2)) DESC, "
        "(used + held)::float8 / nullif(limit_units, 0) DESC NULLS LAST, "
        "budget_id LIMIT $1",
        count,
        now,
    )
    return [resets.current(budget_from_row(row), now) for row in rows]


async def held_among(conn: Conn, reservation_ids: list[str], now: datetime) -> list[str]:
    """Which of reservation_ids are still held with their lease running, soonest deadline
    first: what a stopping sidecar waits for. A hold in doubt, closed or past its lease is
    left out, since no worker is about to settle it (open_holds' rows with a deadline are
    exactly the held ones)."""
    rows = await conn.fetch(
        "SELECT reservation_id::text AS reservation_id FROM open_holds "
        "WHERE reservation_id = ANY($1::uuid[]) AND expires_at > $2 ORDER BY expires_at",
        reservation_ids,
        now,
    )
    return [row["reservation_id"] for row in rows]
