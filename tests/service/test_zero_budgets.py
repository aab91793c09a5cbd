"""Zero budgets through a live sidecar on an injected clock and a real PostgreSQL: a limit
of 0 refuses every Reserve that would hold anything (an amount, an estimate), and admits a
call the price book prices at $0, which holds 0 through its charges, settle and expiry."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from google.protobuf.duration_pb2 import Duration

from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.helpers import FakeClock, assert_invariants, eventually, fetch_budget_row
from tests.service.test_calls import stamp

CLOCK_START = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
LEASE = Duration(seconds=60)


async def put_free_model(side: Running) -> None:
    """A model whose price says every token is free: both rates 0."""
    await side.admin.PutPrice(
        pb.PutPriceRequest(
            price=pb.Price(
                provider="local",
                model="free-7b",
                effective_from=stamp(CLOCK_START - timedelta(days=1)),
                input_usd_micros_per_mtok=0,
                output_usd_micros_per_mtok=0,
            )
        )
    )


async def put_zero(side: Running, budget_id: str = "zero") -> None:
    """A limit of 0, whose Reserves without amount or shape hold an estimate of 100."""
    await side.admin.PutBudget(
        pb.PutBudgetRequest(budget_id=budget_id, limit=0, unit="usd_micros", default_estimate=100)
    )


def free_call(budget_id: str = "zero") -> pb.ReserveRequest:
    return pb.ReserveRequest(
        budget_id=budget_id,
        idempotency_key=uuid.uuid4().hex,
        shape=pb.UsageShape(
            provider="local", model="free-7b", input_tokens=1_000, max_output_tokens=500
        ),
        lease=LEASE,
    )


def free_usage(output_tokens: int) -> pb.TokenUsage:
    return pb.TokenUsage(
        provider="local", model="free-7b", input_tokens=1_000, output_tokens=output_tokens
    )


async def test_a_zero_budget_refuses_a_hold_of_one_and_an_estimate(clocked: Running) -> None:
    """A Reserve of 1, and one with neither amount nor shape (it holds an estimate), are
    refused INSUFFICIENT_BUDGET with 0 remaining; nothing is held."""
    await put_zero(clocked)
    one = await clocked.budget.Reserve(
        pb.ReserveRequest(budget_id="zero", amount=1, idempotency_key="one", lease=LEASE)
    )
    estimated = await clocked.budget.Reserve(
        pb.ReserveRequest(budget_id="zero", idempotency_key="estimated", lease=LEASE)
    )
    row = await fetch_budget_row(clocked.dsn, "zero")
    assert [(False, pb.REFUSAL_REASON_INSUFFICIENT_BUDGET, 0)] * 2 == [
        (r.admitted, r.reason, r.remaining) for r in (one, estimated)
    ]
    assert (100, pb.ESTIMATE_SOURCE_DEFAULT) == (estimated.amount, estimated.estimate_source)
    assert (0, 0, 0) == (row["used"], row["held"], row["open_reservations"])
    await assert_invariants(clocked.dsn)


async def test_a_call_priced_at_zero_is_admitted_on_a_zero_budget_and_settles(
    clocked: Running, clock: FakeClock
) -> None:
    """A shape whose model's price is $0 holds 0 on a limit of 0: a Charge by usage charges
    0 and is not capped, a Settle at 0 moves nothing, a Settle of a usage priced above 0 is
    overshoot as usual, and a hold left open expires returning nothing."""
    await put_free_model(clocked)
    await put_zero(clocked)
    held = await clocked.budget.Reserve(free_call())
    charged = await clocked.budget.Charge(
        pb.ChargeRequest(
            reservation_id=held.reservation_id, usage=free_usage(200), idempotency_key="c1"
        )
    )
    settled = await clocked.budget.Settle(
        pb.SettleRequest(
            reservation_id=held.reservation_id,
            usage=free_usage(400),
            outcome=pb.OUTCOME_SUCCEEDED,
        )
    )
    over = await clocked.budget.Reserve(free_call())
    overshot = await clocked.budget.Settle(
        pb.SettleRequest(reservation_id=over.reservation_id, used=7, outcome=pb.OUTCOME_SUCCEEDED)
    )
    # After the overshoot the budget is past its limit of 0, and a free call still fits.
    left = await clocked.budget.Reserve(free_call())
    assert (True, 0, pb.ESTIMATE_SOURCE_SHAPE, 0) == (
        held.admitted,
        held.amount,
        held.estimate_source,
        held.remaining,
    )
    assert held.price_version > 0
    assert (0, False, 0) == (charged.charged, charged.capped, charged.hold_remaining)
    assert (0, 0, 0) == (settled.charged, settled.released, settled.overshoot)
    assert (True, 7, 0, 7) == (
        over.admitted,
        overshot.charged,
        overshot.released,
        overshot.overshoot,
    )
    assert (True, 0) == (left.admitted, left.amount)
    clock.advance(timedelta(seconds=120))

    async def swept() -> bool:
        return 0 == (await fetch_budget_row(clocked.dsn, "zero"))["open_reservations"]

    await eventually(swept, within_seconds=10, what="the free hold expired")
    row = await fetch_budget_row(clocked.dsn, "zero")
    assert (7, 0) == (row["used"], row["held"])
    await assert_invariants(clocked.dsn)


async def test_a_free_call_counts_on_every_budget_of_its_scope(clocked: Running) -> None:
    """A $0 call named on a zero budget and its zero parent is admitted on both (each
    holds 0), while a Reserve of 1 on the child is refused by it."""
    await put_free_model(clocked)
    await put_zero(clocked, "parent")
    await put_zero(clocked, "child")
    request = free_call("child")
    request.also_budget_ids.append("parent")
    free = await clocked.budget.Reserve(request)
    paid = await clocked.budget.Reserve(
        pb.ReserveRequest(
            budget_id="child",
            amount=1,
            idempotency_key="paid",
            also_budget_ids=["parent"],
            lease=LEASE,
        )
    )
    rows = [await fetch_budget_row(clocked.dsn, b) for b in ("child", "parent")]
    assert (True, 0) == (free.admitted, free.amount)
    assert (False, pb.REFUSAL_REASON_INSUFFICIENT_BUDGET, 0, "child") == (
        paid.admitted,
        paid.reason,
        paid.remaining,
        paid.refused_budget_id,
    )
    assert [(0, 1)] * 2 == [(r["held"], r["open_reservations"]) for r in rows]
    await assert_invariants(clocked.dsn)
