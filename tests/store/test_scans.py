"""Admin's listings run on the operator's pool behind their gate: a listing never waits for
the workers' connections, and the workers never wait for a listing's."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import asyncpg
import pytest

from earmark import limits
from earmark.core.model import Outcome
from earmark.core.ops import ReserveResult, SettleOp, SettleResult
from earmark.errors import Reason, Unavailable
from earmark.store import Store, stripes
from earmark.store.embedded import EmbeddedPostgres
from tests.conftest import TEST_DATABASE
from tests.helpers import HeldListings, assert_invariants, binary_missing, eventually, started
from tests.pgbouncer import pgbouncer
from tests.store.test_store import reserve_op

WAITING_ON = """
SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2 AND NOT l.granted
"""


@contextlib.asynccontextmanager
async def locked(dsn: str, table: str, mode: str) -> AsyncIterator[asyncpg.Connection]:
    """Another session holding a lock on table, as a long transaction would, until the
    block ends or the session is closed: whatever needs the table waits inside PostgreSQL,
    on its connection."""
    other = await asyncpg.connect(dsn)
    try:
        await other.execute(f"BEGIN; LOCK TABLE {table} IN {mode} MODE")
        yield other
    finally:
        await other.close()


async def waiting_on(conn: asyncpg.Connection, schema: str, table: str, count: int) -> None:
    async def check() -> bool:
        return count == await conn.fetchval(WAITING_ON, schema, table)

    await eventually(check, within_seconds=10, what=f"{count} sessions waiting on {table}")


async def test_listings_do_not_wait_for_the_workers_pool(dsn: str) -> None:
    """With the workers' one connection held by a batch waiting on its budget's stripe,
    every listing answers; the batch then completes."""
    store = await Store.open(dsn, pool_size_max=1)
    try:
        await store.put_budget("b", 1_000, "t")
        first = await store.submit(reserve_op(10))
        stripe = f"s{stripes.stripe_of('b'):02d}"
        async with (
            locked(dsn, f"{stripes.SCHEMA}.{stripe}", "EXCLUSIVE") as other,
            started(store.submit(reserve_op(20))) as (reserve,),
        ):
            await waiting_on(other, stripes.SCHEMA, stripe, 1)
            holds = await store.scans.list_holds("b", None, 10, "")
            ledger = await store.scans.list_ledger("b", 10, "")
            prices = await store.scans.list_prices()
            assert not reserve.done()
            await other.close()
            second = await reserve
    finally:
        await store.close()
    assert isinstance(first, ReserveResult)
    assert isinstance(second, ReserveResult)
    assert [first.reservation_id] == [h.reservation_id for h in holds.items]
    assert (1, []) == (len(ledger.items), prices)
    assert second.admitted
    await assert_invariants(dsn)


async def test_workers_do_not_wait_for_listings(dsn: str, held_listings: HeldListings) -> None:
    """With every connection of the operator's pool held by a listing, and more listings in
    line than the workers' pool has connections, Reserves and Settles still complete."""
    store = await Store.open(dsn)
    listings = limits.admin_pool_size_max + limits.pool_size_max_default
    try:
        await store.put_budget("b", 1_000, "t")
        async with started(
            *(store.scans.list_holds("b", None, 100, "") for _ in range(listings))
        ) as tasks:
            await held_listings.holding_exactly(limits.admin_scans_max)
            for _ in range(20):
                reserved = await store.submit(reserve_op(10))
                assert isinstance(reserved, ReserveResult)
                settle = SettleOp(reserved.reservation_id, 5, Outcome.SUCCEEDED)
                settled = await store.submit(settle)
                assert isinstance(settled, SettleResult)
            assert not any(task.done() for task in tasks)
            held_listings.release.set()
            pages = await asyncio.gather(*tasks)
    finally:
        await store.close()
    assert [20] * listings == [len(page.items) for page in pages]
    await assert_invariants(dsn)


async def test_listings_beyond_the_line_are_overloaded(
    dsn: str, held_listings: HeldListings
) -> None:
    """Past the listings that run and those that may wait, one more is UNAVAILABLE
    (OVERLOADED) at once; those in line are answered once the running ones end."""
    store = await Store.open(dsn)
    in_line = limits.admin_scans_max + limits.admin_scans_waiting_max
    try:
        await store.put_budget("b", 1_000, "t")
        async with started(
            *(store.scans.list_holds("b", None, 10, "") for _ in range(in_line))
        ) as tasks:
            await held_listings.holding_exactly(limits.admin_scans_max)

            async def full() -> bool:
                return limits.admin_scans_waiting_max == store.scans.waiting

            await eventually(full, within_seconds=10, what="the line of listings full")
            with pytest.raises(Unavailable) as refused:
                await store.scans.list_ledger("b", 10, "")
            held_listings.release.set()
            pages = await asyncio.gather(*tasks)
    finally:
        await store.close()
    assert Reason.OVERLOADED == refused.value.reason
    assert [0] * in_line == [len(page.items) for page in pages]


async def test_listings_behind_pgbouncer_prepare_nothing_by_name(
    embedded_pg: EmbeddedPostgres, dsn: str
) -> None:
    """Behind PgBouncer in transaction pooling, listings on the operator's pool and Reserves
    on the workers' share two server connections, and no statement of either pool is named
    on one server connection and looked for on the other."""
    why = binary_missing("pgbouncer", "pgbouncer")
    if why:
        pytest.skip(why)
    with pgbouncer(embedded_pg.uri(TEST_DATABASE), TEST_DATABASE, pool_size=2) as bouncer:
        store = await Store.open(bouncer.url(TEST_DATABASE), prepared_statements=False)
        try:
            await store.put_budget("b", 1_000, "t")

            async def list_pages() -> None:
                for _ in range(20):
                    await store.scans.list_holds("b", None, 10, "")
                    await store.scans.list_ledger("b", 10, "")

            reserves = [store.submit(reserve_op(1)) for _ in range(20)]
            results = await asyncio.gather(list_pages(), list_pages(), *reserves)
        finally:
            await store.close()
    assert [True] * 20 == [r.admitted for r in results[2:] if isinstance(r, ReserveResult)]
    await assert_invariants(dsn)
