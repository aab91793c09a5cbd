"""The worker SDK in money: Reserve by shape, Charge and Settle by usage, estimates."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from google.protobuf.timestamp_pb2 import Timestamp

from earmark.client import (
    AsyncClient,
    EstimatePolicy,
    EstimateSource,
    Reservation,
    Shape,
    Usage,
)
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.helpers import assert_invariants


async def test_shape_usage_and_estimates_through_the_sdk(sidecar: Running) -> None:
    """reserve(shape=), charge(usage=), settle(usage=) price at gpt-4o's list price, and a
    reserve with neither amount nor shape learns from the job's settles."""
    since = Timestamp()
    since.FromDatetime(datetime.now(UTC) - timedelta(days=1))
    await sidecar.admin.PutPrice(
        pb.PutPriceRequest(
            price=pb.Price(
                provider="openai",
                model="gpt-4o",
                effective_from=since,
                input_usd_micros_per_mtok=2_500_000,
                output_usd_micros_per_mtok=10_000_000,
            )
        )
    )
    async with AsyncClient(sidecar.target, admin_target=sidecar.admin_target) as c:
        state = await c.put_budget(
            "usd", 1_000_000, "usd_micros", default_estimate=100_000,
            estimate_policy=EstimatePolicy.P75,
        )  # fmt: skip
        shaped = await c.reserve(
            "usd", shape=Shape("openai", "gpt-4o", 10_000, 2_000), job="research"
        )
        assert isinstance(shaped, Reservation)
        step = await c.charge(shaped.reservation_id, usage=Usage(1_000, 0))
        settled = await c.settle(shaped.reservation_id, usage=Usage(10_000, 1_000))
        estimated = await c.reserve("usd", job="research")
        after = await c.get_budget("usd")
    assert (100_000, EstimatePolicy.P75) == (state.default_estimate, state.estimate_policy)
    assert (45_000, EstimateSource.SHAPE, 1) == (
        shaped.amount,
        shaped.estimate_source,
        shaped.price_version,
    )
    assert (2_500, 2_500, 1) == (step.charged, step.requested, step.price_version)
    assert (35_000, 10_000, 1) == (settled.charged, settled.released, settled.price_version)
    assert isinstance(estimated, Reservation)
    assert (100_000, EstimateSource.DEFAULT) == (estimated.amount, estimated.estimate_source)
    assert (35_000, 100_000, False) == (after.used, after.held, after.exceeded)
    await assert_invariants(sidecar.dsn)
