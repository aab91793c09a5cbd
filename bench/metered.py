"""Scenario 14, metered call overhead, by the method gateway benchmarks publish: one worker
makes sequential calls to a fake provider on 127.0.0.1 that answers after a fixed delay,
alternating a direct call (a plain AsyncOpenAI) and a metered one (the same client through
metered(), held and settled by the grouped sidecar), in one run, so that the machine's
drift falls on both alike. Reports p50 and p99 of metered less direct, and the sidecar's
and PostgreSQL's CPU per metered call (a direct call costs them nothing)."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta

import openai
from google.protobuf.timestamp_pb2 import Timestamp

from bench.harness import Figure, cpu_spent, percentile, postgres_cpu, processes_cpu
from bench.scenarios import Env, check_invariants, figures, stubs
from earmark.client import AsyncClient
from earmark.client.llm import metered
from earmark.v1 import budget_pb2 as pb
from tests.fake_openai import fake_openai

LABEL = "metered call overhead"
# The fake provider's own answer time: what a call costs before Earmark adds anything.
PROVIDER_DELAY_SECONDS = 0.01
PAIRS = 200
WARMUP_PAIRS = 20
REQUEST = {
    "model": "gpt-4o",
    "max_tokens": 20,
    # "late": the fake answers after its late_seconds, the fixed delay.
    "messages": [{"role": "user", "content": "late"}],
}


async def put_price(env: Env) -> str:
    s = stubs(env.grouped)
    try:
        since = Timestamp()
        since.FromDatetime(datetime.now(UTC) - timedelta(days=1))
        price = pb.Price(
            provider="openai", model="gpt-4o", effective_from=since,
            input_usd_micros_per_mtok=2_500_000, output_usd_micros_per_mtok=10_000_000,
            max_output_tokens=16_384,
        )  # fmt: skip
        await s.admin.PutPrice(pb.PutPriceRequest(price=price))
        budget_id = f"metered-{uuid.uuid4().hex[:6]}"
        await s.admin.PutBudget(
            pb.PutBudgetRequest(budget_id=budget_id, limit=10**15, unit="usd_micros")
        )
        return budget_id
    finally:
        await s.close()


async def metered_overhead(env: Env) -> list[Figure]:
    out = figures(
        (f"{LABEL}: direct p50", "ms"),
        (f"{LABEL}: metered - direct p50", "ms"),
        (f"{LABEL}: metered - direct p99", "ms"),
        (f"{LABEL}: sidecar CPU per call", "us"),
        (f"{LABEL}: PostgreSQL CPU per call", "us"),
    )
    budget_id = await put_price(env)
    with fake_openai() as fake:
        fake.state.late_seconds = PROVIDER_DELAY_SECONDS
        fake.state.completion_tokens = 20
        async with (
            AsyncClient(env.grouped.target) as earmark,
            openai.AsyncOpenAI(api_key="bench", base_url=fake.url, max_retries=0) as direct,
        ):
            held = metered(direct, earmark, budget_id)
            for run in range(env.runs + 1):
                pairs = WARMUP_PAIRS if run == 0 else PAIRS
                plain: list[float] = []
                through: list[float] = []
                # A direct call costs the sidecar and PostgreSQL nothing: what they spend
                # over the run is the metered calls'.
                sidecar_before = processes_cpu([env.grouped.process.pid])
                postgres_before = postgres_cpu(env.postmaster_pid) if env.postmaster_pid else {}
                for _ in range(pairs):
                    started = time.perf_counter()
                    await direct.chat.completions.create(**REQUEST)  # type: ignore[call-overload]
                    plain.append(1000 * (time.perf_counter() - started))
                    started = time.perf_counter()
                    await held.chat.completions.create(**REQUEST)  # type: ignore[call-overload]
                    through.append(1000 * (time.perf_counter() - started))
                sidecar = cpu_spent(sidecar_before, processes_cpu([env.grouped.process.pid]))
                postgres = 0.0
                if env.postmaster_pid:
                    postgres = cpu_spent(postgres_before, postgres_cpu(env.postmaster_pid))
                if run == 0:
                    continue
                values = [
                    percentile(plain, 0.5),
                    percentile(through, 0.5) - percentile(plain, 0.5),
                    percentile(through, 0.99) - percentile(plain, 0.99),
                    1e6 * sidecar / pairs,
                    1e6 * postgres / pairs,
                ]
                for figure, value in zip(out, values, strict=True):
                    figure.values.append(value)
    await check_invariants(env, LABEL)
    return out
