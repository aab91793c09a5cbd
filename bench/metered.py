"""Scenario 14, metered call overhead, per provider, by the method gateway benchmarks
publish: one worker makes sequential calls to each provider's fake on 127.0.0.1, each
answering after the same fixed 10 ms (bench/metered_providers.py: OpenAI, Anthropic,
Gemini, Bedrock, Azure OpenAI, DeepSeek and OpenRouter), three calls in turn in one loop,
so that the machine's drift falls on all alike (their order rotates each round):
- direct: the provider SDK's own client;
- metered: the same client through metered(), held and settled by the grouped sidecar;
- a bare Reserve: the same shape, its prompt charged, by the same worker through the same
  Earmark client (AsyncClient; the sync Client for boto3), one at a time.
Untimed between them: the metered call's Settle, which goes off the caller's path, is
waited for (flush), and the bare Reserve is settled; so every timed call starts with the
sidecar idle. boto3 is synchronous: Bedrock's loop runs on a thread of its own, its three
calls alike.

Reported per provider: the direct call's p50; p50 and p99 of metered less direct; the bare
Reserve's p50; the wrapper's overhead, (metered - direct p50) - bare Reserve p50, what
metered() adds beyond the one round trip it makes on the caller's path (target: at most
0.5 ms, issue 45); and the sidecar's and PostgreSQL's CPU per metered call (its Reserve
and its Settle), counted from just before the call until its Settle is flushed. A run
measures every provider in turn. OpenAI's figures keep the names they had before the
scenario ran per provider (no provider in them)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from google.protobuf.timestamp_pb2 import Timestamp

from bench.harness import Figure, cpu_spent, percentile, postgres_cpu, processes_cpu
from bench.metered_providers import OPENAI, PROVIDERS, Calls, Provider, SyncCalls
from bench.scenarios import Env, check_invariants, figures, stubs
from earmark.client import AsyncClient
from earmark.v1 import budget_pb2 as pb

LABEL = "metered call overhead"
PAIRS = 200
WARMUP_PAIRS = 20
# What each figure is, and its unit: the wrapper's overhead in microseconds, as its target
# is a fraction of a millisecond.
DIRECT = "direct p50"
METERED_P50 = "metered - direct p50"
METERED_P99 = "metered - direct p99"
BARE = "bare Reserve p50"
WRAPPER = "wrapper overhead p50"
SIDECAR_CPU = "sidecar CPU per call"
POSTGRES_CPU = "PostgreSQL CPU per call"
FIGURES = (
    (DIRECT, "ms"),
    (METERED_P50, "ms"),
    (METERED_P99, "ms"),
    (BARE, "ms"),
    (WRAPPER, "us"),
    (SIDECAR_CPU, "us"),
    (POSTGRES_CPU, "us"),
)
# Issue 45: the wrapper costs at most this over a bare Reserve, for every provider.
WRAPPER_TARGET_US = 500
# The three timed calls' order in each round, in turn: each follows each as often.
ORDERS = (
    ("direct", "metered", "bare"),
    ("metered", "bare", "direct"),
    ("bare", "direct", "metered"),
)


def name(provider: Provider, figure: str) -> str:
    """A figure's name: OpenAI's as before the scenario ran per provider."""
    if provider is OPENAI:
        return f"{LABEL}: {figure}"
    return f"{LABEL}, {provider.name}: {figure}"


@dataclass
class Samples:
    """One provider's run: each timed call's latencies (ms) and the CPU seconds the sidecar
    and PostgreSQL spent on its metered calls."""

    direct: list[float] = field(default_factory=list)
    metered: list[float] = field(default_factory=list)
    bare: list[float] = field(default_factory=list)
    sidecar: float = 0.0
    postgres: float = 0.0

    def values(self) -> list[float]:
        """The run's figures, in FIGURES' order."""
        direct = percentile(self.direct, 0.5)
        over = percentile(self.metered, 0.5) - direct
        bare = percentile(self.bare, 0.5)
        calls = max(1, len(self.metered))
        return [
            direct,
            over,
            percentile(self.metered, 0.99) - percentile(self.direct, 0.99),
            bare,
            1000 * (over - bare),
            1e6 * self.sidecar / calls,
            1e6 * self.postgres / calls,
        ]


@dataclass(frozen=True)
class Cpu:
    """Reads the CPU the sidecar and PostgreSQL have used so far (plain functions: the
    Bedrock loop reads them on its thread)."""

    sidecar_pid: int
    postmaster_pid: int | None

    def read(self) -> tuple[dict[int, float], dict[int, float]]:
        postgres = postgres_cpu(self.postmaster_pid) if self.postmaster_pid else {}
        return processes_cpu([self.sidecar_pid]), postgres

    def add(self, samples: Samples, before: tuple[dict[int, float], dict[int, float]]) -> None:
        after = self.read()
        samples.sidecar += cpu_spent(before[0], after[0])
        samples.postgres += cpu_spent(before[1], after[1])


def _ms(started: float) -> float:
    return 1000 * (time.perf_counter() - started)


async def timed(calls: Calls, pairs: int, cpu: Cpu) -> Samples:
    """pairs rounds of the three calls, on this loop."""
    out = Samples()
    for at in range(pairs):
        for kind in ORDERS[at % len(ORDERS)]:
            if kind == "direct":
                started = time.perf_counter()
                await calls.direct()
                out.direct.append(_ms(started))
            elif kind == "metered":
                before = cpu.read()
                started = time.perf_counter()
                await calls.metered()
                out.metered.append(_ms(started))
                await calls.flush()
                cpu.add(out, before)
            else:
                started = time.perf_counter()
                reservation = await calls.reserve()
                out.bare.append(_ms(started))
                await calls.settle(reservation)
    return out


def timed_sync(calls: SyncCalls, pairs: int, cpu: Cpu) -> Samples:
    """timed() for a synchronous SDK, on the calling thread."""
    out = Samples()
    for at in range(pairs):
        for kind in ORDERS[at % len(ORDERS)]:
            if kind == "direct":
                started = time.perf_counter()
                calls.direct()
                out.direct.append(_ms(started))
            elif kind == "metered":
                before = cpu.read()
                started = time.perf_counter()
                calls.metered()
                out.metered.append(_ms(started))
                calls.flush()
                cpu.add(out, before)
            else:
                started = time.perf_counter()
                reservation = calls.reserve()
                out.bare.append(_ms(started))
                calls.settle(reservation)
    return out


async def put_prices(env: Env, providers: tuple[Provider, ...]) -> dict[str, str]:
    """A price for each provider's model, in effect since yesterday, and a budget each in
    usd_micros, as good as unlimited: each provider's budget id by its name."""
    s = stubs(env.grouped)
    try:
        since = Timestamp()
        since.FromDatetime(datetime.now(UTC) - timedelta(days=1))
        budgets = {}
        for provider in providers:
            price = pb.Price(
                provider=provider.priced_as, model=provider.model, effective_from=since,
                input_usd_micros_per_mtok=2_500_000, output_usd_micros_per_mtok=10_000_000,
                cached_input_usd_micros_per_mtok=1_250_000, max_output_tokens=16_384,
            )  # fmt: skip
            await s.admin.PutPrice(pb.PutPriceRequest(price=price))
            budget_id = f"metered-{provider.name}-{uuid.uuid4().hex[:6]}"
            await s.admin.PutBudget(
                pb.PutBudgetRequest(budget_id=budget_id, limit=10**15, unit="usd_micros")
            )
            budgets[provider.name] = budget_id
        return budgets
    finally:
        await s.close()


async def metered_overhead(
    env: Env,
    *,
    pairs: int = PAIRS,
    warmup_pairs: int = WARMUP_PAIRS,
    providers: tuple[Provider, ...] = PROVIDERS,
) -> list[Figure]:
    out = {p.name: figures(*[(name(p, what), unit) for what, unit in FIGURES]) for p in providers}
    budgets = await put_prices(env, providers)
    cpu = Cpu(env.grouped.process.pid, env.postmaster_pid)
    async with AsyncExitStack() as stack:
        earmark = await stack.enter_async_context(AsyncClient(env.grouped.target))
        opened: list[tuple[Provider, Calls | SyncCalls]] = []
        for p in providers:
            opened.append((p, await p.open(p, stack, env.grouped.target, earmark, budgets[p.name])))
        # Run 0 warms every provider's connections and the sidecar's caches; it is not kept.
        for run in range(env.runs + 1):
            rounds = warmup_pairs if run == 0 else pairs
            for provider, calls in opened:
                if isinstance(calls, SyncCalls):
                    samples = await asyncio.to_thread(timed_sync, calls, rounds, cpu)
                else:
                    samples = await timed(calls, rounds, cpu)
                if run == 0:
                    continue
                for figure, value in zip(out[provider.name], samples.values(), strict=True):
                    figure.values.append(value)
    await check_invariants(env, LABEL)
    return [figure for p in providers for figure in out[p.name]]


def wrapper_targets(
    median: Callable[[str], float],
) -> list[Callable[[], tuple[str, bool]]]:
    """Issue 45's target for each provider: the wrapper's overhead at most 0.5 ms p50."""

    def target(provider: Provider) -> Callable[[], tuple[str, bool]]:
        def check() -> tuple[str, bool]:
            text = (
                f"metered() wrapper overhead p50 <= 0.5 ms, {provider.name} "
                "((metered - direct) - bare Reserve)"
            )
            return text, median(name(provider, WRAPPER)) <= WRAPPER_TARGET_US

        return check

    return [target(p) for p in PROVIDERS]
