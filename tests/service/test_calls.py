"""A provider call's Reserve through a live sidecar: the prompt charged in the admitting
transaction, the cap the provider is told (the call's own, or the model's ceiling), degrade,
and every billed quantity priced: service tiers, 1-hour cache writes and server tools."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from earmark.server import Sidecar
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running, running, sidecar_settings
from tests.helpers import FakeClock, assert_invariants, eventually, reason_of

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
CEILING = 16_384
# $2.50 in, $10.00 out, per million tokens; web search $10 per thousand calls.
INPUT_RATE, OUTPUT_RATE, SEARCH_FEE = 2_500_000, 10_000_000, 10_000


def stamp(at: datetime) -> Timestamp:
    result = Timestamp()
    result.FromDatetime(at)
    return result


def price(**fields: object) -> pb.PutPriceRequest:
    values: dict[str, object] = {
        "provider": "openai",
        "model": "gpt-5",
        "effective_from": stamp(NOW - timedelta(days=1)),
        "input_usd_micros_per_mtok": INPUT_RATE,
        "output_usd_micros_per_mtok": OUTPUT_RATE,
        "max_output_tokens": CEILING,
    }
    values.update(fields)
    return pb.PutPriceRequest(price=pb.Price(**values))  # type: ignore[arg-type]


def cost(input_tokens: int, output_tokens: int, input_rate: int = INPUT_RATE) -> int:
    """Micro-dollars, rounded up once, as the sidecar prices."""
    return -(-(input_tokens * input_rate + output_tokens * OUTPUT_RATE) // 1_000_000)


# Where the conftest's `clock` starts for this module's tests.
CLOCK_START = NOW


@pytest.fixture
async def side(dsn: str, socket_dir: Path, clock: FakeClock) -> AsyncIterator[Running]:
    settings = sidecar_settings(dsn, socket_dir)
    async with running(Sidecar(settings, clock=clock), dsn) as s:
        await s.admin.PutPrice(price())
        yield s


async def budget(side: Running, budget_id: str, limit: int, soft: bool = False) -> None:
    policy = pb.OVERAGE_POLICY_SOFT if soft else pb.OVERAGE_POLICY_HARD
    await side.admin.PutBudget(
        pb.PutBudgetRequest(
            budget_id=budget_id, limit=limit, unit="usd_micros", overage_policy=policy
        )
    )


def call(
    budget_id: str, key: str, most: int = 0, *, degrade: bool = False, **shape: object
) -> pb.ReserveRequest:
    """A Reserve for a call of 1,000 prompt tokens, its prompt charged at once."""
    fields: dict[str, object] = {"provider": "openai", "model": "gpt-5", "input_tokens": 1_000}
    fields |= {"max_output_tokens": most} if most else {"output_ceiling": True}
    fields.update(shape)
    return pb.ReserveRequest(
        budget_id=budget_id,
        idempotency_key=key,
        shape=pb.UsageShape(**fields),  # type: ignore[arg-type]
        charge=pb.TokenUsage(input_tokens=1_000),
        degrade=degrade,
        lease=Duration(seconds=60),
    )


async def test_a_call_without_its_own_cap_is_held_for_the_ceiling_and_told_it(
    side: Running,
) -> None:
    """On a HARD budget a call with no maximum is held for the model's ceiling, told that
    ceiling, and its prompt is charged in the same Reserve; a retry answers the same."""
    await budget(side, "hard", 1_000_000)
    first = await side.budget.Reserve(call("hard", "a"))
    again = await side.budget.Reserve(call("hard", "a"))
    state = await side.admin.GetBudget(pb.GetBudgetRequest(budget_id="hard"))
    expected = (True, cost(1_000, CEILING), cost(1_000, 0), CEILING, False)
    for answer in (first, again):
        assert expected == (
            answer.admitted,
            answer.amount,
            answer.charged,
            answer.max_output_tokens,
            answer.degraded,
        )
    assert (cost(1_000, 0), cost(1_000, CEILING) - cost(1_000, 0)) == (state.used, state.held)
    await assert_invariants(side.dsn)


async def test_a_call_with_its_own_cap_is_held_for_it_and_refused_when_it_does_not_fit(
    side: Running,
) -> None:
    """A call's own maximum is what it is held for and told; past what the budget has
    left it is refused before anything is charged, and with degrade it is admitted at the
    largest output the budget covers."""
    await budget(side, "small", cost(1_000, 500))
    refused = await side.budget.Reserve(call("small", "big", 4_000))
    degraded = await side.budget.Reserve(call("small", "big-degraded", 4_000, degrade=True))
    state = await side.admin.GetBudget(pb.GetBudgetRequest(budget_id="small"))
    assert (False, pb.REFUSAL_REASON_INSUFFICIENT_BUDGET, 0) == (
        refused.admitted,
        refused.reason,
        refused.charged,
    )
    assert (True, True, 500, cost(1_000, 500)) == (
        degraded.admitted,
        degraded.degraded,
        degraded.max_output_tokens,
        degraded.amount,
    )
    assert (cost(1_000, 0), cost(1_000, 500) - cost(1_000, 0)) == (state.used, state.held)
    again = await side.budget.Reserve(call("small", "big-degraded", 4_000, degrade=True))
    assert (500, True, degraded.reservation_id) == (
        again.max_output_tokens,
        again.degraded,
        again.reservation_id,
    )
    await assert_invariants(side.dsn)


async def test_a_soft_budget_holds_the_estimate_and_tells_the_ceiling(side: Running) -> None:
    """On a SOFT budget a call with no maximum holds its prompt (no history yet), is told
    the ceiling, and a longer answer is charged in full as overshoot."""
    await budget(side, "soft", 1_000_000, soft=True)
    held = await side.budget.Reserve(call("soft", "s"))
    settled = await side.budget.Settle(
        pb.SettleRequest(
            reservation_id=held.reservation_id,
            usage=pb.TokenUsage(input_tokens=1_000, output_tokens=3_000),
        )
    )
    assert (cost(1_000, 0), CEILING, cost(1_000, 0)) == (
        held.amount,
        held.max_output_tokens,
        held.charged,
    )
    assert (cost(1_000, 3_000), cost(1_000, 3_000) - cost(1_000, 0)) == (
        settled.charged,
        settled.overshoot,
    )
    await assert_invariants(side.dsn)


async def test_a_model_without_a_ceiling_needs_the_calls_own_cap(side: Running) -> None:
    """A call with no maximum on a model whose price names no ceiling is refused as
    FAILED_PRECONDITION naming the field; nothing is held."""
    await side.admin.PutPrice(price(model="mystery", max_output_tokens=0))
    await budget(side, "b", 1_000_000)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await side.budget.Reserve(call("b", "m", model="mystery"))
    state = await side.admin.GetBudget(pb.GetBudgetRequest(budget_id="b"))
    assert grpc.StatusCode.FAILED_PRECONDITION == caught.value.code()
    assert "PRICE_NOT_FOUND" == reason_of(caught.value)[0]
    assert "shape.output_ceiling" == reason_of(caught.value)[1]["field"]
    assert (0, 0) == (state.used, state.held)


async def test_a_dead_workers_call_is_in_doubt_with_its_prompt_charged(
    side: Running, clock: FakeClock
) -> None:
    """A hold whose prompt was charged by its Reserve and whose worker never settles goes
    in doubt when its lease passes, its prompt charged: the provider may have billed it."""
    await budget(side, "d", 1_000_000)
    held = await side.budget.Reserve(call("d", "dead", 2_000))
    clock.advance(timedelta(seconds=61))

    async def in_doubt() -> bool:
        page = await side.admin.ListHolds(pb.ListHoldsRequest(budget_id="d"))
        return [pb.RESERVATION_STATE_IN_DOUBT] == [h.state for h in page.holds]

    await eventually(in_doubt, within_seconds=10, what="the hold in doubt")
    page = await side.admin.ListHolds(pb.ListHoldsRequest(budget_id="d"))
    assert (held.reservation_id, cost(1_000, 0), True) == (
        page.holds[0].reservation_id,
        page.holds[0].charged,
        page.holds[0].dispatched,
    )
    await assert_invariants(side.dsn)


async def test_service_tiers_are_priced_at_their_own_rows(side: Running) -> None:
    """A priority call is held and settled at the priority row; one the provider ran at the
    default tier is settled at the default row; an unpriced tier is refused at Reserve."""
    await side.admin.PutPrice(price(service_tier="priority", input_usd_micros_per_mtok=4_375_000))
    await budget(side, "tiers", 10_000_000)
    priority = await side.budget.Reserve(call("tiers", "p", 100, service_tier="priority"))
    settled = await side.budget.Settle(
        pb.SettleRequest(
            reservation_id=priority.reservation_id,
            usage=pb.TokenUsage(input_tokens=1_000, output_tokens=100, service_tier="priority"),
        )
    )
    ran_default = await side.budget.Reserve(call("tiers", "d", 100, service_tier="priority"))
    default = await side.budget.Settle(
        pb.SettleRequest(
            reservation_id=ran_default.reservation_id,
            usage=pb.TokenUsage(input_tokens=1_000, output_tokens=100, service_tier="default"),
        )
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await side.budget.Reserve(call("tiers", "f", 100, service_tier="flex"))
    assert cost(1_000, 100, 4_375_000) == settled.charged
    assert cost(1_000, 100) == default.charged
    assert (grpc.StatusCode.FAILED_PRECONDITION, "PRICE_NOT_FOUND") == (
        caught.value.code(),
        reason_of(caught.value)[0],
    )
    await assert_invariants(side.dsn)


async def test_long_cache_writes_and_server_tools_are_priced(side: Running) -> None:
    """1-hour cache writes at their rate, 5-minute ones at the cache-write rate, and each
    web search at its fee; a tool the price has no fee for is refused at Reserve."""
    await side.admin.PutPrice(
        price(
            provider="anthropic",
            model="claude",
            cache_write_usd_micros_per_mtok=3_125_000,
            cache_write_long_usd_micros_per_mtok=5_000_000,
            tool_usd_micros={"web_search": SEARCH_FEE},
        )
    )
    await budget(side, "a", 10_000_000)
    request = call("a", "k", 200, provider="anthropic", model="claude")
    request.shape.max_tool_calls["web_search"] = 2
    held = await side.budget.Reserve(request)
    usage = pb.TokenUsage(
        input_tokens=10_000,
        cache_write_input_tokens=6_000,
        cache_write_long_input_tokens=4_000,
        output_tokens=200,
        tool_calls={"web_search": 2},
    )
    settled = await side.budget.Settle(
        pb.SettleRequest(reservation_id=held.reservation_id, usage=usage)
    )
    expected = -(
        -(4_000 * INPUT_RATE + 2_000 * 3_125_000 + 4_000 * 5_000_000 + 200 * OUTPUT_RATE)
        // 1_000_000
    )
    unpriced = call("a", "x", 200, provider="anthropic", model="claude")
    unpriced.shape.max_tool_calls["code_execution"] = 1
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await side.budget.Reserve(unpriced)
    assert (True, expected + 2 * SEARCH_FEE) == (held.admitted, settled.charged)
    assert ("PRICE_NOT_FOUND", "shape.max_tool_calls") == (
        reason_of(caught.value)[0],
        reason_of(caught.value)[1]["field"],
    )
    await assert_invariants(side.dsn)


async def test_a_price_keeps_its_new_fields(side: Running) -> None:
    """PutPrice answers, and ListPrices lists, the ceiling, the 1-hour rate, the tier and
    the tool fees as given."""
    put = await side.admin.PutPrice(
        price(
            model="o4",
            cache_write_long_usd_micros_per_mtok=7,
            service_tier="flex",
            tool_usd_micros={"web_search": 3},
        )
    )
    listed = await side.admin.ListPrices(pb.ListPricesRequest(provider="openai", model="o4"))
    for each in (put, listed.prices[0]):
        assert (CEILING, 7, "flex", {"web_search": 3}) == (
            each.max_output_tokens,
            each.cache_write_long_usd_micros_per_mtok,
            each.service_tier,
            dict(each.tool_usd_micros),
        )


@pytest.mark.parametrize(
    ("shape", "field"),
    [
        ({"max_output_tokens": 10, "output_ceiling": True}, "shape.output_ceiling"),
        ({"cache_write_input_tokens": 1, "cache_write_long_input_tokens": 2},
         "shape.cache_write_long_input_tokens"),
        ({"service_tier": "pri ority"}, "shape.service_tier"),
    ],
)  # fmt: skip
async def test_bad_call_shapes_name_their_field(
    side: Running, shape: dict[str, object], field: str
) -> None:
    """A shape that asks for both its own cap and the ceiling, more 1-hour writes than
    writes, or a tier that is no name, is INVALID_ARGUMENT naming the field."""
    await budget(side, "v", 1_000_000)
    fields: dict[str, object] = {"provider": "openai", "model": "gpt-5", "input_tokens": 10}
    fields.update(shape)
    request = pb.ReserveRequest(
        budget_id="v",
        idempotency_key="k",
        shape=pb.UsageShape(**fields),  # type: ignore[arg-type]
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await side.budget.Reserve(request)
    assert (grpc.StatusCode.INVALID_ARGUMENT, field) == (
        caught.value.code(),
        reason_of(caught.value)[1]["field"],
    )
