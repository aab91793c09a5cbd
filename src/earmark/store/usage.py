"""`earmark usage`: an account's cycle budgets beside what the meter outbox holds for each
(the used total to report) and what was last reported (meter_sent), read from the tables
(no Admin RPC answers the outbox)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from earmark import limits
from earmark.store.tx import Conn, read_snapshot

# Newest period first. A cycle budget exists for every outbox row (the batches write the
# row from the budget's used total), so the budgets are the rows and the outbox and what
# was sent are joined to them; an archived cycle is still shown, its usage was real.
USAGE_OF = """
SELECT b.budget_id, b.feature, b.cycle_start, b.cycle_end, b.unit, b.limit_units, b.used,
       b.held, o.total AS metered, o.at AS metered_at, o.version,
       s.sent_total, s.sent_at, coalesce(s.sent_version, 0) AS sent_version,
       coalesce(s.attempts, 0) AS attempts
FROM budgets b
LEFT JOIN meter_outbox o
    ON o.account = b.account AND o.feature = b.feature AND o.cycle_start = b.cycle_start
LEFT JOIN meter_sent s
    ON s.account = b.account AND s.feature = b.feature AND s.cycle_start = b.cycle_start
WHERE b.account = $1
ORDER BY b.cycle_start DESC, b.feature
LIMIT $2
"""


@dataclass(frozen=True, slots=True)
class PeriodUsage:
    """One feature's billing period of an account: the budget, and the meter's view of it."""

    budget_id: str
    feature: str
    period_start: datetime
    period_end: datetime
    unit: str
    # None: the plan sets no maximum.
    limit: int | None
    used: int
    held: int
    # The used total the outbox holds for the meter (None: nothing settled yet), and when.
    metered: int | None
    metered_at: datetime | None
    # The total last reported, and when (None: never).
    reported: int | None
    reported_at: datetime | None
    # Whether a newer total than the one reported waits in the outbox.
    pending: bool
    # Failed reports since the last that went through.
    attempts: int


async def usage_of(conn: Conn, account: str) -> list[PeriodUsage]:
    rows = await conn.fetch(USAGE_OF, account, limits.cycles_listed_max)
    return [
        PeriodUsage(
            budget_id=row["budget_id"],
            feature=row["feature"],
            period_start=row["cycle_start"],
            period_end=row["cycle_end"],
            unit=row["unit"],
            limit=row["limit_units"],
            used=row["used"],
            held=row["held"],
            metered=row["metered"],
            metered_at=row["metered_at"],
            reported=row["sent_total"],
            reported_at=row["sent_at"],
            pending=row["version"] is not None and row["version"] > row["sent_version"],
            attempts=row["attempts"],
        )
        for row in rows
    ]


async def usage_in_database(url: str, account: str) -> list[PeriodUsage]:
    """usage_of on a connection of its own to url, in one read-only snapshot, so that a
    live sidecar's writes cannot make the outbox disagree with the budget mid-read."""
    return await read_snapshot(url, lambda conn: usage_of(conn, account))
