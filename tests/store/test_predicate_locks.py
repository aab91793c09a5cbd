"""What a batch reads under SERIALIZABLE, as PostgreSQL's predicate locks (SIReadLock) show
it: batches of different budgets must not read the pages that others write (issue 35)."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg

from earmark.core.model import Outcome
from earmark.core.ops import ReserveResult, SettleOp
from earmark.core.prices import PriceBook
from earmark.store import Store, StoreObserver, queries, stripes, writes
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


async def test_a_batch_reads_idempotency_keys_only_when_asked(store: Store, dsn: str) -> None:
    """Loading a batch without its Reserves' keys reads nothing of
    reservations_idempotency, whose leaf pages budgets with neighbouring ids share; with
    them, the probe locks the leaf page where the key would be."""
    await store.put_budget("b", 1_000_000, "t")
    op = reserve_op(1)
    conn = await asyncpg.connect(dsn)
    try:
        locks = {}
        for by_key in (False, True):
            undone = conn.transaction(isolation="serializable")
            await undone.start()
            await conn.execute(stripes.SETTINGS)
            await queries.load_batches(conn, [(("b",), op)], PriceBook(), by_key=by_key)
            locks[by_key] = {row[0] for row in await conn.fetch(SIREAD)}
            await undone.rollback()
    finally:
        await conn.close()
    assert "reservations_idempotency" not in locks[False]
    assert "reservations_idempotency" in locks[True]


async def test_a_repeated_reserve_answers_its_hold_whether_admitted_or_not(dsn: str) -> None:
    """A Reserve is decided first as if its key were new. Repeated where the budget has room,
    its insert fails on the unique key and the batch runs again with keys looked up (one
    retry); repeated where the first took the whole budget, its refusal is checked against
    the keys before it stands. Both answer the first hold, and nothing moves twice."""
    retries: list[int] = []
    store = await Store.open(dsn, observer=StoreObserver(on_retry=lambda: retries.append(1)))
    try:
        await store.put_budget("roomy", 100, "t")
        await store.put_budget("full", 10, "t")
        answers = {}
        for budget_id, amount in (("roomy", 10), ("full", 10)):
            op = reserve_op(amount, budget_id=budget_id)
            first = await store.submit(op)
            again = await store.submit(
                dataclasses.replace(op, new_reservation_id=str(uuid.uuid4()))
            )
            assert isinstance(first, ReserveResult)
            assert isinstance(again, ReserveResult)
            answers[budget_id] = (first.admitted, again.admitted, again.duplicate,
                                  again.reservation_id == first.reservation_id)  # fmt: skip
    finally:
        await store.close()
    assert {"roomy": (True, True, True, True), "full": (True, True, True, True)} == answers
    assert [1] == retries
    await assert_invariants(dsn)
