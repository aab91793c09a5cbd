"""The SQL of plans: accounts' billing-cycle budgets and the meter outbox."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from earmark import limits
from earmark.core.batch import BatchDecision, BatchState
from earmark.core.model import Budget
from earmark.core.ops import Op, ReserveOp
from earmark.core.ratelimit import AdmissionWindow
from earmark.store.named import NamedQuery
from earmark.store.rows import BUDGET_COLUMNS, budget_from_row
from earmark.store.tx import Conn

# A new cycle budget, or a newer limit read for one: a read older than the row's changes
# nothing, so sidecars that read at different moments never move a limit backwards (one
# as old as the row's is written: it is a forced refresh, or the same answer). A row of
# that id that is not this account's cycle (an operator's PutBudget) is left as it is; the
# core refuses to hold on it for the account.
# Running holds keep their amounts; the next admission sees the new limit.
UPSERT_CYCLE = NamedQuery(f"""
INSERT INTO budgets (budget_id, limit_units, unit, account, feature, cycle_start, cycle_end,
                     limit_read_at)
VALUES ($budget_id, $limit, $unit, $account, $feature, $cycle_start, $cycle_end, $read_at)
ON CONFLICT (budget_id) DO UPDATE
SET limit_units = EXCLUDED.limit_units, limit_read_at = EXCLUDED.limit_read_at,
    updated_at = now()
WHERE budgets.account = EXCLUDED.account
  AND (budgets.limit_read_at IS NULL OR budgets.limit_read_at <= EXCLUDED.limit_read_at)
RETURNING {BUDGET_COLUMNS}
""")

LOCK_ACCOUNTS = """
SELECT account, window_start, admissions FROM accounts
WHERE account = ANY($1::text[])
ORDER BY account
FOR UPDATE
"""

ENSURE_ACCOUNT = "INSERT INTO accounts (account) VALUES ($1) ON CONFLICT (account) DO NOTHING"

CYCLES_OF = f"""
SELECT {BUDGET_COLUMNS} FROM budgets
WHERE account = $1
ORDER BY cycle_start DESC, feature
LIMIT $2
"""

# A claim is a conditional upsert of the reporter's own row: a row another reporter claimed
# (and whose claim has not run out) is left alone, and not returned.
CLAIM_REPORTS = NamedQuery("""
WITH due AS (
    SELECT o.account, o.feature, o.cycle_start
    FROM meter_outbox o
    LEFT JOIN meter_sent s USING (account, feature, cycle_start)
    WHERE (o.version > coalesce(greatest(s.sent_version, s.parked_version), 0)
           OR (s.unknown_until <= $now AND o.version > coalesce(s.parked_version, 0)))
      AND (s.next_attempt_at IS NULL OR s.next_attempt_at <= $now)
      AND (s.claimed_until IS NULL OR s.claimed_until <= $now)
    ORDER BY o.at
    LIMIT $limit
)
INSERT INTO meter_sent (account, feature, cycle_start, claimed_until)
SELECT account, feature, cycle_start, $claimed_until FROM due
ON CONFLICT (account, feature, cycle_start) DO UPDATE
SET claimed_until = EXCLUDED.claimed_until
WHERE meter_sent.claimed_until IS NULL OR meter_sent.claimed_until <= $now
RETURNING account, feature, cycle_start, attempts
""")

# A period ends at its budget's cycle_end, or sooner where a newer period of the account
# and feature has begun (a plan changed); a total booked to a period that has not been
# opened yet (the one after a late settle's own) has no end known.
CLAIMED_TOTALS = """
SELECT o.account, o.feature, o.cycle_start, o.total, o.at, o.version,
    least(
        (SELECT min(b.cycle_start) FROM budgets b WHERE b.account = o.account
            AND b.feature = o.feature AND b.cycle_start > o.cycle_start),
        (SELECT max(b.cycle_end) FROM budgets b WHERE b.account = o.account
            AND b.feature = o.feature AND b.cycle_start = o.cycle_start)
    ) AS period_end
FROM meter_outbox o
JOIN unnest($1::text[], $2::text[], $3::timestamptz[]) AS k(account, feature, cycle_start)
    USING (account, feature, cycle_start)
"""

# A report that succeeded: the version it carried is sent; a newer total stays due. A
# report in doubt whose deadline had not passed when this one was claimed may still land
# after it, so unknown_until stays and the newest total goes once more then.
MARK_SENT = NamedQuery("""
UPDATE meter_sent SET sent_version = greatest(sent_version, $version), sent_total = $total,
    sent_at = $now, attempts = 0, next_attempt_at = NULL, claimed_until = NULL,
    unknown_until = CASE WHEN unknown_until <= $claimed_at THEN NULL ELSE unknown_until END
WHERE account = $account AND feature = $feature AND cycle_start = $cycle_start
""")

# A failed report; $unknown_until, when not null, is the deadline of a report that timed
# out after it was sent (the latest such deadline is kept).
MARK_FAILED = NamedQuery("""
UPDATE meter_sent SET attempts = attempts + 1, next_attempt_at = $next_attempt_at,
    claimed_until = NULL, unknown_until = greatest(unknown_until, $unknown_until::timestamptz)
WHERE account = $account AND feature = $feature AND cycle_start = $cycle_start
""")

# A report the provider refused for good: that version is parked, not sent again.
MARK_PARKED = NamedQuery("""
UPDATE meter_sent SET parked_version = greatest(parked_version, $version), parked_code = $code,
    attempts = 0, next_attempt_at = NULL, claimed_until = NULL
WHERE account = $account AND feature = $feature AND cycle_start = $cycle_start
""")

# A parked total is not waiting: it is counted in earmark_meter_rejected_total instead.
OUTBOX_STATE = """
SELECT count(*) AS depth, min(o.at) AS oldest
FROM meter_outbox o
LEFT JOIN meter_sent s USING (account, feature, cycle_start)
WHERE o.version > coalesce(greatest(s.sent_version, s.parked_version), 0)
"""


@dataclass(frozen=True, slots=True)
class Report:
    """A total the provider's meter must be told, claimed by one reporter."""

    account: str
    feature: str
    cycle_start: datetime
    total: int
    at: datetime
    version: int
    attempts: int
    # When it was claimed: a send that starts after a report in doubt's deadline
    # overwrites whatever that report did.
    claimed_at: datetime
    # When the period the total is booked to ended (None: open, or not known yet).
    period_end: datetime | None = None


async def upsert_cycle(conn: Conn, spec: Budget) -> Budget | None:
    """The cycle budget as written, or None when the row already had a newer read."""
    assert spec.account is not None
    args = UPSERT_CYCLE.args(
        budget_id=spec.budget_id,
        limit=spec.limit,
        unit=spec.unit,
        account=spec.account,
        feature=spec.feature,
        cycle_start=spec.cycle_start,
        cycle_end=spec.cycle_end,
        read_at=spec.limit_read_at,
    )
    row = await conn.fetchrow(UPSERT_CYCLE.sql, *args)
    # The account's counter row after its budget: the order every batch locks them in.
    await conn.execute(ENSURE_ACCOUNT, spec.account)
    return None if row is None else budget_from_row(row)


async def cycles_of(conn: Conn, account: str) -> list[Budget]:
    rows = await conn.fetch(CYCLES_OF, account, limits.cycles_listed_max)
    return [budget_from_row(row) for row in rows]


async def claim_reports(conn: Conn, now: datetime, count: int) -> list[Report]:
    args = CLAIM_REPORTS.args(
        now=now, claimed_until=now + timedelta(seconds=limits.report_claim_seconds), limit=count
    )
    claimed = await conn.fetch(CLAIM_REPORTS.sql, *args)
    if not claimed:
        return []
    attempts = {(r["account"], r["feature"], r["cycle_start"]): r["attempts"] for r in claimed}
    rows = await conn.fetch(
        CLAIMED_TOTALS,
        [key[0] for key in attempts],
        [key[1] for key in attempts],
        [key[2] for key in attempts],
    )
    return [
        Report(
            account=row["account"],
            feature=row["feature"],
            cycle_start=row["cycle_start"],
            total=row["total"],
            at=row["at"],
            version=row["version"],
            attempts=attempts[(row["account"], row["feature"], row["cycle_start"])],
            claimed_at=now,
            period_end=row["period_end"],
        )
        for row in rows
    ]


async def mark_sent(conn: Conn, report: Report, now: datetime) -> None:
    args = MARK_SENT.args(
        version=report.version,
        total=report.total,
        now=now,
        claimed_at=report.claimed_at,
        account=report.account,
        feature=report.feature,
        cycle_start=report.cycle_start,
    )
    await conn.execute(MARK_SENT.sql, *args)


async def mark_failed(
    conn: Conn, report: Report, next_attempt_at: datetime, unknown_until: datetime | None = None
) -> None:
    args = MARK_FAILED.args(
        next_attempt_at=next_attempt_at,
        unknown_until=unknown_until,
        account=report.account,
        feature=report.feature,
        cycle_start=report.cycle_start,
    )
    await conn.execute(MARK_FAILED.sql, *args)


async def mark_parked(conn: Conn, report: Report, code: str) -> None:
    args = MARK_PARKED.args(
        version=report.version,
        code=code,
        account=report.account,
        feature=report.feature,
        cycle_start=report.cycle_start,
    )
    await conn.execute(MARK_PARKED.sql, *args)


async def outbox_state(conn: Conn) -> tuple[int, datetime | None]:
    """(totals waiting to be reported, the time of the oldest of them)."""
    row = await conn.fetchrow(OUTBOX_STATE)
    assert row is not None
    return row["depth"], row["oldest"]


async def lock_windows(
    conn: Conn, entries: Sequence[tuple[tuple[str, ...], Op]]
) -> dict[str, AdmissionWindow]:
    """The admission counters of the accounts whose Reserves are rate limited, locked after
    the budgets (the order every transaction takes); an account without a row gets a new
    counter, written by the batch."""
    accounts = sorted(
        {op.account for _, op in entries if isinstance(op, ReserveOp) and op.admissions_per_minute}
    )
    if not accounts:
        return {}
    windows = {account: AdmissionWindow(account) for account in accounts}
    for row in await conn.fetch(LOCK_ACCOUNTS, accounts):
        windows[row["account"]] = AdmissionWindow(
            row["account"], row["window_start"], row["admissions"]
        )
    return windows


@dataclass(frozen=True, slots=True)
class MeterMove:
    """What a batch moved on a cycle budget's used, for the provider's meter: the change,
    when, and the budget's own period (the statement books it to the period open then)."""

    account: str
    feature: str
    cycle_start: datetime
    cycle_end: datetime
    used_delta: int
    at: datetime


def meter_moves(decided: Sequence[tuple[BatchState, BatchDecision]]) -> list[MeterMove]:
    """Every cycle budget whose used a batch moved (a Charge, a Settle, a late settle, an
    operator's resolve), with the sum of its ledger's used deltas: the meter counts usage
    in the period open when it was charged, so a late settle of a closed period's hold adds
    to the open period's total (as Kinde books usage reported after a period ends)."""
    moves: dict[str, MeterMove] = {}
    for _, decision in decided:
        for entry in decision.ledger:
            budget = decision.touched.get(entry.budget_id)
            if budget is None or entry.used_delta == 0:
                continue
            account, feature = budget.account, budget.feature
            start, end = budget.cycle_start, budget.cycle_end
            if account is None or feature is None or start is None or end is None:
                continue
            known = moves.get(budget.budget_id)
            delta = entry.used_delta + (0 if known is None else known.used_delta)
            at = entry.at if known is None else max(known.at, entry.at)
            moves[budget.budget_id] = MeterMove(account, feature, start, end, delta, at)
    return [moves[budget_id] for budget_id in sorted(moves) if moves[budget_id].used_delta]
