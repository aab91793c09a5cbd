"""Races through the gRPC API, every call in flight at once, each ending on the invariants."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.helpers import assert_invariants, fetch_budget_row


async def put(s: Running, limit: int, budget_id: str = "acme/tokens") -> None:
    await s.admin.PutBudget(pb.PutBudgetRequest(budget_id=budget_id, limit=limit, unit="tokens"))


async def reserve_all(
    s: Running, jobs: int, amount: int, budget_id: str = "acme/tokens"
) -> list[pb.ReserveResponse]:
    requests = [
        pb.ReserveRequest(budget_id=budget_id, amount=amount, idempotency_key=uuid.uuid4().hex)
        for _ in range(jobs)
    ]
    return list(await asyncio.gather(*[s.budget.Reserve(r) for r in requests]))


async def test_five_jobs_of_40k_on_100k(sidecar: Running) -> None:
    """The article's race: 5 jobs of 40,000 on 100,000 admit 2 and refuse 3 with 20,000 left."""
    await put(sidecar, 100_000)
    replies = await reserve_all(sidecar, 5, 40_000)
    admitted = [r for r in replies if r.admitted]
    refused = [r for r in replies if not r.admitted]
    assert 2 == len(admitted)
    assert [20_000] * 3 == [r.remaining for r in refused]
    assert {pb.REFUSAL_REASON_INSUFFICIENT_BUDGET} == {r.reason for r in refused}
    assert 80_000 == (await fetch_budget_row(sidecar.dsn, "acme/tokens"))["held"]
    await assert_invariants(sidecar.dsn)


@pytest.mark.parametrize(("amount", "expected"), [(100_000, 10), (30_000, 33)])
async def test_forty_reserves_on_a_million(sidecar: Running, amount: int, expected: int) -> None:
    """40 Reserves at once on 1,000,000 admit exactly as many as fit, never one more."""
    await put(sidecar, 1_000_000)
    replies = await reserve_all(sidecar, 40, amount)
    assert expected == sum(r.admitted for r in replies)
    row = await fetch_budget_row(sidecar.dsn, "acme/tokens")
    assert expected * amount == row["held"]
    await assert_invariants(sidecar.dsn)


async def test_four_hundred_reserves_admit_exactly_the_limit(sidecar: Running) -> None:
    """400 Reserves of 1,000 at once on 100,000 admit exactly 100: none UNAVAILABLE (any
    error fails the gather), and every hold acknowledged exists once and is held."""
    await put(sidecar, 100_000)
    replies = await reserve_all(sidecar, 400, 1_000)
    admitted = sorted(r.reservation_id for r in replies if r.admitted)
    conn = await asyncpg.connect(sidecar.dsn)
    try:
        rows = await conn.fetch("SELECT reservation_id::text AS id, state FROM reservations")
    finally:
        await conn.close()
    assert 100 == len(admitted)
    assert admitted == sorted(r["id"] for r in rows)
    assert {1} == {r["state"] for r in rows}
    assert 100_000 == (await fetch_budget_row(sidecar.dsn, "acme/tokens"))["held"]
    await assert_invariants(sidecar.dsn)


async def test_load_120_jobs_at_50_in_flight(sidecar: Running) -> None:
    """120 jobs of 1,000 at 50 in flight with room for 100 admit 100, and settling all at
    1,000 leaves used = 100,000 and held = 0."""
    await put(sidecar, 100_000)
    gate = asyncio.Semaphore(50)

    async def job() -> bool:
        async with gate:
            reply = await sidecar.budget.Reserve(
                pb.ReserveRequest(
                    budget_id="acme/tokens", amount=1_000, idempotency_key=uuid.uuid4().hex
                )
            )
        if not reply.admitted:
            return False
        async with gate:
            await sidecar.budget.Settle(
                pb.SettleRequest(
                    reservation_id=reply.reservation_id, used=1_000, outcome=pb.OUTCOME_SUCCEEDED
                )
            )
        return True

    outcomes = await asyncio.gather(*[job() for _ in range(120)])
    assert (100, 20) == (sum(outcomes), len(outcomes) - sum(outcomes))
    row = await fetch_budget_row(sidecar.dsn, "acme/tokens")
    assert (100_000, 0, 0) == (row["used"], row["held"], row["open_reservations"])
    await assert_invariants(sidecar.dsn)


async def test_one_key_twenty_times_at_once(sidecar: Running) -> None:
    """One idempotency key sent 20 times at once makes one hold."""
    await put(sidecar, 1_000_000)
    request = pb.ReserveRequest(budget_id="acme/tokens", amount=5_000, idempotency_key="once")
    replies = await asyncio.gather(*[sidecar.budget.Reserve(request) for _ in range(20)])
    assert 1 == len({r.reservation_id for r in replies})
    assert all(r.admitted for r in replies)
    row = await fetch_budget_row(sidecar.dsn, "acme/tokens")
    assert (5_000, 1) == (row["held"], row["open_reservations"])
    await assert_invariants(sidecar.dsn)


async def test_fifty_concurrent_reserves_none_unavailable(sidecar: Running) -> None:
    """50 concurrent Reserves on one budget all complete: no UNAVAILABLE, all admitted."""
    await put(sidecar, 10_000_000)
    replies = await reserve_all(sidecar, 50, 1_000)
    assert 50 == sum(r.admitted for r in replies)
    await assert_invariants(sidecar.dsn)


async def test_mixed_operations_race(sidecar: Running) -> None:
    """Reserves, charges and settles on one budget racing each other keep every invariant:
    at least the 40 holds the limit fits at once are admitted, and the budget's used is
    exactly what the admitted holds settled."""
    await put(sidecar, 200_000)

    async def worker(i: int) -> int | None:
        reply = await sidecar.budget.Reserve(
            pb.ReserveRequest(budget_id="acme/tokens", amount=5_000, idempotency_key=f"w{i}")
        )
        if not reply.admitted:
            return None
        rid = reply.reservation_id
        for step in range(3):
            await sidecar.budget.Charge(
                pb.ChargeRequest(reservation_id=rid, amount=2_000, idempotency_key=f"s{step}")
            )
        used = 4_000 + i % 3_000
        await sidecar.budget.Settle(pb.SettleRequest(reservation_id=rid, used=used))
        return used

    settled = [u for u in await asyncio.gather(*[worker(i) for i in range(60)]) if u is not None]
    assert len(settled) >= 40
    row = await fetch_budget_row(sidecar.dsn, "acme/tokens")
    assert (sum(settled), 0, 0) == (row["used"], row["held"], row["open_reservations"])
    await assert_invariants(sidecar.dsn)


async def test_priced_holds_race_a_price_change(sidecar: Running) -> None:
    """Shaped Reserves, usage Charges and usage Settles race a price increase: holds are
    repriced or told not to dispatch, every admitted hold exists once and is settled, and
    used is exactly what the settles answered."""
    s = sidecar
    past = Timestamp()
    past.FromDatetime(datetime.now(UTC) - timedelta(days=1))

    def gpt4o(input_rate: int, output_rate: int, at: Timestamp) -> pb.PutPriceRequest:
        return pb.PutPriceRequest(
            price=pb.Price(
                provider="openai",
                model="gpt-4o",
                effective_from=at,
                input_usd_micros_per_mtok=input_rate,
                output_usd_micros_per_mtok=output_rate,
            )
        )

    await s.admin.PutPrice(gpt4o(2_500_000, 10_000_000, past))
    await s.admin.PutBudget(
        pb.PutBudgetRequest(budget_id="usd", limit=1_000_000, unit="usd_micros")
    )
    shape = pb.UsageShape(
        provider="openai", model="gpt-4o", input_tokens=10_000, max_output_tokens=2_000
    )
    step = pb.TokenUsage(input_tokens=1_000)
    total = pb.TokenUsage(input_tokens=10_000, output_tokens=1_000)
    told: dict[str, int] = {}
    halfway = asyncio.Event()

    async def worker(i: int) -> None:
        reply = await s.budget.Reserve(
            pb.ReserveRequest(budget_id="usd", shape=shape, idempotency_key=f"w{i}")
        )
        if i == 30:
            halfway.set()
        if not reply.admitted:
            return
        rid = reply.reservation_id
        charged = await s.budget.Charge(
            pb.ChargeRequest(reservation_id=rid, usage=step, idempotency_key="dispatch")
        )
        # Capped at 0: the new price did not fit, so the call is not made.
        usage = total if charged.charged else pb.TokenUsage()
        settled = await s.budget.Settle(
            pb.SettleRequest(reservation_id=rid, usage=usage, outcome=pb.OUTCOME_SUCCEEDED)
        )
        told[rid] = settled.charged

    async def raise_price() -> None:
        await halfway.wait()
        now = Timestamp()
        now.FromDatetime(datetime.now(UTC))
        await s.admin.PutPrice(gpt4o(5_000_000, 20_000_000, now))

    await asyncio.gather(raise_price(), *[worker(i) for i in range(60)])
    conn = await asyncpg.connect(s.dsn)
    try:
        rows = await conn.fetch("SELECT reservation_id::text AS id, state FROM reservations")
    finally:
        await conn.close()
    row = await fetch_budget_row(s.dsn, "usd")
    assert sorted(told) == sorted(r["id"] for r in rows)
    assert {2} == {r["state"] for r in rows}
    assert (sum(told.values()), 0) == (row["used"], row["held"])
    await assert_invariants(s.dsn)


async def test_nested_reserves_in_opposite_orders(sidecar: Running) -> None:
    """200 nested Reserves of 20, alternately on x (also y) and on y (also x), so that
    neighbouring sidecars lock the pair named in opposite orders: no deadlock and no error
    (any fails the gather), exactly y's 600 admitted, each refusal naming y, every hold
    acknowledged present once on both budgets, and the settles move both alike."""
    await put(sidecar, 1_000, "x")
    await put(sidecar, 600, "y")
    requests = [
        pb.ReserveRequest(
            budget_id="x" if i % 2 else "y",
            also_budget_ids=["y" if i % 2 else "x"],
            amount=20,
            idempotency_key=uuid.uuid4().hex,
        )
        for i in range(200)
    ]
    replies = await asyncio.gather(*[sidecar.budget.Reserve(r) for r in requests])
    admitted = sorted(r.reservation_id for r in replies if r.admitted)
    assert 30 == len(admitted)
    assert {"y"} == {r.refused_budget_id for r in replies if not r.admitted}
    conn = await asyncpg.connect(sidecar.dsn)
    try:
        rows = await conn.fetch("SELECT reservation_id::text AS id FROM reservations")
    finally:
        await conn.close()
    assert admitted == sorted(r["id"] for r in rows)
    await asyncio.gather(
        *[
            sidecar.budget.Settle(pb.SettleRequest(reservation_id=rid, used=5 + i % 2))
            for i, rid in enumerate(admitted)
        ]
    )
    x, y = [await fetch_budget_row(sidecar.dsn, b) for b in ("x", "y")]
    assert (0, 165, 0, 165) == (x["held"], x["used"], y["held"], y["used"])
    await assert_invariants(sidecar.dsn)
