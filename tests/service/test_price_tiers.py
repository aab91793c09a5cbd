"""Prompt-length tiers and windows in a zone through a live sidecar: a Reserve by shape,
a Settle by usage and the repricer each use the row of the call's tier (issue 44)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from earmark.server import Sidecar
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running, running, sidecar_settings
from tests.helpers import FakeClock, assert_invariants, eventually, fetch_budget_row

NOW = datetime(2026, 8, 15, 12, 0, tzinfo=UTC)
# Where the conftest's `clock` starts for this module's tests.
CLOCK_START = NOW
SOURCE = "https://ai.google.dev/gemini-api/docs/pricing"


def stamp(at: datetime) -> Timestamp:
    result = Timestamp()
    result.FromDatetime(at)
    return result


def gemini(at: datetime, above: int, input_rate: int, output_rate: int) -> pb.Price:
    return pb.Price(
        provider="google",
        model="gemini-2.5-pro",
        effective_from=stamp(at),
        input_usd_micros_per_mtok=input_rate,
        output_usd_micros_per_mtok=output_rate,
        input_tokens_above=above,
        max_output_tokens=65_536,
        source=SOURCE,
    )


def shape(input_tokens: int, output_tokens: int = 1_000) -> pb.UsageShape:
    return pb.UsageShape(
        provider="google",
        model="gemini-2.5-pro",
        input_tokens=input_tokens,
        max_output_tokens=output_tokens,
    )


@pytest.fixture
async def side(dsn: str, socket_dir: Path, clock: FakeClock) -> AsyncIterator[Running]:
    async with running(Sidecar(sidecar_settings(dsn, socket_dir), clock=clock), dsn) as s:
        since = NOW - timedelta(days=1)
        for price in (gemini(since, 0, 1_250_000, 10_000_000),
                      gemini(since, 200_000, 2_500_000, 15_000_000)):  # fmt: skip
            await s.admin.PutPrice(pb.PutPriceRequest(price=price))
        await s.admin.PutBudget(
            pb.PutBudgetRequest(budget_id="usd", limit=10_000_000, unit="usd_micros")
        )
        yield s


async def test_a_shape_is_held_at_its_prompt_lengths_tier(side: Running) -> None:
    """gemini-2.5-pro: 100,000 in / 1,000 out holds 135,000 µ$ at the base rates, 250,000
    in / 1,000 out holds 640,000 at the long prompts' rates, for all of its tokens."""
    held = [
        await side.budget.Reserve(
            pb.ReserveRequest(budget_id="usd", shape=shape(tokens), idempotency_key=str(tokens))
        )
        for tokens in (100_000, 200_000, 200_001, 250_000)
    ]
    assert [(135_000, 1), (260_000, 1), (515_003, 2), (640_000, 2)] == [
        (h.amount, h.price_version) for h in held
    ]
    await assert_invariants(side.dsn)


async def test_usage_in_another_tier_than_held_is_charged_the_truth(side: Running) -> None:
    """A hold priced at the base tier whose usage came to 250,000 input tokens is charged
    the long prompts' price, 640,000 µ$, past its hold, as any miss is."""
    held = await side.budget.Reserve(
        pb.ReserveRequest(budget_id="usd", shape=shape(100_000), idempotency_key="a")
    )
    settled = await side.budget.Settle(
        pb.SettleRequest(
            reservation_id=held.reservation_id,
            usage=pb.TokenUsage(input_tokens=250_000, output_tokens=1_000),
        )
    )
    row = await fetch_budget_row(side.dsn, "usd")
    assert (135_000, 640_000, 505_000, 2) == (
        held.amount,
        settled.charged,
        settled.overshoot,
        settled.price_version,
    )
    assert (640_000, 0) == (row["used"], row["held"])
    await assert_invariants(side.dsn)


async def test_the_repricer_moves_each_hold_to_its_own_tiers_new_price(
    side: Running, clock: FakeClock
) -> None:
    """A new long-prompt price moves the long prompt's hold at its cutover and leaves the
    short prompt's hold, whose tier did not change, where it was."""
    short = await side.budget.Reserve(
        pb.ReserveRequest(budget_id="usd", shape=shape(100_000), idempotency_key="short")
    )
    long = await side.budget.Reserve(
        pb.ReserveRequest(budget_id="usd", shape=shape(250_000), idempotency_key="long")
    )
    cutover = NOW + timedelta(seconds=10)
    await side.admin.PutPrice(pb.PutPriceRequest(price=gemini(cutover, 0, 1_250_000, 10_000_000)))
    await side.admin.PutPrice(
        pb.PutPriceRequest(price=gemini(cutover, 200_000, 5_000_000, 30_000_000))
    )
    clock.advance(timedelta(seconds=30))

    async def repriced() -> bool:
        return 135_000 + 1_280_000 == (await fetch_budget_row(side.dsn, "usd"))["held"]

    await eventually(repriced, within_seconds=10, what="the long prompt's hold repriced")
    holds = (await side.admin.ListHolds(pb.ListHoldsRequest(budget_id="usd"))).holds
    amounts = {h.reservation_id: h.amount for h in holds}
    assert {short.reservation_id: 135_000, long.reservation_id: 1_280_000} == amounts
    await assert_invariants(side.dsn)


async def test_a_window_in_a_zone_prices_by_the_local_hour(side: Running, clock: FakeClock) -> None:
    """deepseek-chat's night rate from 00:30 to 08:30 Asia/Shanghai (16:30 to 00:30 UTC):
    a shape reserved at 17:00 UTC is held at the night rate, one at 12:00 UTC at the day
    rate."""
    since = NOW - timedelta(days=1)
    for window, rate in (((30, 510), 135_000), ((510, 30), 270_000)):
        await side.admin.PutPrice(
            pb.PutPriceRequest(
                price=pb.Price(
                    provider="deepseek", model="deepseek-chat", effective_from=stamp(since),
                    input_usd_micros_per_mtok=rate, output_usd_micros_per_mtok=4 * rate,
                    daily_from_minute=window[0], daily_to_minute=window[1],
                    window_timezone="Asia/Shanghai", source="https://api-docs.deepseek.com",
                )
            )
        )  # fmt: skip
    chat = pb.UsageShape(
        provider="deepseek", model="deepseek-chat", input_tokens=1_000_000, max_output_tokens=0
    )
    day = await side.budget.Reserve(
        pb.ReserveRequest(budget_id="usd", shape=chat, idempotency_key="day")
    )
    clock.set(datetime(2026, 8, 15, 17, 0, tzinfo=UTC))
    night = await side.budget.Reserve(
        pb.ReserveRequest(budget_id="usd", shape=chat, idempotency_key="night")
    )
    assert (270_000, 135_000) == (day.amount, night.amount)
    await assert_invariants(side.dsn)


async def test_a_window_timezone_that_is_no_zone_is_refused(side: Running) -> None:
    """A price whose window_timezone is not an IANA zone is refused, naming the field."""
    price = gemini(NOW, 0, 1, 1)
    price.daily_from_minute, price.daily_to_minute = 60, 120
    price.window_timezone = "Mars/Olympus_Mons"
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await side.admin.PutPrice(pb.PutPriceRequest(price=price))
    assert grpc.StatusCode.INVALID_ARGUMENT == refused.value.code()
    assert "price.window_timezone" in (refused.value.details() or "")


async def test_the_repricer_moves_a_hold_at_a_zoned_windows_start_after_daylight_saving(
    side: Running, clock: FakeClock
) -> None:
    """A 09:00-17:00 America/New_York peak starts at 14:00 UTC once daylight saving ended
    (13:00 UTC in summer): a hold reserved at 13:59:50 UTC on 2026-11-02 is held off-peak and
    moved to the peak price at 14:00 UTC by the background repricer."""
    since = NOW - timedelta(days=1)
    for window, rate in (((17 * 60, 9 * 60), 1_000_000), ((9 * 60, 17 * 60), 2_000_000)):
        await side.admin.PutPrice(
            pb.PutPriceRequest(
                price=pb.Price(
                    provider="acme", model="m", effective_from=stamp(since),
                    input_usd_micros_per_mtok=rate, output_usd_micros_per_mtok=rate,
                    daily_from_minute=window[0], daily_to_minute=window[1],
                    window_timezone="America/New_York", source="https://acme.example/prices",
                )
            )
        )  # fmt: skip
    clock.set(datetime(2026, 11, 2, 13, 59, 50, tzinfo=UTC))
    held = await side.budget.Reserve(
        pb.ReserveRequest(
            budget_id="usd",
            shape=pb.UsageShape(provider="acme", model="m", input_tokens=100_000),
            idempotency_key="a",
        )
    )
    clock.set(datetime(2026, 11, 2, 14, 0, 30, tzinfo=UTC))

    async def repriced() -> bool:
        return 200_000 == (await fetch_budget_row(side.dsn, "usd"))["held"]

    await eventually(repriced, within_seconds=10, what="the hold repriced at the peak's start")
    assert (100_000, 1) == (held.amount, held.price_version)
    await assert_invariants(side.dsn)
