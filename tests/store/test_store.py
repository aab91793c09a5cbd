"""The store against a real PostgreSQL: migrations, group admission, sweepers, two sidecars."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from earmark import limits
from earmark.core.model import Outcome
from earmark.core.ops import ReserveOp, ReserveResult, SettleOp
from earmark.errors import Unavailable
from earmark.store import Store, StoreObserver
from earmark.store.audit import audit
from earmark.store.migrate import migrate, migrations
from earmark.store.tx import Conn, run_serializable
from tests.helpers import assert_invariants, fetch_budget_row


def reserve_op(amount: int, lease_seconds: float = 120.0, budget_id: str = "b") -> ReserveOp:
    return ReserveOp(
        budget_id=budget_id,
        idempotency_key=uuid.uuid4().hex,
        amount=amount,
        lease=timedelta(seconds=lease_seconds),
        new_reservation_id=str(uuid.uuid4()),
    )


async def test_migrations_apply_once(dsn: str) -> None:
    """Running the migrations again applies nothing and keeps the recorded versions."""
    conn = await asyncpg.connect(dsn)
    try:
        assert [] == await migrate(conn)
        versions = [r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")]
    finally:
        await conn.close()
    assert [m.version for m in migrations()] == versions


async def test_ledger_is_append_only(store: Store, dsn: str) -> None:
    """An UPDATE of a ledger row fails: the ledger only grows."""
    await store.put_budget("b", 100, "t")
    await store.submit(reserve_op(10))
    conn = await asyncpg.connect(dsn)
    try:
        with pytest.raises(asyncpg.RaiseError, match="append-only"):
            await conn.execute("UPDATE ledger SET used_delta = 5")
    finally:
        await conn.close()


async def test_concurrent_reserves_share_transactions(dsn: str) -> None:
    """50 concurrent Reserves on one budget are decided in far fewer than 50 transactions."""
    sizes: list[int] = []
    store = await Store.open(dsn, observer=StoreObserver(on_batch=sizes.append))
    try:
        await store.put_budget("b", 10_000, "t")
        results = await asyncio.gather(*[store.submit(reserve_op(100)) for _ in range(50)])
    finally:
        await store.close()
    assert 50 == sum(isinstance(r, ReserveResult) and r.admitted for r in results)
    assert 50 == sum(sizes)
    assert len(sizes) < 50
    await assert_invariants(dsn)


async def test_two_sweepers_never_double_release(store: Store, dsn: str) -> None:
    """Two stores sweeping the same expired holds at once close each hold exactly once."""
    await store.put_budget("b", 1_000_000, "t")
    await asyncio.gather(*[store.submit(reserve_op(1_000, lease_seconds=1)) for _ in range(300)])
    later = datetime.now(UTC) + timedelta(hours=1)
    a = await Store.open(dsn, clock=lambda: later)
    b = await Store.open(dsn, clock=lambda: later)
    try:
        closed = 0
        for _ in range(5):
            results = await asyncio.gather(a.sweep_once(50), b.sweep_once(50))
            closed += sum(results)
        while (n := await a.sweep_once(500)) > 0:
            closed += n
    finally:
        await a.close()
        await b.close()
    assert 300 == closed
    row = await fetch_budget_row(dsn, "b")
    assert (0, 0, 0) == (row["held"], row["used"], row["open_reservations"])
    conn = await asyncpg.connect(dsn)
    try:
        expires = await conn.fetchval("SELECT count(*) FROM ledger WHERE kind = 'expire'")
    finally:
        await conn.close()
    assert 300 == expires
    await assert_invariants(dsn)


async def test_two_sidecars_race_on_one_budget(dsn: str) -> None:
    """Two stores (two sidecars' worth of pools and lanes) racing on one budget admit exactly
    what fits, with conflicts retried rather than admitted twice."""
    retries: list[int] = []
    a = await Store.open(dsn, observer=StoreObserver(on_retry=lambda: retries.append(1)))
    b = await Store.open(dsn, observer=StoreObserver(on_retry=lambda: retries.append(1)))
    try:
        await a.put_budget("b", 50_000, "t")
        ops = [(a if i % 2 else b, reserve_op(1_000)) for i in range(80)]
        results = await asyncio.gather(*[s.submit(op) for s, op in ops])
        admitted = [r for r in results if isinstance(r, ReserveResult) and r.admitted]
        settles = [
            (a if i % 2 else b).submit(SettleOp(r.reservation_id, 1_000, Outcome.SUCCEEDED))
            for i, r in enumerate(admitted)
        ]
        await asyncio.gather(*settles)
    finally:
        await a.close()
        await b.close()
    assert 50 == len(admitted)
    row = await fetch_budget_row(dsn, "b")
    assert (50_000, 0) == (row["used"], row["held"])
    await assert_invariants(dsn)


async def test_one_key_from_two_sidecars_makes_one_hold(dsn: str) -> None:
    """The same idempotency key sent through two stores at once makes exactly one hold: the
    loser of the key race retries and answers with the winner's reservation."""
    a = await Store.open(dsn)
    b = await Store.open(dsn)
    try:
        await a.put_budget("b", 1_000_000, "t")
        ops = [
            ReserveOp("b", "same-key", 7_000, timedelta(seconds=60), str(uuid.uuid4()))
            for _ in range(20)
        ]
        results = await asyncio.gather(
            *[(a if i % 2 else b).submit(op) for i, op in enumerate(ops)]
        )
    finally:
        await a.close()
        await b.close()
    ids = {r.reservation_id for r in results if isinstance(r, ReserveResult)}
    assert 1 == len(ids)
    row = await fetch_budget_row(dsn, "b")
    assert (7_000, 1) == (row["held"], row["open_reservations"])
    await assert_invariants(dsn)


async def test_exhausted_retries_are_unavailable_and_commit_nothing(dsn: str) -> None:
    """A transaction that loses every serialization conflict fails UNAVAILABLE after its
    attempts, and none of its writes are committed."""
    pool = await asyncpg.create_pool(dsn, min_size=2, max_size=2)
    retries: list[int] = []
    try:
        await pool.execute(
            "INSERT INTO budgets (budget_id, limit_units, unit) VALUES ('b', 10, 't')"
        )

        async def work(conn: Conn) -> None:
            await conn.fetchval("SELECT held FROM budgets WHERE budget_id = 'b'")
            # Another session changes the row after this transaction's snapshot was taken.
            other = await asyncpg.connect(dsn)
            try:
                await other.execute("UPDATE budgets SET used = used + 1 WHERE budget_id = 'b'")
            finally:
                await other.close()
            await conn.execute("UPDATE budgets SET held = held + 5 WHERE budget_id = 'b'")

        with pytest.raises(Unavailable):
            await run_serializable(pool, work, attempts_max=3, on_retry=lambda: retries.append(1))
        row = await pool.fetchrow("SELECT used, held FROM budgets WHERE budget_id = 'b'")
    finally:
        await pool.close()
    assert 3 == len(retries)
    assert row is not None
    assert (3, 0) == (row["used"], row["held"])


async def test_naive_admission_is_exact_too(dsn: str) -> None:
    """The naive baseline (a transaction per request) never admits beyond the limit; calls
    that lose every retry fail UNAVAILABLE having held nothing."""
    store = await Store.open(dsn, admission="naive")
    try:
        await store.put_budget("b", 10_000, "t")
        results = await asyncio.gather(
            *[store.submit(reserve_op(1_000)) for _ in range(20)], return_exceptions=True
        )
    finally:
        await store.close()
    admitted = [r for r in results if isinstance(r, ReserveResult) and r.admitted]
    assert all(isinstance(r, ReserveResult | Unavailable) for r in results)
    assert len(admitted) <= 10
    row = await fetch_budget_row(dsn, "b")
    assert len(admitted) * 1_000 == row["held"]
    await assert_invariants(dsn)


async def test_audit_catches_a_drifted_budget(store: Store, dsn: str) -> None:
    """The invariant audit is not vacuous: a budget row changed behind the ledger's back is
    reported, for held and for used."""
    await store.put_budget("b", 100, "t")
    await store.submit(reserve_op(10))
    conn = await asyncpg.connect(dsn)
    try:
        assert [] == await audit(conn)
        await conn.execute("UPDATE budgets SET held = held + 1, used = used + 2")
        problems = await audit(conn)
    finally:
        await conn.close()
    assert [
        "b: held 11 != open holds 10",
        "b: held 11 != ledger 10",
        "b: used 2 != ledger 0",
    ] == problems


async def test_audit_flags_a_limit_past_the_bound(store: Store, dsn: str) -> None:
    """A limit past limits.limit_units_max, written around PutBudget and the plan gate with
    SQL, is reported by the audit."""
    await store.put_budget("b", 100, "t")
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("UPDATE budgets SET limit_units = $1", limits.limit_units_max + 1)
        problems = await audit(conn)
    finally:
        await conn.close()
    assert [
        f"b: limit is {limits.limit_units_max + 1}; at most {limits.limit_units_max}"
    ] == problems
