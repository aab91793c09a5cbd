"""Budget stripes: a batch waits for another transaction on its budgets before its snapshot,
so that what that transaction wrote is what the batch decides on, without a retry."""

from __future__ import annotations

import asyncio

import asyncpg

from earmark import limits
from earmark.core.ops import ReserveResult
from earmark.store import Store, StoreObserver, stripes
from tests.helpers import assert_invariants, eventually
from tests.store.test_store import reserve_op

WAITING_FOR_STRIPE = """
SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'earmark_stripes' AND c.relname = $1 AND NOT l.granted
"""


def test_a_budget_has_one_stripe_in_every_process() -> None:
    """A budget's stripe is crc32 of its id: fixed across processes, within the bound."""
    assert 3611784723 % limits.budget_stripes == stripes.stripe_of("acme/tokens")


def test_stripes_are_locked_once_each_in_order() -> None:
    """The first statement sets the plan settings, then locks each stripe once, in order."""
    ids = ["acme/tokens", "b", "acme/tokens", "c"]
    names = sorted({f"earmark_stripes.s{stripes.stripe_of(i):02d}" for i in ids})
    expected = f"{stripes.SETTINGS}; LOCK TABLE {', '.join(names)} IN EXCLUSIVE MODE"
    assert expected == stripes.first_statement(ids)
    assert stripes.SETTINGS == stripes.first_statement()


async def test_the_migration_makes_every_stripe(dsn: str) -> None:
    """There is one stripe table for each stripe the store can name, and they hold nothing."""
    conn = await asyncpg.connect(dsn)
    try:
        names = await conn.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'earmark_stripes' ORDER BY 1"
        )
    finally:
        await conn.close()
    assert [f"s{n:02d}" for n in range(limits.budget_stripes)] == [r[0] for r in names]


async def test_a_batch_waits_for_its_stripe_and_sees_what_was_committed(dsn: str) -> None:
    """A Reserve whose budget's stripe another transaction holds waits, then decides on what
    that transaction committed (a limit cut from 1,000 to 500 refuses 800) with no retry."""
    retries: list[int] = []
    store = await Store.open(dsn, observer=StoreObserver(on_retry=lambda: retries.append(1)))
    other = await asyncpg.connect(dsn)
    try:
        await store.put_budget("b", 1_000, "t")
        stripe = f"s{stripes.stripe_of('b'):02d}"
        transaction = other.transaction(isolation="serializable")
        await transaction.start()
        await other.execute(f"LOCK TABLE earmark_stripes.{stripe} IN EXCLUSIVE MODE")
        await other.execute("UPDATE budgets SET limit_units = 500 WHERE budget_id = 'b'")
        reserve = asyncio.create_task(store.submit(reserve_op(800)))

        async def waiting() -> bool:
            return bool(await other.fetchval(WAITING_FOR_STRIPE, stripe))

        await eventually(waiting, within_seconds=10, what="the batch waiting for its stripe")
        await transaction.commit()
        result = await reserve
    finally:
        await other.close()
        await store.close()
    assert isinstance(result, ReserveResult)
    assert (False, 500, []) == (result.admitted, result.remaining, retries)
    await assert_invariants(dsn)
