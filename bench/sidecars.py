"""Scenario 10, K sidecars: a sidecar per pod, all on one PostgreSQL.

The database is warmed with WARM_RESERVATIONS settled reservations first (indexes of a
real size: PostgreSQL's predicate locks on a few small index pages would make any two
transactions look related). Then WORKERS closed-loop workers, spread round-robin over K
sidecar processes, each loop Reserve(1) then Settle(1) on their own sidecar: on one hot
budget, and on a budget per sidecar. Every K runs in every run, in turn, so that the
ratios to one sidecar compare figures measured minutes apart at most.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import urllib.parse
import uuid
from collections.abc import Callable

import asyncpg
import psutil

from bench.harness import (
    Figure,
    closed_loop,
    cpu_spent,
    postgres_cpu,
    processes_cpu,
    scrape,
)
from bench.scenarios import (
    UNLIMITED_ENOUGH,
    Env,
    Stubs,
    check_invariants,
    check_step,
    reserve_settle,
    spread,
    stubs,
)
from earmark.spawn import SpawnedSidecar
from earmark.v1 import budget_pb2 as pb
from tests.pgbouncer import pgbouncer

WORKERS = 48
KS = (1, 2, 4, 8)
WARM_RESERVATIONS = 300_000
WARM_BUDGETS = 100
# Sidecars behind one PgBouncer in transaction pooling (when Debian's pgbouncer is there).
POOLED = 4
SHAPES = {"hot": "one hot budget", "disjoint": "a budget each"}

# Settled reservations with their ledger rows, consistent with the budgets' counters, so
# that the audit at the end covers them too.
WARM = """
WITH budgets_made AS (
    INSERT INTO budgets (budget_id, limit_units, unit, used)
    SELECT 'warm-' || b, NULL, 't', $count / $budgets FROM generate_series(0, $budgets - 1) b
    RETURNING budget_id
), holds AS (
    INSERT INTO reservations (reservation_id, budget_id, idempotency_key, amount, charged,
        state, lease_ms, expires_at, created_at, closed_at, settled_used, settled_outcome,
        settled_charged, settled_released, settled_overshoot)
    SELECT gen_random_uuid(), 'warm-' || (g % $budgets), 'warm-' || g, 1, 1, 2, 60000,
           now(), now(), now(), 1, 1, 1, 0, 0
    FROM generate_series(0, $count - 1) g
    WHERE (SELECT count(*) FROM budgets_made) = $budgets
    RETURNING reservation_id, budget_id
)
INSERT INTO ledger (budget_id, reservation_id, kind, held_delta, used_delta, at)
SELECT budget_id, reservation_id, 'settle', 0, 1, now() FROM holds
"""


async def warm(dsn: str, count: int = WARM_RESERVATIONS, budgets: int = WARM_BUDGETS) -> None:
    """Adds count settled reservations over budgets budgets, unless already there."""
    assert count % budgets == 0
    conn = await asyncpg.connect(dsn)
    try:
        if await conn.fetchval("SELECT count(*) FROM reservations") >= count:
            return
        await conn.execute("INSERT INTO units (unit) VALUES ('t') ON CONFLICT DO NOTHING")
        sql = WARM.replace("$count", str(count)).replace("$budgets", str(budgets))
        await conn.execute(sql)
        await conn.execute("VACUUM ANALYZE")
    finally:
        await conn.close()


def k_figures(pooled: bool) -> dict[tuple[str, str], list[Figure]]:
    """Each shape and way of connecting: K directly, and POOLED through PgBouncer."""
    out: dict[tuple[str, str], list[Figure]] = {}
    for shape in ("hot", "disjoint"):
        ways = [str(k) for k in KS] + (["pooled"] if pooled else [])
        for way in ways:
            if way == "pooled":
                label = f"{POOLED} sidecars through PgBouncer, {SHAPES[shape]}"
            else:
                label = f"{way} sidecar{'s' if way != '1' else ''}, {SHAPES[shape]}"
            out[(shape, way)] = [
                Figure(f"{label}: calls/s", "calls/s"),
                Figure(f"{label}: retries per admission", "retries"),
                Figure(f"{label}: UNAVAILABLE", "calls"),
                Figure(f"{label}: Reserve p99", "ms"),
                Figure(f"{label}: transactions/s", "txs/s"),
                Figure(f"{label}: PostgreSQL CPU per transaction", "ms"),
                Figure(f"{label}: CPU per admission, sidecars and PostgreSQL", "ms"),
            ]
    return out


async def floor_run(all_stubs: list[Stubs], k: int, seconds: float) -> float:
    """calls/s of health Check spread over K sidecars: what K processes on this machine
    can serve at all, whatever they do behind it."""
    step = spread([check_step(s) for s in all_stubs[:k]])
    await closed_loop(WORKERS, 0.5, step)
    return (await closed_loop(WORKERS, seconds, step)).rate("check")


def grew(after: list[dict[str, float]], before: list[dict[str, float]], name: str) -> float:
    return sum(a.get(name, 0) - b.get(name, 0) for a, b in zip(after, before, strict=True))


async def one_run(
    all_stubs: list[Stubs],
    sidecars: list[SpawnedSidecar],
    postmaster: psutil.Process,
    shape: str,
    k: int,
    seconds: float,
) -> list[float]:
    """One K and shape: a warm-up, then seconds of closed loops; its figures' values."""
    used = all_stubs[:k]
    if shape == "hot":
        budget_id = f"hot-{uuid.uuid4().hex[:8]}"
        await used[0].admin.PutBudget(
            pb.PutBudgetRequest(budget_id=budget_id, limit=UNLIMITED_ENOUGH, unit="t")
        )
        steps = [reserve_settle(s, budget_id) for s in used]
    else:
        steps = []
        for s in used:
            budget_id = f"own-{uuid.uuid4().hex[:8]}"
            await s.admin.PutBudget(
                pb.PutBudgetRequest(budget_id=budget_id, limit=UNLIMITED_ENOUGH, unit="t")
            )
            steps.append(reserve_settle(s, budget_id))
    step = spread(steps)
    await closed_loop(WORKERS, 0.5, step)
    before = [scrape(c.metrics_port) for c in sidecars[:k]]
    pids = [sidecar.process.pid for sidecar in sidecars[:k]]
    cpu_before, sidecars_before = postgres_cpu(postmaster.pid), processes_cpu(pids)
    loop = await closed_loop(WORKERS, seconds, step)
    cpu = cpu_spent(cpu_before, postgres_cpu(postmaster.pid))
    sidecars_cpu = cpu_spent(sidecars_before, processes_cpu(pids))
    after = [scrape(c.metrics_port) for c in sidecars[:k]]
    retries = grew(after, before, "earmark_tx_serialization_retries_total")
    # Each batch is one transaction (and each retry one more).
    transactions = grew(after, before, "earmark_group_admission_batch_size_count") + retries
    return [
        loop.rate("reserve", "settle"),
        retries / max(1, loop.counts.get("admitted", 0)),
        loop.counts.get("unavailable", 0),
        loop.ms("reserve", 0.99),
        transactions / loop.seconds,
        1000 * cpu / max(1, transactions),
        # Issue 24's figure: what a call costs the machine, which decides what a thousand
        # pods cost, and which two cores can measure where calls/s at K = 8 cannot.
        1000 * (cpu + sidecars_cpu) / max(1, loop.counts.get("admitted", 0)),
    ]


async def k_sidecars(
    env: Env, spawn: Callable[..., SpawnedSidecar], dsn: str, postmaster_pid: int
) -> list[Figure]:
    """10. K = 1, 2, 4, 8 sidecars on one warmed PostgreSQL, hot and disjoint; and POOLED
    sidecars through one PgBouncer. spawn(name, *flags) starts a sidecar on dsn."""
    postmaster = psutil.Process(postmaster_pid)
    sidecars = [spawn(f"k{i}") for i in range(max(KS))]  # the first one migrates
    await warm(dsn)
    all_stubs = [stubs(s) for s in sidecars]
    pooled = shutil.which("pgbouncer") is not None
    out = k_figures(pooled)
    floors = {
        k: Figure(f"{k} sidecar{'s' if k > 1 else ''}, health Check: calls/s", "calls/s")
        for k in (1, max(KS))
    }
    try:
        with contextlib.ExitStack() as stack:
            behind: list[SpawnedSidecar] = []
            if pooled:
                database = urllib.parse.urlsplit(dsn).path.lstrip("/")
                bouncer = stack.enter_context(pgbouncer(dsn, database, pool_size=POOLED * 2))
                behind = [
                    spawn(f"p{i}", "--database-url", bouncer.url(database),
                          "--database-pooler", "pgbouncer")
                    for i in range(POOLED)
                ]  # fmt: skip
                stack.callback(lambda: [s.stop() for s in behind])
            behind_stubs = [stubs(s) for s in behind]
            for _ in range(env.runs):
                for k, figure in floors.items():
                    figure.values.append(await floor_run(all_stubs, k, env.seconds))
                for shape in ("hot", "disjoint"):
                    for k in KS:
                        values = await one_run(
                            all_stubs, sidecars, postmaster, shape, k, env.seconds
                        )
                        for figure, value in zip(out[(shape, str(k))], values, strict=True):
                            figure.values.append(value)
                    if pooled:
                        values = await one_run(
                            behind_stubs, behind, postmaster, shape, POOLED, env.seconds
                        )
                        for figure, value in zip(out[(shape, "pooled")], values, strict=True):
                            figure.values.append(value)
            for each in behind_stubs:
                await each.close()
        await check_invariants(dataclasses.replace(env, dsn=dsn), "k sidecars")
    finally:
        for each in all_stubs:
            await each.close()
        for sidecar in sidecars:
            sidecar.stop()
    ceiling = Figure(f"{max(KS)} sidecars / 1, health Check, run by run", "ratio")
    one, eight = floors[1].values, floors[max(KS)].values
    ceiling.values = [e / max(1e-9, o) for e, o in zip(eight, one, strict=True)]
    ratios = [ceiling]
    for shape in ("hot", "disjoint"):
        one = out[(shape, "1")][0].values
        eight = out[(shape, str(max(KS)))][0].values
        ratio = Figure(f"{max(KS)} sidecars / 1, {SHAPES[shape]}, run by run", "ratio")
        ratio.values = [e / max(1e-9, o) for e, o in zip(eight, one, strict=True)]
        ratios.append(ratio)
        one_cpu = out[(shape, "1")][-1].values
        eight_cpu = out[(shape, str(max(KS)))][-1].values
        cpu_ratio = Figure(
            f"CPU per admission, {max(KS)} sidecars / 1, {SHAPES[shape]}, run by run", "ratio"
        )
        cpu_ratio.values = [e / max(1e-9, o) for e, o in zip(eight_cpu, one_cpu, strict=True)]
        ratios.append(cpu_ratio)
    return [*floors.values(), *(f for figs in out.values() for f in figs), *ratios]
