"""What a batch reads under SERIALIZABLE, as PostgreSQL's predicate locks (SIReadLock) show
it: batches of different budgets must not read the pages that others write (issue 35)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import asyncpg

from earmark.core.model import Outcome
from earmark.core.ops import ReserveResult, SettleOp
from earmark.store import Store, stripes, writes
from earmark.store.audit import audit
from tests.helpers import assert_invariants
from tests.store.test_store import reserve_op

# The predicate locks this backend holds, by relation.
SIREAD = """
SELECT c.relname, l.locktype FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
WHERE l.mode = 'SIReadLock' AND l.pid = pg_backend_pid()
ORDER BY 1, 2
"""


async def reserved(store: Store, count: int) -> list[str]:
    await store.put_budget("b", 1_000_000, "t")
    ids = []
    for _ in range(count):
        result = await store.submit(reserve_op(1))
        assert isinstance(result, ReserveResult)
        ids.append(result.reservation_id)
    return ids


async def test_closing_and_renewing_holds_reads_nothing_of_open_holds(
    store: Store, dsn: str
) -> None:
    """A batch's writes to open_holds (a renewed deadline, a closed hold) take no predicate
    lock there: its few index pages are where every Reserve inserts, and a read of them
    made every two batches conflict (migration 0020). The same rows deleted by a DELETE,
    as before, do take one."""
    ids = await reserved(store, 4)
    later = datetime.now(UTC) + timedelta(minutes=10)
    conn = await asyncpg.connect(dsn)
    try:
        locks = {}
        for kinds, args in (
            (("extended",), [[(ids[0], later)]]),
            (("closed",), [[ids[1]]]),
            (("extended", "closed"), [[(ids[2], later)], [ids[3]]]),
        ):
            statement = writes.write_statement(kinds)
            async with conn.transaction(isolation="serializable"):
                await conn.execute(stripes.SETTINGS)
                await conn.execute(statement.sql, *args)
                locks[kinds] = [tuple(row) for row in await conn.fetch(SIREAD)]
        undone = conn.transaction(isolation="serializable")
        await undone.start()
        await conn.execute(stripes.SETTINGS)
        await conn.execute("DELETE FROM open_holds WHERE reservation_id = $1", ids[0])
        deleted = [tuple(row) for row in await conn.fetch(SIREAD)]
        await undone.rollback()
        rows = {
            str(row["reservation_id"]): row["expires_at"]
            for row in await conn.fetch("SELECT reservation_id, expires_at FROM open_holds")
        }
    finally:
        await conn.close()
    assert {kinds: [] for kinds in locks} == locks
    assert ("open_holds_pkey", "page") in deleted
    assert {ids[0]: later, ids[1]: None, ids[2]: later, ids[3]: None} == rows


async def test_the_sweeper_deletes_the_rows_of_closed_holds(store: Store, dsn: str) -> None:
    """A Settle leaves its hold's open_holds row without a deadline, which the audit allows;
    the next sweep deletes it, and keeps the rows of holds still held."""
    ids = await reserved(store, 3)
    for reservation_id in ids[:2]:
        await store.submit(SettleOp(reservation_id, 1, Outcome.SUCCEEDED))
    conn = await asyncpg.connect(dsn)
    try:
        query = "SELECT reservation_id::text, expires_at IS NULL FROM open_holds ORDER BY 1"
        before = {row[0]: row[1] for row in await conn.fetch(query)}
        await assert_invariants(dsn)
        await store.sweep_once()
        after = {row[0]: row[1] for row in await conn.fetch(query)}
    finally:
        await conn.close()
    assert {ids[0]: True, ids[1]: True, ids[2]: False} == before
    assert {ids[2]: False} == after
    await assert_invariants(dsn)


async def test_the_audit_counts_a_held_reservation_without_a_deadline(
    store: Store, dsn: str
) -> None:
    """A held hold whose row lost its deadline is drift, as a missing row is."""
    (reservation_id,) = await reserved(store, 1)
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            "UPDATE open_holds SET expires_at = NULL WHERE reservation_id = $1",
            uuid.UUID(reservation_id),
        )
        problems = await audit(conn)
    finally:
        await conn.close()
    assert ["open_holds differs from the held reservations in 1 rows"] == problems
