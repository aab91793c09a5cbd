"""The benchmark's scenarios. Each returns its figures; timings are reported, never asserted."""

from __future__ import annotations

import functools
import itertools
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

import asyncpg
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.harness import CpuPerCall, Figure, Loop, Step, closed_loop, scrape
from earmark.core.ops import ReserveOp, ReserveResult
from earmark.spawn import SpawnedSidecar
from earmark.store import Store, StoreObserver
from earmark.store.audit import audit
from earmark.v1 import budget_pb2 as pb
from earmark.v1 import budget_pb2_grpc

IN_FLIGHT = 50
# Plain and priced hot budgets are compared by the median of their run-by-run ratios; on a
# shared machine one run's ratio moves by 10% or more, so the pair gets at least 6 runs,
# as many in each order.
PAIRED_RUNS_MIN = 6
UNLIMITED_ENOUGH = 10**15


@dataclass
class Env:
    """What the scenarios run against: sidecars as separate processes, one PostgreSQL."""

    dsn: str
    grouped: SpawnedSidecar
    naive: SpawnedSidecar
    runs: int
    seconds: float
    # PostgreSQL's postmaster, whose backends' CPU the scenarios count (None: not counted).
    postmaster_pid: int | None = None
    problems: list[str] = field(default_factory=list)


@dataclass
class Stubs:
    channel: grpc.aio.Channel
    admin_channel: grpc.aio.Channel
    budget: budget_pb2_grpc.BudgetStub
    admin: budget_pb2_grpc.AdminStub
    health: health_pb2_grpc.HealthStub

    async def close(self) -> None:
        await self.channel.close(None)
        await self.admin_channel.close(None)


def stubs(sidecar: SpawnedSidecar) -> Stubs:
    """Budget and health on the workers' port, Admin on the sidecar's admin socket."""
    channel = grpc.aio.insecure_channel(sidecar.target)
    admin_channel = grpc.aio.insecure_channel(sidecar.admin)
    return Stubs(
        channel,
        admin_channel,
        budget_pb2_grpc.BudgetStub(channel),
        budget_pb2_grpc.AdminStub(admin_channel),
        health_pb2_grpc.HealthStub(channel),
    )


def figures(*names_units: tuple[str, str]) -> list[Figure]:
    return [Figure(name, unit) for name, unit in names_units]


async def check_invariants(env: Env, label: str) -> None:
    conn = await asyncpg.connect(env.dsn)
    try:
        env.problems += [f"{label}: {p}" for p in await audit(conn)]
    finally:
        await conn.close()


# A priced job: a small gpt-4o call, held by its shape and settled by its usage.
PRICED_SHAPE = pb.UsageShape(
    provider="openai", model="gpt-4o", input_tokens=100, max_output_tokens=20
)
PRICED_USAGE = pb.TokenUsage(input_tokens=100, output_tokens=10)


async def put_bench_price(s: Stubs) -> None:
    """gpt-4o at $2.50 / $10.00 per million tokens, in effect since long ago."""
    price = pb.Price(
        provider="openai",
        model="gpt-4o",
        input_usd_micros_per_mtok=2_500_000,
        output_usd_micros_per_mtok=10_000_000,
    )
    price.effective_from.FromSeconds(0)
    await s.admin.PutPrice(pb.PutPriceRequest(price=price))


def reserve_settle(
    s: Stubs,
    pick_budget: str | Callable[[], str] = "",
    *,
    priced: bool = False,
    account: str = "",
    also: tuple[str, ...] = (),
) -> Step:
    """One job: Reserve 1 unit, then Settle it at 1 (priced: Reserve by shape, Settle by
    usage); UNAVAILABLE is counted, not raised. With account, the Reserve names the account
    (its billing cycle's budget) instead of a budget; with also, it holds on those too."""

    async def step(loop: Loop) -> None:
        request = pb.ReserveRequest(idempotency_key=uuid.uuid4().hex, also_budget_ids=also)
        if account:
            request.account = account
        else:
            request.budget_id = pick_budget() if callable(pick_budget) else pick_budget
        if priced:
            request.shape.CopyFrom(PRICED_SHAPE)
        else:
            request.amount = 1
        started = time.perf_counter()
        try:
            reply = await s.budget.Reserve(request, timeout=30)
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.UNAVAILABLE:
                raise
            loop.record("unavailable", started)
            return
        loop.record("reserve", started)
        if not reply.admitted:
            loop.record("refused", started)
            return
        loop.record("admitted", started)
        started = time.perf_counter()
        try:
            settle = pb.SettleRequest(reservation_id=reply.reservation_id)
            if priced:
                settle.usage.CopyFrom(PRICED_USAGE)
            else:
                settle.used = 1
            await s.budget.Settle(settle, timeout=30)
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.UNAVAILABLE:
                raise
            # The hold stays open until its lease passes and the sweeper returns it.
            loop.record("unavailable", started)
            return
        loop.record("settle", started)

    return step


def check_step(s: Stubs) -> Step:
    """One health Check: an RPC that does nothing, the floor of any call."""
    request = health_pb2.HealthCheckRequest(service="")

    async def step(loop: Loop) -> None:
        started = time.perf_counter()
        await s.health.Check(request, timeout=30)
        loop.record("check", started)

    return step


async def floor(env: Env) -> list[Figure]:
    """1. An RPC that does nothing: grpc.health Check at 50 in flight."""
    out = figures(
        ("floor: health Check calls/s", "calls/s"),
        ("floor: p50", "ms"),
        ("floor: p99", "ms"),
        ("floor: CPU per call, load driver", "us"),
        ("floor: CPU per call, sidecar", "us"),
    )
    s = stubs(env.grouped)
    step = check_step(s)
    try:
        await closed_loop(IN_FLIGHT, 1.0, step)  # warm-up
        for _ in range(env.runs):
            cpu = CpuPerCall()
            loop = await cpu.measure(
                [env.grouped.process.pid], None, closed_loop(IN_FLIGHT, env.seconds, step)
            )
            driver, sidecar, _ = cpu.per_call_us(loop.counts.get("check", 0))
            values = [loop.rate("check"), loop.ms("check", 0.5), loop.ms("check", 0.99)]
            for figure, value in zip(out, [*values, driver, sidecar], strict=True):
                figure.values.append(value)
    finally:
        await s.close()
    return out


@dataclass(frozen=True)
class Variant:
    """One closed loop of hot_loop: its figures' label, how many budgets it draws from, and
    whether it works in money (shapes and usage on usd_micros budgets)."""

    label: str
    budgets: int
    priced: bool = False
    # Each Reserve also holds on one parent budget shared by all (a task in an account).
    nested: bool = False


def hot_figures(label: str) -> list[Figure]:
    return figures(
        (f"{label}: calls/s (Reserve + Settle)", "calls/s"),
        (f"{label}: admissions/s", "adm/s"),
        (f"{label}: Reserve p50", "ms"),
        (f"{label}: Reserve p99", "ms"),
        (f"{label}: Settle p50", "ms"),
        (f"{label}: Settle p99", "ms"),
        (f"{label}: UNAVAILABLE", "calls"),
        (f"{label}: serialization retries per admission", "retries"),
        (f"{label}: retries exhausted", "txs"),
        (f"{label}: CPU per call, load driver", "us"),
        (f"{label}: CPU per call, sidecar", "us"),
        (f"{label}: CPU per call, PostgreSQL", "us"),
    )


@dataclass
class Measured:
    """What one variant measured within a run: its loops, and its transactions' retries."""

    loop: Loop = field(default_factory=Loop)
    retries: float = 0.0
    exhausted: float = 0.0
    cpu: CpuPerCall = field(default_factory=CpuPerCall)

    def values(self) -> list[float]:
        """The figures' values, in hot_figures' order."""
        loop = self.loop
        return [
            loop.rate("reserve", "settle"),
            loop.rate("admitted"),
            loop.ms("reserve", 0.5),
            loop.ms("reserve", 0.99),
            loop.ms("settle", 0.5),
            loop.ms("settle", 0.99),
            loop.counts.get("unavailable", 0),
            self.retries / max(1, loop.counts.get("admitted", 0)),
            self.exhausted,
            *self.cpu.per_call_us(loop.counts.get("reserve", 0) + loop.counts.get("settle", 0)),
        ]


async def fresh_step(s: Stubs, variant: Variant) -> Step:
    """The variant's job on budgets of its own, made for this run."""
    unit = "usd_micros" if variant.priced else "t"
    prefix = f"{variant.label.split()[0]}-{uuid.uuid4().hex[:6]}"
    ids = [f"{prefix}-{i}" for i in range(variant.budgets)]
    for budget_id in ids:
        await s.admin.PutBudget(
            pb.PutBudgetRequest(budget_id=budget_id, limit=UNLIMITED_ENOUGH, unit=unit)
        )
    also: tuple[str, ...] = ()
    if variant.nested:
        also = (f"{prefix}-parent",)
        await s.admin.PutBudget(
            pb.PutBudgetRequest(budget_id=also[0], limit=UNLIMITED_ENOUGH, unit=unit)
        )
    pick = ids[0] if variant.budgets == 1 else functools.partial(random.choice, ids)
    return reserve_settle(s, pick, priced=variant.priced, also=also)


async def measure(
    sidecar: SpawnedSidecar,
    step: Step,
    seconds: float,
    into: Measured,
    postmaster_pid: int | None = None,
) -> None:
    before = scrape(sidecar.metrics_port)
    into.loop.add(
        await into.cpu.measure(
            [sidecar.process.pid], postmaster_pid, closed_loop(IN_FLIGHT, seconds, step)
        )
    )
    after = scrape(sidecar.metrics_port)

    def grew(name: str) -> float:
        return after.get(name, 0) - before.get(name, 0)

    into.retries += grew("earmark_tx_serialization_retries_total")
    into.exhausted += grew("earmark_tx_retries_exhausted_total")


async def hot_loop(
    env: Env, sidecar: SpawnedSidecar, *variants: Variant, runs: int | None = None
) -> list[Figure]:
    """Reserve then Settle at 50 in flight, on one budget or on budgets drawn at random.
    With several variants each run measures them in halves, in ABBA order (A B B A, then
    B A A B): the database grows as the benchmark goes on (dead rows, autovacuum), and a
    variant that always ran first would always run on the fresher database."""
    out = {v.label: hot_figures(v.label) for v in variants}
    s = stubs(sidecar)
    try:
        if any(v.priced for v in variants):
            await put_bench_price(s)
        for run in range(runs or env.runs):
            order = list(variants if run % 2 == 0 else variants[::-1])
            steps = {v.label: await fresh_step(s, v) for v in variants}
            for v in order:
                await closed_loop(IN_FLIGHT, 0.5, steps[v.label])  # warm-up
            measured = {v.label: Measured() for v in variants}
            halves = order + order[::-1] if len(variants) > 1 else order
            for v in halves:
                seconds = env.seconds * len(variants) / len(halves)
                await measure(
                    sidecar, steps[v.label], seconds, measured[v.label], env.postmaster_pid
                )
            for v in variants:
                for figure, value in zip(out[v.label], measured[v.label].values(), strict=True):
                    figure.values.append(value)
        for variant in variants:
            await check_invariants(env, variant.label)
    finally:
        await s.close()
    return [figure for v in variants for figure in out[v.label]]


async def paired(env: Env, base: Variant, other: Variant, ratio: str) -> list[Figure]:
    """Two variants taking turns in halves (ABBA) in every run, and other / base calls/s run
    by run: within a run that ratio is the least noisy comparison there is."""
    out = await hot_loop(env, env.grouped, base, other, runs=max(env.runs, PAIRED_RUNS_MIN))
    by_name = {figure.name: figure for figure in out}
    under = by_name[f"{base.label}: calls/s (Reserve + Settle)"].values
    over = by_name[f"{other.label}: calls/s (Reserve + Settle)"].values
    (pair,) = figures((ratio, "ratio"))
    pair.values = [o / max(1e-9, u) for o, u in zip(over, under, strict=True)]
    return [*out, pair]


async def hot_budget(env: Env) -> list[Figure]:
    """2. One hot budget, group admission, in plain amounts and in money (2b: Reserves by
    shape, Settles by usage, priced each time), taking turns."""
    return await paired(
        env,
        Variant("hot budget", 1),
        Variant("priced hot budget", 1, priced=True),
        "priced / plain hot budget calls/s, run by run",
    )


async def account_hot_budget(env: Env, sidecar: SpawnedSidecar) -> list[Figure]:
    """9. One hot account through the limits provider (a fake Kinde on loopback): every
    admission also counts on the account's rate-limit row and every settle writes the
    meter outbox, in the same transaction as the hold."""
    label = "account hot budget"
    out = hot_figures(label)
    s = stubs(sidecar)
    try:
        for run in range(env.runs):
            step = reserve_settle(s, account=f"bench-{run}")
            await closed_loop(IN_FLIGHT, 0.5, step)  # warm-up
            measured = Measured()
            await measure(sidecar, step, env.seconds, measured, env.postmaster_pid)
            for figure, value in zip(out, measured.values(), strict=True):
                figure.values.append(value)
        await check_invariants(env, label)
    finally:
        await s.close()
    return out


async def nested_hot_parent(env: Env) -> list[Figure]:
    """11. Nested holds: each Reserve on one of 100 task budgets also holds on one parent
    (an account), against the plain hot budget, taking turns in each run."""
    return await paired(
        env,
        Variant("plain hot budget", 1),
        Variant("nested on a hot parent", 100, nested=True),
        "nested / plain hot budget calls/s, run by run",
    )


async def many_budgets(env: Env) -> list[Figure]:
    """3. 1,000 budgets drawn at random."""
    return await hot_loop(env, env.grouped, Variant("1,000 budgets", 1_000))


async def naive_baseline(env: Env) -> list[Figure]:
    """4. The hot budget with one serializable transaction per request, no coalescing."""
    return await hot_loop(env, env.naive, Variant("naive hot budget", 1))


async def store_alone(env: Env) -> list[Figure]:
    """5. Group admission in the store, no gRPC: 500 submitters on one hot budget."""
    out = figures(
        ("store alone: admissions/s (500 submitters)", "adm/s"),
        ("store alone: median batch size", "ops"),
    )
    sizes: list[int] = []
    store = await Store.open(env.dsn, observer=StoreObserver(on_batch=sizes.append))
    try:
        for _ in range(env.runs):
            budget_id = f"store-{uuid.uuid4().hex[:6]}"
            await store.put_budget(budget_id, UNLIMITED_ENOUGH, "t")

            async def step(loop: Loop, budget_id: str = budget_id) -> None:
                op = ReserveOp(
                    budget_id, uuid.uuid4().hex, 1, timedelta(seconds=120), str(uuid.uuid4())
                )
                started = time.perf_counter()
                result = await store.submit(op)
                assert isinstance(result, ReserveResult)
                assert result.admitted
                loop.record("admitted", started)

            sizes.clear()
            loop = await closed_loop(500, env.seconds, step)
            out[0].values.append(loop.rate("admitted"))
            out[1].values.append(sorted(sizes)[len(sizes) // 2] if sizes else 0)
    finally:
        await store.close()
    await check_invariants(env, "store alone")
    return out


async def two_sidecars(env: Env, second: SpawnedSidecar) -> list[Figure]:
    """6. Two sidecar processes on one PostgreSQL racing on one budget: throughput, and the
    admitted total against the limit."""
    limit = 3_000
    out = figures(
        ("two sidecars: calls/s", "calls/s"),
        ("two sidecars: admitted (limit 3,000)", "jobs"),
        ("two sidecars: admitted above the limit", "units"),
        ("two sidecars: UNAVAILABLE", "calls"),
    )
    a, b = stubs(env.grouped), stubs(second)
    try:
        for _ in range(env.runs):
            budget_id = f"two-{uuid.uuid4().hex[:6]}"
            await a.admin.PutBudget(pb.PutBudgetRequest(budget_id=budget_id, limit=limit, unit="t"))
            step = spread([reserve_settle(a, budget_id), reserve_settle(b, budget_id)])
            loop = await closed_loop(IN_FLIGHT, env.seconds, step)
            state = await a.admin.GetBudget(pb.GetBudgetRequest(budget_id=budget_id))
            admitted = loop.counts.get("admitted", 0)
            # A Settle that answered UNAVAILABLE leaves its hold open for the sweeper.
            if state.used + state.held != admitted:
                env.problems.append(
                    f"two sidecars: used {state.used} + held {state.held} != admitted {admitted}"
                )
            values = [
                loop.rate("reserve", "settle"),
                admitted,
                max(0, state.used - limit),
                loop.counts.get("unavailable", 0),
            ]
            for figure, value in zip(out, values, strict=True):
                figure.values.append(value)
        await check_invariants(env, "two sidecars")
    finally:
        await a.close()
        await b.close()
    return out


def spread(steps: list[Step]) -> Step:
    """A step that sends each job to the next of several steps in turn (each a sidecar's: a
    job's Reserve and Settle go to the same one), so that each gets its share of the work."""
    turn = itertools.count()

    async def step(loop: Loop) -> None:
        await steps[next(turn) % len(steps)](loop)

    return step


async def single_in_flight(env: Env) -> list[Figure]:
    """7. One worker, Reserve then Settle, one call at a time."""
    out = figures(
        ("single in flight: Reserve p50", "ms"),
        ("single in flight: Reserve p99", "ms"),
        ("single in flight: Settle p50", "ms"),
        ("single in flight: Settle p99", "ms"),
    )
    s = stubs(env.grouped)
    try:
        budget_id = f"single-{uuid.uuid4().hex[:6]}"
        await s.admin.PutBudget(
            pb.PutBudgetRequest(budget_id=budget_id, limit=UNLIMITED_ENOUGH, unit="t")
        )
        step = reserve_settle(s, budget_id)
        await closed_loop(1, 0.5, step)
        for _ in range(env.runs):
            loop = await closed_loop(1, env.seconds, step)
            values = [
                loop.ms("reserve", 0.5),
                loop.ms("reserve", 0.99),
                loop.ms("settle", 0.5),
                loop.ms("settle", 0.99),
            ]
            for figure, value in zip(out, values, strict=True):
                figure.values.append(value)
    finally:
        await s.close()
    return out
