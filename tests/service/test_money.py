"""Prices, shapes, usage and estimates through a live sidecar: what each request is told,
what bad input gets, and that retries answer the same after a price moved."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from earmark.server import Sidecar
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running, running, sidecar_settings
from tests.helpers import FakeClock, assert_invariants, eventually, fetch_budget_row

NOW = datetime(2026, 8, 15, 12, 0, tzinfo=UTC)
SHAPE = pb.UsageShape(
    provider="openai", model="gpt-4o", input_tokens=10_000, max_output_tokens=2_000
)
USAGE = pb.TokenUsage(input_tokens=10_000, output_tokens=2_000)


def stamp(at: datetime) -> Timestamp:
    result = Timestamp()
    result.FromDatetime(at)
    return result


def gpt4o(at: datetime, input_rate: int = 2_500_000, output_rate: int = 10_000_000) -> pb.Price:
    return pb.Price(
        provider="openai",
        model="gpt-4o",
        effective_from=stamp(at),
        input_usd_micros_per_mtok=input_rate,
        output_usd_micros_per_mtok=output_rate,
        source="https://openai.com/api/pricing",
    )


# Where the conftest's `clock` starts for this module's tests.
CLOCK_START = NOW


@pytest.fixture
async def side(dsn: str, socket_dir: Path, clock: FakeClock) -> AsyncIterator[Running]:
    async with running(Sidecar(sidecar_settings(dsn, socket_dir), clock=clock), dsn) as s:
        await s.admin.PutPrice(pb.PutPriceRequest(price=gpt4o(NOW - timedelta(days=1))))
        for budget_id, unit in (("usd", "usd_micros"), ("tok", "tokens"), ("t", "t")):
            await s.admin.PutBudget(
                pb.PutBudgetRequest(budget_id=budget_id, limit=1_000_000, unit=unit)
            )
        yield s


async def rpc_error(call: object) -> grpc.aio.AioRpcError:
    try:
        await call  # type: ignore[misc]
    except grpc.aio.AioRpcError as error:
        return error
    raise AssertionError("the call succeeded")


async def test_put_price_versions_increase_and_list(side: Running) -> None:
    """PutPrice appends version 2 after 1; ListPrices shows both, filtered by model."""
    second = await side.admin.PutPrice(pb.PutPriceRequest(price=gpt4o(NOW, 5_000_000)))
    await side.admin.PutPrice(
        pb.PutPriceRequest(price=pb.Price(provider="openai", model="o3", effective_from=stamp(NOW)))
    )
    listed = await side.admin.ListPrices(pb.ListPricesRequest(provider="openai", model="gpt-4o"))
    everything = await side.admin.ListPrices(pb.ListPricesRequest())
    assert 2 == second.version
    assert [(1, 2_500_000), (2, 5_000_000)] == [
        (p.version, p.input_usd_micros_per_mtok) for p in listed.prices
    ]
    assert "https://openai.com/api/pricing" == listed.prices[0].source
    assert 3 == len(everything.prices)


async def test_tokens_budget_counts_tokens_without_a_price(side: Running) -> None:
    """A tokens budget holds (input + max_output) x attempts and settles input + output."""
    shape = pb.UsageShape(
        provider="x", model="y", input_tokens=800, max_output_tokens=200, attempts=3
    )
    held = await side.budget.Reserve(
        pb.ReserveRequest(budget_id="tok", shape=shape, idempotency_key="a")
    )
    settled = await side.budget.Settle(
        pb.SettleRequest(
            reservation_id=held.reservation_id,
            usage=pb.TokenUsage(input_tokens=800, output_tokens=150),
        )
    )
    assert (3_000, pb.ESTIMATE_SOURCE_SHAPE, 0) == (
        held.amount,
        held.estimate_source,
        held.price_version,
    )
    assert (950, 2_050) == (settled.charged, settled.released)
    await assert_invariants(side.dsn)


async def test_charge_by_usage_and_reprice_at_dispatch(side: Running, clock: FakeClock) -> None:
    """A shaped hold charged after a cheaper price took effect moves to the new ceiling;
    its usage is priced at the new version too, whose output rate the answer carries."""
    held = await side.budget.Reserve(
        pb.ReserveRequest(budget_id="usd", shape=SHAPE, idempotency_key="a")
    )
    await side.admin.PutPrice(
        pb.PutPriceRequest(price=gpt4o(NOW + timedelta(seconds=10), 1_250_000, 5_000_000))
    )
    clock.advance(timedelta(seconds=30))
    charged = await side.budget.Charge(
        pb.ChargeRequest(reservation_id=held.reservation_id, usage=USAGE, idempotency_key="step-1")
    )
    row = await fetch_budget_row(side.dsn, "usd")
    assert (45_000, 1) == (held.amount, held.price_version)
    assert (22_500, False, 0, 2, 22_500, 5_000_000) == (
        charged.charged,
        charged.capped,
        charged.hold_remaining,
        charged.price_version,
        charged.requested,
        charged.output_usd_micros_per_mtok,
    )
    assert (22_500, 0) == (row["used"], row["held"])
    await assert_invariants(side.dsn)


async def test_an_uncharged_hold_is_repriced_at_the_cutover(
    side: Running, clock: FakeClock
) -> None:
    """A hold reserved by shape and not yet charged moves to a cheaper price soon after it
    takes effect, without a Charge: the background repricer, with a reprice ledger row."""
    held = await side.budget.Reserve(
        pb.ReserveRequest(budget_id="usd", shape=SHAPE, idempotency_key="a")
    )
    await side.admin.PutPrice(
        pb.PutPriceRequest(price=gpt4o(NOW + timedelta(seconds=10), 1_250_000, 5_000_000))
    )
    clock.advance(timedelta(seconds=30))

    async def repriced() -> bool:
        return 22_500 == (await fetch_budget_row(side.dsn, "usd"))["held"]

    await eventually(repriced, within_seconds=10, what="the hold repriced at the cutover")
    (hold,) = (await side.admin.ListHolds(pb.ListHoldsRequest(budget_id="usd"))).holds
    ledger = await side.admin.ListLedger(pb.ListLedgerRequest(budget_id="usd"))
    assert (45_000, 1, 22_500) == (held.amount, held.price_version, hold.amount)
    assert [("hold", 45_000), ("reprice", -22_500)] == [
        (e.kind, e.held_delta) for e in ledger.entries
    ]
    await assert_invariants(side.dsn)


async def test_a_hold_the_new_price_does_not_fit_keeps_the_old_one(
    side: Running, clock: FakeClock
) -> None:
    """On a HARD budget with no room for a dearer price, a repricing pass leaves the hold at
    the price it was reserved at; its first Charge, priced again, is answered capped."""
    await side.admin.PutBudget(
        pb.PutBudgetRequest(budget_id="tight", limit=50_000, unit="usd_micros")
    )
    held = await side.budget.Reserve(
        pb.ReserveRequest(budget_id="tight", shape=SHAPE, idempotency_key="a")
    )
    await side.admin.PutPrice(
        pb.PutPriceRequest(price=gpt4o(NOW + timedelta(seconds=10), 5_000_000, 20_000_000))
    )
    clock.advance(timedelta(seconds=30))
    store = side.sidecar.store
    assert store is not None
    moved = await store.reprice_due()
    (hold,) = (await side.admin.ListHolds(pb.ListHoldsRequest(budget_id="tight"))).holds
    charged = await side.budget.Charge(
        pb.ChargeRequest(reservation_id=held.reservation_id, amount=1, idempotency_key="c")
    )
    assert (0, 45_000) == (moved, hold.amount)
    assert (0, True) == (charged.charged, charged.capped)
    await assert_invariants(side.dsn)


async def test_retries_answer_the_same_after_the_price_moved(
    side: Running, clock: FakeClock
) -> None:
    """A retried Charge or Settle by usage is compared at the version it was first priced
    at, so a later price does not turn a retry into a conflict."""
    held = await side.budget.Reserve(
        pb.ReserveRequest(budget_id="usd", amount=200_000, idempotency_key="a")
    )
    step = pb.ChargeRequest(
        reservation_id=held.reservation_id,
        usage=pb.TokenUsage(input_tokens=1_000, provider="openai", model="gpt-4o"),
        idempotency_key="s1",
    )
    settle = pb.SettleRequest(
        reservation_id=held.reservation_id,
        usage=pb.TokenUsage(
            input_tokens=10_000, output_tokens=2_000, provider="openai", model="gpt-4o"
        ),
        outcome=pb.OUTCOME_SUCCEEDED,
    )
    first_charge = await side.budget.Charge(step)
    first_settle = await side.budget.Settle(settle)
    await side.admin.PutPrice(
        pb.PutPriceRequest(price=gpt4o(NOW + timedelta(seconds=10), 9_000_000))
    )
    clock.advance(timedelta(seconds=30))
    assert first_charge == await side.budget.Charge(step)
    assert first_settle == await side.budget.Settle(settle)
    assert (2_500, 45_000, 1) == (
        first_charge.charged,
        first_settle.charged,
        first_settle.price_version,
    )
    await assert_invariants(side.dsn)


async def test_same_key_another_shape_is_already_exists(side: Running) -> None:
    """A Reserve that reuses a key for another shape is ALREADY_EXISTS and holds nothing."""
    await side.budget.Reserve(pb.ReserveRequest(budget_id="usd", shape=SHAPE, idempotency_key="a"))
    other = pb.UsageShape(provider="openai", model="gpt-4o", input_tokens=1, max_output_tokens=1)
    again = await side.budget.Reserve(
        pb.ReserveRequest(budget_id="usd", shape=SHAPE, idempotency_key="a")
    )
    error = await rpc_error(
        side.budget.Reserve(pb.ReserveRequest(budget_id="usd", shape=other, idempotency_key="a"))
    )
    assert (True, 45_000) == (again.admitted, again.amount)
    assert grpc.StatusCode.ALREADY_EXISTS == error.code()
    assert 45_000 == (await fetch_budget_row(side.dsn, "usd"))["held"]


@pytest.mark.parametrize(
    ("request_", "code", "field"),
    [
        (
            pb.ReserveRequest(budget_id="usd", amount=5, shape=SHAPE, idempotency_key="k"),
            "INVALID_ARGUMENT",
            "amount",
        ),
        (pb.ReserveRequest(budget_id="usd", idempotency_key="k"), "INVALID_ARGUMENT", "amount"),
        (
            pb.ReserveRequest(
                budget_id="usd",
                shape=pb.UsageShape(
                    provider="openai", model="gpt-4o", input_tokens=5, cached_input_tokens=6
                ),
                idempotency_key="k",
            ),
            "INVALID_ARGUMENT",
            "shape.cached_input_tokens",
        ),
        (
            pb.ReserveRequest(
                budget_id="usd",
                shape=pb.UsageShape(
                    provider="openai",
                    model="gpt-4o",
                    input_tokens=10,
                    cached_input_tokens=6,
                    cache_write_input_tokens=5,
                ),
                idempotency_key="k",
            ),
            "INVALID_ARGUMENT",
            "shape.cache_write_input_tokens",
        ),
        (
            pb.ReserveRequest(
                budget_id="usd",
                shape=pb.UsageShape(provider="openai", input_tokens=5),
                idempotency_key="k",
            ),
            "INVALID_ARGUMENT",
            "shape.model",
        ),
        (
            pb.ReserveRequest(
                budget_id="usd",
                shape=pb.UsageShape(provider="openai", model="gpt-4o", input_tokens=-1),
                idempotency_key="k",
            ),
            "INVALID_ARGUMENT",
            "shape.input_tokens",
        ),
        (
            pb.ReserveRequest(
                budget_id="usd",
                shape=pb.UsageShape(
                    provider="openai", model="gpt-4o", input_tokens=1, attempts=1_001
                ),
                idempotency_key="k",
            ),
            "INVALID_ARGUMENT",
            "shape.attempts",
        ),
        (
            pb.ReserveRequest(
                budget_id="usd",
                shape=pb.UsageShape(
                    provider="openai",
                    model="gpt-4o",
                    input_tokens=10**12,
                    max_output_tokens=10**12,
                    attempts=1_000,
                ),
                idempotency_key="k",
            ),
            "INVALID_ARGUMENT",
            "shape",
        ),
        (
            pb.ReserveRequest(budget_id="usd", amount=1, job="a job", idempotency_key="k"),
            "INVALID_ARGUMENT",
            "job",
        ),
        (
            pb.ReserveRequest(
                budget_id="usd",
                shape=pb.UsageShape(provider="anthropic", model="claude", input_tokens=1),
                idempotency_key="k",
            ),
            "FAILED_PRECONDITION",
            "shape",
        ),
        (
            pb.ReserveRequest(budget_id="t", shape=SHAPE, idempotency_key="k"),
            "FAILED_PRECONDITION",
            "shape",
        ),
    ],
)
async def test_bad_reserves_name_their_field_and_hold_nothing(
    side: Running, request_: pb.ReserveRequest, code: str, field: str
) -> None:
    """Each bad Reserve gets its status with the field first in the message; nothing held."""
    error = await rpc_error(side.budget.Reserve(request_))
    assert (code, field) == (error.code().name, (error.details() or "").split(":")[0])
    assert 0 == (await fetch_budget_row(side.dsn, request_.budget_id))["held"]
    await assert_invariants(side.dsn)


async def test_bad_charges_and_settles_name_their_field(side: Running) -> None:
    """Amount and usage together, or usage with no model on a hold that has none."""
    held = await side.budget.Reserve(
        pb.ReserveRequest(budget_id="usd", amount=100, idempotency_key="a")
    )
    rid = held.reservation_id
    both = await rpc_error(
        side.budget.Charge(
            pb.ChargeRequest(reservation_id=rid, amount=1, usage=USAGE, idempotency_key="c")
        )
    )
    neither = await rpc_error(
        side.budget.Charge(pb.ChargeRequest(reservation_id=rid, idempotency_key="c"))
    )
    no_model = await rpc_error(
        side.budget.Settle(pb.SettleRequest(reservation_id=rid, usage=USAGE))
    )
    settle_both = await rpc_error(
        side.budget.Settle(pb.SettleRequest(reservation_id=rid, used=1, usage=USAGE))
    )
    found = [
        (e.code().name, (e.details() or "").split(":")[0])
        for e in (both, neither, no_model, settle_both)
    ]
    assert [
        ("INVALID_ARGUMENT", "amount"),
        ("INVALID_ARGUMENT", "amount"),
        ("INVALID_ARGUMENT", "usage"),
        ("INVALID_ARGUMENT", "used"),
    ] == found
    assert 100 == (await fetch_budget_row(side.dsn, "usd"))["held"]


@pytest.mark.parametrize(
    ("price", "field"),
    [
        (pb.Price(provider="openai", model="gpt-4o"), "price.effective_from"),
        (pb.Price(model="gpt-4o", effective_from=stamp(NOW)), "price.provider"),
        (
            pb.Price(provider="openai", model="gpt-4o", effective_from=stamp(NOW), version=3),
            "price.version",
        ),
        (
            pb.Price(
                provider="openai",
                model="gpt-4o",
                effective_from=stamp(NOW),
                effective_to=stamp(NOW),
            ),
            "price.effective_to",
        ),
        (
            pb.Price(
                provider="openai",
                model="gpt-4o",
                effective_from=stamp(NOW),
                input_usd_micros_per_mtok=-1,
            ),
            "price.input_usd_micros_per_mtok",
        ),
        (
            pb.Price(
                provider="openai",
                model="gpt-4o",
                effective_from=stamp(NOW),
                daily_from_minute=60,
                daily_to_minute=60,
            ),
            "price.daily_to_minute",
        ),
        (
            pb.Price(
                provider="openai", model="gpt-4o", effective_from=stamp(NOW), daily_from_minute=1440
            ),
            "price.daily_from_minute",
        ),
        (
            pb.Price(provider="openai", model="gpt-4o", effective_from=stamp(NOW), source="x\x00"),
            "price.source",
        ),
    ],
)
async def test_bad_prices_name_their_field_and_add_nothing(
    side: Running, price: pb.Price, field: str
) -> None:
    """A bad PutPrice is INVALID_ARGUMENT naming its field, and the book keeps one version."""
    error = await rpc_error(side.admin.PutPrice(pb.PutPriceRequest(price=price)))
    listed = await side.admin.ListPrices(pb.ListPricesRequest())
    assert ("INVALID_ARGUMENT", field) == (error.code().name, (error.details() or "").split(":")[0])
    assert 1 == len(listed.prices)


async def test_budget_state_shows_estimates_and_exceeded(side: Running) -> None:
    """PutBudget keeps default_estimate and policy; exceeded turns on once used > limit."""
    state = await side.admin.PutBudget(
        pb.PutBudgetRequest(
            budget_id="est",
            limit=100,
            unit="usd_micros",
            default_estimate=60,
            estimate_policy=pb.ESTIMATE_POLICY_P75,
        )
    )
    held = await side.budget.Reserve(pb.ReserveRequest(budget_id="est", idempotency_key="a"))
    await side.budget.Settle(pb.SettleRequest(reservation_id=held.reservation_id, used=150))
    after = await side.admin.GetBudget(pb.GetBudgetRequest(budget_id="est"))
    assert (60, pb.ESTIMATE_POLICY_P75, False) == (
        state.default_estimate,
        state.estimate_policy,
        state.exceeded,
    )
    assert (60, pb.ESTIMATE_SOURCE_DEFAULT) == (held.amount, held.estimate_source)
    assert (150, True, 0) == (after.used, after.exceeded, after.remaining)
    await assert_invariants(side.dsn)


async def tenant_samples(dsn: str) -> dict[tuple[str, str, str, str], str]:
    """Every tenant_samples row, by its key (unit, root, job, model), its samples as stored."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch("SELECT unit, root, job, model, samples FROM tenant_samples")
    finally:
        await conn.close()
    return {(r["unit"], r["root"], r["job"], r["model"]): r["samples"] for r in rows}


async def test_two_tenants_with_one_job_name_learn_apart(side: Running) -> None:
    """Budget ta's settles of job "summarize" do not change tb's first estimate of it (tb's
    default), and ta's next Reserve holds ta's median."""
    for budget_id, default in (("ta", 50), ("tb", 70)):
        await side.admin.PutBudget(
            pb.PutBudgetRequest(
                budget_id=budget_id, limit=1_000_000, unit="usd_micros", default_estimate=default
            )
        )
    for i, used in enumerate((100, 300, 200)):
        held = await side.budget.Reserve(
            pb.ReserveRequest(budget_id="ta", job="summarize", idempotency_key=f"a{i}")
        )
        await side.budget.Settle(
            pb.SettleRequest(
                reservation_id=held.reservation_id, used=used, outcome=pb.OUTCOME_SUCCEEDED
            )
        )
    other = await side.budget.Reserve(
        pb.ReserveRequest(budget_id="tb", job="summarize", idempotency_key="b0")
    )
    again = await side.budget.Reserve(
        pb.ReserveRequest(budget_id="ta", job="summarize", idempotency_key="a3")
    )
    assert (70, pb.ESTIMATE_SOURCE_DEFAULT) == (other.amount, other.estimate_source)
    assert (200, pb.ESTIMATE_SOURCE_JOB_MEDIAN) == (again.amount, again.estimate_source)
    stored = await tenant_samples(side.dsn)
    assert {("usd_micros", "ta", "summarize", ""): "[100, 300, 200]"} == stored
    await assert_invariants(side.dsn)
