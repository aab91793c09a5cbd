"""The SQL of budget notices' delivery: the deliverer's lease, the events due, what came of
each attempt, and the operator's listing (`earmark events list`).

Only the batches write `events`, and the price book's puts and passes their price.changed
(store/price_notices.py, READ COMMITTED, no budget touched); only the deliverer writes
`event_deliveries` and `notify_lease` (migration 0019), in short READ COMMITTED
transactions of their own, so that a delivery never conflicts with a serializable batch
(as the meter reporter's meter_sent beside meter_outbox).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, TypeVar

import asyncpg

from earmark import limits
from earmark.store.named import NamedQuery
from earmark.store.pools import create_pool
from earmark.store.tx import Conn, mapped_db_errors, read_snapshot, run_transaction

T = TypeVar("T")

# What an operator can ask `earmark events list` for: pending (not tried yet), retrying
# (failed attempts, tried again later), delivered, or failed (given up).
State = Literal["pending", "retrying", "delivered", "failed"]
STATES: tuple[State, ...] = ("pending", "retrying", "delivered", "failed")

# The lease is taken when nobody holds it, when its holder let it run out (a sidecar that
# died), or renewed when it is already ours. Concurrent takers serialize on the row: the
# one that waited sees the winner's row and takes it only if that has run out.
TAKE_LEASE = NamedQuery("""
INSERT INTO notify_lease (only_row, holder, until) VALUES (true, $holder, $until)
ON CONFLICT (only_row) DO UPDATE SET holder = EXCLUDED.holder, until = EXCLUDED.until
WHERE notify_lease.holder = EXCLUDED.holder OR notify_lease.until <= $now
RETURNING holder
""")

RELEASE_LEASE = "DELETE FROM notify_lease WHERE holder = $1"

# Events not delivered and not given up, whose next attempt is due, oldest first.
DUE_EVENTS = NamedQuery("""
SELECT e.seq, e.event_id, e.kind, e.budget_id, e.payload::text AS payload,
       coalesce(d.attempts, 0) AS attempts
FROM events e
LEFT JOIN event_deliveries d USING (seq)
WHERE d.delivered_at IS NULL AND d.failed_at IS NULL
  AND (d.next_attempt_at IS NULL OR d.next_attempt_at <= $now)
ORDER BY e.seq
LIMIT $limit
""")

# Each outcome counts the attempt and is written only while the event is still open: a
# deliverer that lost its lease mid-attempt cannot reopen what another one finished.
MARK_DELIVERED = NamedQuery("""
INSERT INTO event_deliveries AS d (seq, attempts, delivered_at) VALUES ($seq, 1, $now)
ON CONFLICT (seq) DO UPDATE SET attempts = d.attempts + 1, delivered_at = $now,
    next_attempt_at = NULL
WHERE d.delivered_at IS NULL AND d.failed_at IS NULL
""")

MARK_RETRY = NamedQuery("""
INSERT INTO event_deliveries AS d (seq, attempts, next_attempt_at, last_error)
VALUES ($seq, 1, $next_attempt_at, $error)
ON CONFLICT (seq) DO UPDATE SET attempts = d.attempts + 1,
    next_attempt_at = $next_attempt_at, last_error = $error
WHERE d.delivered_at IS NULL AND d.failed_at IS NULL
""")

MARK_FAILED = NamedQuery("""
INSERT INTO event_deliveries AS d (seq, attempts, failed_at, last_error)
VALUES ($seq, 1, $now, $error)
ON CONFLICT (seq) DO UPDATE SET attempts = d.attempts + 1, failed_at = $now,
    next_attempt_at = NULL, last_error = $error
WHERE d.delivered_at IS NULL AND d.failed_at IS NULL
""")

UNDELIVERED = """
SELECT count(*) FROM events e
LEFT JOIN event_deliveries d USING (seq)
WHERE d.delivered_at IS NULL AND d.failed_at IS NULL
"""

# Newest first; each filter is skipped when NULL. The CTE is inlined (PostgreSQL 12 and
# later), so the newest rows are read first and the scan stops at the limit.
LIST_EVENTS = NamedQuery("""
WITH listed AS (
    SELECT e.seq, e.event_id, e.kind, e.budget_id, e.payload::text AS payload, e.created_at,
           coalesce(d.attempts, 0) AS attempts, d.next_attempt_at, d.delivered_at,
           d.failed_at, coalesce(d.last_error, '') AS last_error,
           CASE WHEN d.delivered_at IS NOT NULL THEN 'delivered'
                WHEN d.failed_at IS NOT NULL THEN 'failed'
                WHEN coalesce(d.attempts, 0) > 0 THEN 'retrying'
                ELSE 'pending' END AS state
    FROM events e
    LEFT JOIN event_deliveries d USING (seq)
)
SELECT * FROM listed
WHERE ($budget_id::text IS NULL OR budget_id = $budget_id)
  AND ($kind::text IS NULL OR kind = $kind)
  AND ($state::text IS NULL OR state = $state)
ORDER BY seq DESC
LIMIT $limit
""")


@dataclass(frozen=True, slots=True)
class DueEvent:
    """An event to post: its webhook-id (event_id), its payload as the database keeps it
    (JSON text), and how many attempts failed before."""

    seq: int
    event_id: str
    kind: str
    budget_id: str
    payload: str
    attempts: int


@dataclass(frozen=True, slots=True)
class ListedEvent:
    """An event and what the deliverer did with it, for `earmark events list`."""

    seq: int
    event_id: str
    kind: str
    budget_id: str
    payload: str
    created_at: datetime
    state: State
    attempts: int
    next_attempt_at: datetime | None
    delivered_at: datetime | None
    failed_at: datetime | None
    last_error: str


def _cut(error: str) -> str:
    return error[: limits.notify_error_length_max]


class EventLog:
    """What the deliverer reads and writes, on a pool of its own of at most one connection
    (made alike the store's, opened at the first use and none kept while idle past
    limits.pool_idle_seconds_max): a pass that waits on the database never holds a
    connection a worker's call waits for. Every time is the deliverer's (its injected
    clock), as the meter reporter's claims are."""

    def __init__(self, dsn: str, *, prepared_statements: bool = True) -> None:
        self._dsn = dsn
        self._prepared_statements = prepared_statements
        self._pool: asyncpg.Pool | None = None

    async def close(self) -> None:
        """Closes the pool; a connection a cancelled pass still holds is not waited for
        past a command's timeout, but closed."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        try:
            await asyncio.wait_for(pool.close(), limits.db_command_timeout_seconds)
        except TimeoutError:
            pool.terminate()

    async def _transaction(self, work: Callable[[Conn], Awaitable[T]]) -> T:
        """work in one READ COMMITTED transaction, run again after a conflict (a lost race
        on the lease row), within limits.tx_attempts_max."""
        if self._pool is None:
            with mapped_db_errors():
                self._pool = await create_pool(
                    self._dsn,
                    min_size=0,
                    max_size=1,
                    prepared_statements=self._prepared_statements,
                )
        return await run_transaction(self._pool, work, isolation="read_committed")

    async def take_due(
        self, holder: str, now: datetime, lease_seconds: float, count: int
    ) -> list[DueEvent] | None:
        """Takes or renews the lease for holder until now + lease_seconds and reads at most
        count events due at now, in seq order; None when another deliverer holds the
        lease."""
        assert 1 <= count <= limits.notify_batch_max

        async def work(conn: Conn) -> list[DueEvent] | None:
            if not await _take_lease(conn, holder, now, lease_seconds):
                return None
            rows = await conn.fetch(DUE_EVENTS.sql, *DUE_EVENTS.args(now=now, limit=count))
            return [
                DueEvent(
                    seq=row["seq"],
                    event_id=row["event_id"],
                    kind=row["kind"],
                    budget_id=row["budget_id"],
                    payload=row["payload"],
                    attempts=row["attempts"],
                )
                for row in rows
            ]

        return await self._transaction(work)

    async def renew(self, holder: str, now: datetime, lease_seconds: float) -> bool:
        """Whether holder still holds the lease, now until now + lease_seconds."""

        async def work(conn: Conn) -> bool:
            return await _take_lease(conn, holder, now, lease_seconds)

        return await self._transaction(work)

    async def release(self, holder: str) -> None:
        """Gives the lease up, if holder has it, so that another sidecar takes it at once."""

        async def work(conn: Conn) -> None:
            await conn.execute(RELEASE_LEASE, holder)

        await self._transaction(work)

    async def delivered(self, seq: int, now: datetime) -> None:
        await self._write(MARK_DELIVERED, seq=seq, now=now)

    async def retry(self, seq: int, next_attempt_at: datetime, error: str) -> None:
        await self._write(MARK_RETRY, seq=seq, next_attempt_at=next_attempt_at, error=_cut(error))

    async def failed(self, seq: int, now: datetime, error: str) -> None:
        await self._write(MARK_FAILED, seq=seq, now=now, error=_cut(error))

    async def undelivered(self) -> int:
        """Events neither delivered nor given up (for earmark_notices_undelivered)."""

        async def work(conn: Conn) -> int:
            return int(await conn.fetchval(UNDELIVERED))

        return await self._transaction(work)

    async def _write(self, query: NamedQuery, **values: object) -> None:
        async def work(conn: Conn) -> None:
            await conn.execute(query.sql, *query.args(**values))

        await self._transaction(work)


async def _take_lease(conn: Conn, holder: str, now: datetime, lease_seconds: float) -> bool:
    until = now + timedelta(seconds=lease_seconds)
    args = TAKE_LEASE.args(holder=holder, until=until, now=now)
    return await conn.fetchval(TAKE_LEASE.sql, *args) is not None


async def list_events(
    conn: Conn,
    *,
    budget_id: str | None = None,
    kind: str | None = None,
    state: State | None = None,
    limit: int = limits.events_listed_default,
) -> list[ListedEvent]:
    """At most limit events, newest first, with their delivery."""
    assert 1 <= limit <= limits.events_listed_max
    args = LIST_EVENTS.args(budget_id=budget_id, kind=kind, state=state, limit=limit)
    return [
        ListedEvent(
            seq=row["seq"],
            event_id=row["event_id"],
            kind=row["kind"],
            budget_id=row["budget_id"],
            payload=row["payload"],
            created_at=row["created_at"],
            state=row["state"],
            attempts=row["attempts"],
            next_attempt_at=row["next_attempt_at"],
            delivered_at=row["delivered_at"],
            failed_at=row["failed_at"],
            last_error=row["last_error"],
        )
        for row in await conn.fetch(LIST_EVENTS.sql, *args)
    ]


async def events_in_database(
    url: str,
    *,
    budget_id: str | None = None,
    kind: str | None = None,
    state: State | None = None,
    limit: int = limits.events_listed_default,
) -> list[ListedEvent]:
    """list_events on a connection of its own to url, in one read-only snapshot (as
    `earmark audit` and `earmark usage` read)."""
    return await read_snapshot(
        url,
        lambda conn: list_events(conn, budget_id=budget_id, kind=kind, state=state, limit=limit),
    )
