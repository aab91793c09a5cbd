"""The articles' numbers, run against a live sidecar: preflight's gpt-4o settle and its 40
concurrent default-estimate Reserves, and spend caps' Sonnet 5 and DeepSeek cutover."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from earmark.server import Sidecar
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running, running, sidecar_settings
from tests.deploy.test_deploy import PROMETHEUS, needs_promtool, promtool
from tests.helpers import FakeClock, assert_invariants, eventually, fetch_budget_row, scrape

# The spend-caps article's publish day, at noon UTC.
PUBLISHED = datetime(2026, 8, 15, 12, 0, tzinfo=UTC)
DEEPSEEK_CUTOVER = datetime(2026, 8, 16, 16, 0, tzinfo=UTC)
# DeepSeek's off-peak window, 16:30 to 00:30 UTC; the rest of the day is peak.
OFF_PEAK_FROM_MINUTE = 16 * 60 + 30
OFF_PEAK_TO_MINUTE = 30
THREE_DAYS = Duration(seconds=3 * 24 * 3600)
TASKS = 1_000


def stamp(at: datetime) -> Timestamp:
    result = Timestamp()
    result.FromDatetime(at)
    return result


def dollars(value: float) -> int:
    """Micro-dollars per million tokens, from dollars per million tokens."""
    return round(value * 1_000_000)


# Where the conftest's `clock` starts for this module's tests.
CLOCK_START = PUBLISHED


@pytest.fixture
async def priced(
    dsn: str, socket_dir: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Running]:
    """A live sidecar on the test clock, whose leases may last the days a cutover takes,
    with its repricer idle: these tests show what a stale price does to the holds a Settle
    meets, and the repricer (a loop every second; tests/service/test_money.py tests it) would move
    some of the thousand holds to the new price first, as fast as the machine lets it."""
    settings = sidecar_settings(dsn, socket_dir, lease_seconds_max=7 * 24 * 3600.0)
    async with running(Sidecar(settings, clock=clock), dsn) as s:

        async def idle(limit: int = 0) -> int:
            return 0

        assert s.sidecar.store is not None
        monkeypatch.setattr(s.sidecar.store, "reprice_due", idle)
        yield s


async def put_price(
    s: Running,
    provider: str,
    model: str,
    input_rate: float,
    output_rate: float,
    effective_from: datetime,
    **extra: Any,
) -> pb.Price:
    return await s.admin.PutPrice(
        pb.PutPriceRequest(
            price=pb.Price(
                provider=provider,
                model=model,
                effective_from=stamp(effective_from),
                input_usd_micros_per_mtok=dollars(input_rate),
                output_usd_micros_per_mtok=dollars(output_rate),
                source=f"https://example.com/{provider}/pricing",
                captured_at=stamp(PUBLISHED),
                **extra,
            )
        )
    )


async def reserve_tasks(
    s: Running, budget_id: str, provider: str, model: str, count: int
) -> list[pb.ReserveResponse]:
    """count Reserves at once, each shaped as the article's 8,000 in / 2,000 out task."""
    shape = pb.UsageShape(
        provider=provider, model=model, input_tokens=8_000, max_output_tokens=2_000
    )
    return list(
        await asyncio.gather(
            *(
                s.budget.Reserve(
                    pb.ReserveRequest(
                        budget_id=budget_id,
                        shape=shape,
                        idempotency_key=f"task-{i}",
                        lease=THREE_DAYS,
                    )
                )
                for i in range(count)
            )
        )
    )


async def settle_tasks(
    s: Running, holds: Sequence[pb.ReserveResponse], provider: str = "", model: str = ""
) -> list[pb.SettleResponse]:
    """Settles each hold with the task's real usage, 8,000 in and 2,000 out."""
    usage = pb.TokenUsage(input_tokens=8_000, output_tokens=2_000, provider=provider, model=model)
    return list(
        await asyncio.gather(
            *(
                s.budget.Settle(
                    pb.SettleRequest(
                        reservation_id=hold.reservation_id,
                        usage=usage,
                        outcome=pb.OUTCOME_SUCCEEDED,
                    )
                )
                for hold in holds
            )
        )
    )


async def test_preflight_gpt4o_settle_charges_list_price(priced: Running) -> None:
    """A $0.10 hold settling 10,000 input and 2,000 output gpt-4o tokens at $2.50/$10.00
    charges $0.045 and returns $0.055."""
    s = priced
    price = await put_price(s, "openai", "gpt-4o", 2.50, 10.00, PUBLISHED - timedelta(days=30))
    await s.admin.PutBudget(
        pb.PutBudgetRequest(budget_id="job-142", limit=5_000_000, unit="usd_micros")
    )
    hold = await s.budget.Reserve(
        pb.ReserveRequest(budget_id="job-142", amount=100_000, idempotency_key="call-1")
    )
    settled = await s.budget.Settle(
        pb.SettleRequest(
            reservation_id=hold.reservation_id,
            usage=pb.TokenUsage(
                input_tokens=10_000, output_tokens=2_000, provider="openai", model="gpt-4o"
            ),
            outcome=pb.OUTCOME_SUCCEEDED,
        )
    )
    assert (pb.ESTIMATE_SOURCE_CALLER, 1) == (hold.estimate_source, price.version)
    assert (45_000, 55_000, 0, 1) == (
        settled.charged,
        settled.released,
        settled.overshoot,
        settled.price_version,
    )
    await assert_invariants(s.dsn)


async def test_preflight_forty_default_estimates_admit_exactly_ten(priced: Running) -> None:
    """40 Reserves at once with no amount on a $1.00 budget whose default is $0.10: exactly
    10 are admitted from the DEFAULT, held is the limit and the sum of the open holds, and
    the dollars-held gauge shows $1.00."""
    s = priced
    await s.admin.PutBudget(
        pb.PutBudgetRequest(
            budget_id="job-142", limit=1_000_000, unit="usd_micros", default_estimate=100_000
        )
    )
    replies = await asyncio.gather(
        *(
            s.budget.Reserve(
                pb.ReserveRequest(budget_id="job-142", job="researcher", idempotency_key=f"p{i}")
            )
            for i in range(40)
        )
    )
    admitted = [r for r in replies if r.admitted]
    refused = [r for r in replies if not r.admitted]
    row = await fetch_budget_row(s.dsn, "job-142")
    assert (10, 30) == (len(admitted), len(refused))
    assert {pb.ESTIMATE_SOURCE_DEFAULT} == {r.estimate_source for r in replies}
    assert {pb.REFUSAL_REASON_INSUFFICIENT_BUDGET} == {r.reason for r in refused}
    assert (1_000_000, 1_000_000) == (row["held"], sum(r.amount for r in admitted))
    await assert_invariants(s.dsn)

    async def dollar_held() -> bool:
        return scrape(s.sidecar.metrics_port)[("earmark_held_dollars", ())] == 1.0

    await eventually(dollar_held, within_seconds=10, what="earmark_held_dollars = 1.0")


async def test_preflight_callers_three_cents_admit_thirty_three(priced: Running) -> None:
    """The second job: 40 Reserves at once at the caller's own $0.03 admit 33, $0.99."""
    s = priced
    await s.admin.PutBudget(
        pb.PutBudgetRequest(budget_id="job-143", limit=1_000_000, unit="usd_micros")
    )
    replies = await asyncio.gather(
        *(
            s.budget.Reserve(
                pb.ReserveRequest(budget_id="job-143", amount=30_000, idempotency_key=f"p{i}")
            )
            for i in range(40)
        )
    )
    row = await fetch_budget_row(s.dsn, "job-143")
    assert 33 == sum(r.admitted for r in replies)
    assert 990_000 == row["held"]
    await assert_invariants(s.dsn)


async def test_preflight_estimates_learn_median_then_max(priced: Running) -> None:
    """After settles the estimate is the job's median call; once used + held reach 80% of
    the limit it is the job's largest call, and the answer names the source each time."""
    s = priced
    await put_price(s, "openai", "gpt-4o", 2.50, 10.00, PUBLISHED - timedelta(days=30))
    await s.admin.PutBudget(
        pb.PutBudgetRequest(
            budget_id="job-144", limit=1_000_000, unit="usd_micros", default_estimate=100_000
        )
    )

    async def reserve(key: str) -> pb.ReserveResponse:
        return await s.budget.Reserve(
            pb.ReserveRequest(budget_id="job-144", job="researcher", idempotency_key=key)
        )

    first = [await reserve(f"first-{i}") for i in range(10)]
    # Nine calls of 10,000 in / 2,000 out ($0.045) and one twice that ($0.09).
    for i, hold in enumerate(first):
        size = 2 if i == 9 else 1
        await s.budget.Settle(
            pb.SettleRequest(
                reservation_id=hold.reservation_id,
                usage=pb.TokenUsage(
                    input_tokens=10_000 * size,
                    output_tokens=2_000 * size,
                    provider="openai",
                    model="gpt-4o",
                ),
                outcome=pb.OUTCOME_SUCCEEDED,
            )
        )
    later = [await reserve(f"later-{i}") for i in range(10)]
    # used 495,000; each median hold adds 45,000 until used + held pass 800,000.
    expected = [(pb.ESTIMATE_SOURCE_JOB_MEDIAN, 45_000)] * 7 + [
        (pb.ESTIMATE_SOURCE_JOB_MAX, 90_000)
    ] * 3
    assert [pb.ESTIMATE_SOURCE_DEFAULT] * 10 == [r.estimate_source for r in first]
    assert expected == [(r.estimate_source, r.amount) for r in later]
    assert [True] * 9 + [False] == [r.admitted for r in later]
    await assert_invariants(s.dsn)


async def test_spend_caps_p75_only_after_five_samples(priced: Running) -> None:
    """Under the P75 policy the default holds until the job has 5 samples, then the p75."""
    s = priced
    await s.admin.PutBudget(
        pb.PutBudgetRequest(
            budget_id="mole",
            limit=10**9,
            unit="usd_micros",
            default_estimate=100_000,
            estimate_policy=pb.ESTIMATE_POLICY_P75,
        )
    )
    sources = []
    for i, used in enumerate([10_000, 20_000, 30_000, 40_000, 50_000, 60_000]):
        hold = await s.budget.Reserve(
            pb.ReserveRequest(budget_id="mole", job="research", idempotency_key=f"k{i}")
        )
        sources.append((hold.estimate_source, hold.amount))
        await s.budget.Settle(
            pb.SettleRequest(
                reservation_id=hold.reservation_id, used=used, outcome=pb.OUTCOME_SUCCEEDED
            )
        )
    default = (pb.ESTIMATE_SOURCE_DEFAULT, 100_000)
    # Five samples 10k..50k: the nearest-rank p75 is the 4th, 40,000.
    assert [default] * 5 + [(pb.ESTIMATE_SOURCE_JOB_P75, 40_000)] == sources
    await assert_invariants(s.dsn)


async def test_spend_caps_sonnet_stale_price_over_reserves(priced: Running) -> None:
    """Claude Sonnet 5 at the stale $3/$15: 1,000 tasks of 8,000 in / 2,000 out reserve
    $54.00; settled at the live $2/$10 they use $36.00."""
    s = priced
    stale = await put_price(s, "anthropic", "claude-sonnet-5", 3, 15, PUBLISHED - timedelta(7))
    await s.admin.PutBudget(
        pb.PutBudgetRequest(budget_id="sonnet", limit=100_000_000, unit="usd_micros")
    )
    holds = await reserve_tasks(s, "sonnet", "anthropic", "claude-sonnet-5", TASKS)
    held = (await fetch_budget_row(s.dsn, "sonnet"))["held"]
    live = await put_price(s, "anthropic", "claude-sonnet-5", 2, 10, PUBLISHED)
    settles = await settle_tasks(s, holds)
    row = await fetch_budget_row(s.dsn, "sonnet")
    assert (1, 2) == (stale.version, live.version)
    assert {(True, 54_000, 1)} == {(h.admitted, h.amount, h.price_version) for h in holds}
    assert (54_000_000, 36_000_000, 0) == (held, row["used"], row["held"])
    assert {(36_000, 18_000, 0, 2)} == {
        (r.charged, r.released, r.overshoot, r.price_version) for r in settles
    }
    await assert_invariants(s.dsn)


@needs_promtool
async def test_spend_caps_deepseek_cutover_overshoots(
    priced: Running, clock: FakeClock, tmp_path: Path
) -> None:
    """DeepSeek-V4-Flash at the stale $0.14/$0.28 holds $1.68 for 1,000 tasks; after the
    2026-08-16 16:00 UTC cutover the same usage costs $3.08 off-peak and $6.16 at peak:
    used/held 1.83x and 3.67x, every overshoot recorded, the budgets flagged exceeded."""
    s = priced
    await put_price(s, "deepseek", "deepseek-v4-flash", 0.14, 0.28, PUBLISHED - timedelta(7))
    off_peak = {"daily_from_minute": OFF_PEAK_FROM_MINUTE, "daily_to_minute": OFF_PEAK_TO_MINUTE}
    peak = {"daily_from_minute": OFF_PEAK_TO_MINUTE, "daily_to_minute": OFF_PEAK_FROM_MINUTE}
    await put_price(s, "deepseek", "deepseek-v4-flash", 0.21, 0.70, DEEPSEEK_CUTOVER, **off_peak)
    await put_price(s, "deepseek", "deepseek-v4-flash", 0.42, 1.40, DEEPSEEK_CUTOVER, **peak)
    runs = {}
    for name in ("off-peak", "peak"):
        await s.admin.PutBudget(
            pb.PutBudgetRequest(budget_id=name, limit=2_000_000, unit="usd_micros")
        )
        runs[name] = await reserve_tasks(s, name, "deepseek", "deepseek-v4-flash", TASKS)
    clock.set(datetime(2026, 8, 16, 18, 0, tzinfo=UTC))
    off_peak_settles = await settle_tasks(s, runs["off-peak"])
    clock.set(datetime(2026, 8, 17, 10, 0, tzinfo=UTC))
    peak_settles = await settle_tasks(s, runs["peak"])

    held = {name: sum(h.amount for h in holds) for name, holds in runs.items()}
    used = {name: (await fetch_budget_row(s.dsn, name))["used"] for name in runs}
    states = {name: await s.admin.GetBudget(pb.GetBudgetRequest(budget_id=name)) for name in runs}
    assert {"off-peak": 1_680_000, "peak": 1_680_000} == held
    assert {"off-peak": 3_080_000, "peak": 6_160_000} == used
    assert (1.83, 3.67) == (
        round(used["off-peak"] / held["off-peak"], 2),
        round(used["peak"] / held["peak"], 2),
    )
    assert {(3_080, 1_400, 2)} == {
        (r.charged, r.overshoot, r.price_version) for r in off_peak_settles
    }
    assert {(6_160, 4_480, 3)} == {(r.charged, r.overshoot, r.price_version) for r in peak_settles}
    assert {True} == {state.exceeded for state in states.values()}
    await assert_invariants(s.dsn)
    await assert_metrics_see_the_miss(s, tmp_path)


async def assert_metrics_see_the_miss(s: Running, tmp_path: Path) -> None:
    """The scrape shows both misses by estimate source and the dollars spent, and the
    overshoot alert fires on the counter as scraped (promtool test rules)."""
    port = s.sidecar.metrics_port

    async def dollars_refreshed() -> bool:
        return scrape(port)[("earmark_spent_dollars", ())] == 9.24

    await eventually(dollars_refreshed, within_seconds=10, what="earmark_spent_dollars")
    m = scrape(port)
    buckets = [
        m[("earmark_estimate_used_ratio_bucket", (("le", le), ("source", "shape")))]
        for le in ("1.5", "2.0", "5.0")
    ]
    overshoots = int(m[("earmark_overshoot_events_total", ())])
    assert [0, TASKS, 2 * TASKS] == buckets
    assert 2 * TASKS == overshoots
    rules_test = tmp_path / "deepseek.test.yml"
    rules_test.write_text(
        OVERSHOOT_RULES_TEST.format(
            rules=PROMETHEUS / "earmark-rules.yml", count=overshoots, why=TOO_LOW
        )
    )
    assert "SUCCESS" in promtool("test", "rules", str(rules_test))


OVERSHOOT_RULES_TEST = """
rule_files: ["{rules}"]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'earmark_overshoot_events_total{{instance="a", job="earmark"}}'
        values: "0 0 {count}x15"
    alert_rule_test:
      - eval_time: 1m
        alertname: EarmarkOvershoot
        exp_alerts: []
      - eval_time: 5m
        alertname: EarmarkOvershoot
        exp_alerts:
          - exp_labels: {{severity: warning, instance: a}}
            exp_annotations:
              summary: "Jobs ran past their holds on a"
              description: "{count} settles in 10 minutes used more than they held: {why}"
              runbook_url: "https://github.com/earmark/earmark/blob/main/docs/runbooks.md#earmarkovershoot"
"""
TOO_LOW = "estimates are too low."
