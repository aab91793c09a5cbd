"""The SQL of plan changes pushed by the billing provider: the marks a verified webhook
leaves on an account (plan_marks), the ids of the events and deliveries acted on
(webhook_events), and the sidecars' reads of new marks."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from earmark import limits
from earmark.store.tx import Conn

# The event's id and the delivery's are taken first: a delivery sent again finds either
# taken (no conflict target: the event id's key and the delivery id's unique index alike)
# and changes nothing.
TAKE_EVENT = """
INSERT INTO webhook_events (event_id, webhook_id, event_type, account, received_at, keep_until)
VALUES ($1, $2, $3, $4, clock_timestamp(), $5)
ON CONFLICT DO NOTHING
RETURNING event_id
"""

# The database's clock, which the sidecars compare marks with (see 0010_plan_marks.sql).
MARK = """
INSERT INTO plan_marks (account, marked_at) VALUES ($1, clock_timestamp())
ON CONFLICT (account) DO UPDATE SET marked_at = EXCLUDED.marked_at
RETURNING marked_at
"""

# A bounded prune per accepted event: a burst of events never turns into one long delete.
PRUNE_EVENTS = """
DELETE FROM webhook_events WHERE event_id IN (
    SELECT event_id FROM webhook_events WHERE keep_until < clock_timestamp()
    ORDER BY keep_until LIMIT $1)
"""

PRUNE_MARKS = """
DELETE FROM plan_marks WHERE account IN (
    SELECT account FROM plan_marks WHERE marked_at < clock_timestamp() - $1::interval
    ORDER BY marked_at LIMIT $2)
"""

DATABASE_NOW = "SELECT clock_timestamp()"

# Keyset order (marked_at, account): a page ends where the next begins, even among marks of
# one instant.
MARKS_AFTER = """
SELECT account, marked_at FROM plan_marks
WHERE (marked_at, account) > ($1, $2)
ORDER BY marked_at, account
LIMIT $3
"""


@dataclass(frozen=True, slots=True)
class Mark:
    account: str
    marked_at: datetime


async def mark_account(
    conn: Conn,
    event_id: str,
    webhook_id: str | None,
    event_type: str,
    account: str,
    keep_until: datetime,
) -> datetime | None:
    """Within the caller's transaction: takes the event's id and the delivery's (None when
    the delivery named none) and marks the account; None (and nothing written) when either
    id was taken before: the delivery came again. Prunes a few expired rows of both tables
    on the way."""
    taken = await conn.fetchval(TAKE_EVENT, event_id, webhook_id, event_type, account, keep_until)
    if taken is None:
        return None
    marked_at: datetime = await conn.fetchval(MARK, account)
    await conn.execute(PRUNE_EVENTS, limits.webhook_prune_rows_max)
    await conn.execute(
        PRUNE_MARKS,
        timedelta(seconds=limits.plan_marks_keep_seconds),
        limits.webhook_prune_rows_max,
    )
    return marked_at


async def database_now(conn: Conn) -> datetime:
    """The database's clock: where a sidecar starts looking for marks."""
    now: datetime = await conn.fetchval(DATABASE_NOW)
    return now


async def marks_after(conn: Conn, after: Mark, count: int) -> list[Mark]:
    """At most count marks after `after` in (marked_at, account) order."""
    rows = await conn.fetch(MARKS_AFTER, after.marked_at, after.account, count)
    return [Mark(account=r["account"], marked_at=r["marked_at"]) for r in rows]
