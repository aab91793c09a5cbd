"""Scenario 8, growth: Reserve latency as the tables grow, and the sidecar's memory."""

from __future__ import annotations

import asyncio
import time
import uuid

import asyncpg
import psutil

from bench.harness import Figure, Loop
from bench.scenarios import (
    IN_FLIGHT,
    UNLIMITED_ENOUGH,
    Env,
    Stubs,
    figures,
    reserve_settle,
    stubs,
)
from earmark.spawn import SpawnedSidecar
from earmark.store.audit import audit
from earmark.v1 import budget_pb2 as pb

FILL_GROWTH = """
WITH holds AS (
    INSERT INTO reservations (reservation_id, budget_id, idempotency_key, amount, charged,
                              state, lease_ms, expires_at, created_at)
    SELECT gen_random_uuid(), $1, 'bulk-' || g, 1, 0, 1, 3600000,
           now() + interval '1 hour', now()
    FROM generate_series(1, $2) g
    RETURNING reservation_id, expires_at
), opened AS (
    INSERT INTO open_holds (reservation_id, expires_at)
    SELECT reservation_id, expires_at FROM holds
)
INSERT INTO ledger (budget_id, reservation_id, kind, held_delta, used_delta, at)
SELECT $1, reservation_id, 'hold', 1, 0, now() FROM holds
"""

FILL_LEDGER = """
INSERT INTO ledger (budget_id, reservation_id, kind, held_delta, used_delta, at)
SELECT $1, NULL, CASE WHEN g % 2 = 0 THEN 'hold' ELSE 'settle' END,
       CASE WHEN g % 2 = 0 THEN 1 ELSE -1 END, CASE WHEN g % 2 = 0 THEN 0 ELSE 1 END, now()
FROM generate_series(0, $2 - 1) g
"""


async def reserve_latency(s: Stubs, budget_id: str, count: int) -> tuple[float, float]:
    latencies = []
    for _ in range(count):
        request = pb.ReserveRequest(budget_id=budget_id, amount=1, idempotency_key=uuid.uuid4().hex)
        started = time.perf_counter()
        reply = await s.budget.Reserve(request, timeout=30)
        latencies.append(time.perf_counter() - started)
        await s.budget.Settle(pb.SettleRequest(reservation_id=reply.reservation_id, used=1))
    latencies.sort()
    return latencies[len(latencies) // 2] * 1000, latencies[int(0.99 * len(latencies))] * 1000


async def growth(env: Env, sidecar: SpawnedSidecar, dsn: str, reservations: int) -> list[Figure]:
    """8. Reserve latency on an almost empty database and with 1,000,000 ledger rows and
    100,000 open holds; the sidecar's memory after reservations/10 and after reservations."""
    out = figures(
        ("growth: Reserve p50, ledger nearly empty", "ms"),
        ("growth: Reserve p99, ledger nearly empty", "ms"),
        ("growth: Reserve p50, 1M ledger rows + 100k open holds", "ms"),
        ("growth: Reserve p99, 1M ledger rows + 100k open holds", "ms"),
        (f"growth: sidecar RSS after {reservations // 10:,} reservations", "MiB"),
        (f"growth: sidecar RSS after {reservations:,} reservations", "MiB"),
    )
    s = stubs(sidecar)
    budget_id = "growth"
    try:
        await s.admin.PutBudget(
            pb.PutBudgetRequest(budget_id=budget_id, limit=UNLIMITED_ENOUGH, unit="t")
        )
        await reserve_latency(s, budget_id, 5)
        small = [await reserve_latency(s, budget_id, 200) for _ in range(env.runs)]
        out[0].values += [p50 for p50, _ in small]
        out[1].values += [p99 for _, p99 in small]
        conn = await asyncpg.connect(dsn)
        try:
            async with conn.transaction():
                await conn.execute(FILL_GROWTH, budget_id, 100_000)
                await conn.execute(FILL_LEDGER, budget_id, 900_000)
                await conn.execute(
                    "UPDATE budgets SET held = held + 100000, used = used + 450000, "
                    "open_reservations = open_reservations + 100000 WHERE budget_id = $1",
                    budget_id,
                )
            await conn.execute("ANALYZE")
            rows = await conn.fetchval("SELECT count(*) FROM ledger")
            problems = await audit(conn)
        finally:
            await conn.close()
        env.problems += [f"growth: {p}" for p in problems]
        assert rows >= 1_000_000, rows
        big = [await reserve_latency(s, budget_id, 200) for _ in range(env.runs)]
        out[2].values += [p50 for p50, _ in big]
        out[3].values += [p99 for _, p99 in big]
        process = psutil.Process(sidecar.process.pid)
        step = reserve_settle(s, budget_id)
        done = 0
        for index, target in ((4, reservations // 10), (5, reservations)):
            await run_jobs(step, target - done)
            done = target
            out[index].values.append(process.memory_info().rss / 2**20)
    finally:
        await s.close()
    return out


async def run_jobs(step: object, jobs: int) -> None:
    """Runs jobs reserve-settle jobs, 50 in flight."""
    loop = Loop()

    async def worker(share: int) -> None:
        for _ in range(share):
            await step(loop)  # type: ignore[operator]

    shares = [jobs // IN_FLIGHT + (1 if i < jobs % IN_FLIGHT else 0) for i in range(IN_FLIGHT)]
    await asyncio.gather(*[worker(share) for share in shares])
