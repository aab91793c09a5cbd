"""An operator's listings never take the workers' capacity: Admin's ListHolds, ListLedger
and ListPrices run on a pool of their own behind a bounded gate."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from earmark import limits
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.helpers import HeldListings, assert_invariants, eventually, reason_of, started

BUDGET = "ops/b"


async def test_workers_are_served_while_listings_hold_the_operators_pool(
    sidecar: Running, held_listings: HeldListings
) -> None:
    """With ListHolds calls holding every connection of the operator's pool and more in line
    than the workers' pool has connections, one more listing is UNAVAILABLE (OVERLOADED) at
    once, Reserves and Settles complete, and the listings answer once released."""
    await sidecar.admin.PutBudget(pb.PutBudgetRequest(budget_id=BUDGET, limit=10**6, unit="t"))
    in_line = limits.admin_scans_max + limits.admin_scans_waiting_max
    assert in_line > limits.pool_size_max_default
    store = sidecar.sidecar.store
    assert store is not None
    request = pb.ListHoldsRequest(budget_id=BUDGET, page_size=100)
    async with started(*(sidecar.admin.ListHolds(request) for _ in range(in_line))) as listings:
        await held_listings.holding_exactly(limits.admin_scans_max)

        async def line_full() -> bool:
            return limits.admin_scans_waiting_max == store.scans.waiting

        await eventually(line_full, within_seconds=10, what="the line of listings full")
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await sidecar.admin.ListLedger(pb.ListLedgerRequest(budget_id=BUDGET))
        for i in range(20):
            reply = await sidecar.budget.Reserve(
                pb.ReserveRequest(budget_id=BUDGET, amount=10, idempotency_key=f"k{i}")
            )
            assert reply.admitted
            await sidecar.budget.Settle(pb.SettleRequest(reservation_id=reply.reservation_id))
        assert not any(listing.done() for listing in listings)
        held_listings.release.set()
        pages = await asyncio.gather(*listings)
    assert grpc.StatusCode.UNAVAILABLE == refused.value.code()
    assert "OVERLOADED" == reason_of(refused.value)[0]
    assert [20] * in_line == [len(page.holds) for page in pages]
    await assert_invariants(sidecar.dsn)
