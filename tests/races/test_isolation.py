"""A request fails only itself: poisoned and overflowing requests among many bystanders,
each case ending on the invariants and on what every caller was told."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import grpc
import pytest

from earmark import limits
from earmark.core.ops import ReserveOp, ReserveResult
from earmark.store import Store
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.helpers import assert_invariants, fetch_budget_row

BYSTANDERS = 300
RESERVE_ATTEMPTS = 5


def reserve_op(budget_id: str, amount: int, labels: dict[str, str] | None = None) -> ReserveOp:
    return ReserveOp(
        budget_id=budget_id,
        idempotency_key=uuid.uuid4().hex,
        amount=amount,
        lease=timedelta(seconds=60),
        new_reservation_id=str(uuid.uuid4()),
        labels=labels or {},
    )


async def test_a_poisoned_operation_fails_only_itself_in_the_store(store: Store) -> None:
    """A Reserve that PostgreSQL refuses (a NUL in a label, past validation) shares a batch
    with 300 Reserves on another budget: it alone fails, every other one is admitted."""
    await store.put_budget("victim", 10**6, "t")
    await store.put_budget("poisoner", 10**6, "t")
    ops = [reserve_op("victim", 10) for _ in range(BYSTANDERS)]
    ops.insert(BYSTANDERS // 2, reserve_op("poisoner", 10, {"k": "bad\x00value"}))
    outcomes = await asyncio.gather(*[store.submit(op) for op in ops], return_exceptions=True)
    failed = [
        op.budget_id for op, o in zip(ops, outcomes, strict=True) if isinstance(o, BaseException)
    ]
    assert ["poisoner"] == failed
    admitted = [o for o in outcomes if isinstance(o, ReserveResult) and o.admitted]
    assert BYSTANDERS == len(admitted)
    assert BYSTANDERS * 10 == (await store.get_budget("victim")).held
    assert 0 == (await store.get_budget("poisoner")).held


async def test_a_nul_label_among_bystanders(sidecar: Running) -> None:
    """Through gRPC the NUL label is INVALID_ARGUMENT naming labels, and 300 concurrent
    Reserves on another budget are all admitted."""
    for budget_id in ("victim", "poisoner"):
        await sidecar.admin.PutBudget(
            pb.PutBudgetRequest(budget_id=budget_id, limit=10**6, unit="t")
        )
    poison = pb.ReserveRequest(
        budget_id="poisoner", amount=1, idempotency_key="p", labels={"k": "a\x00b"}
    )
    calls = [
        sidecar.budget.Reserve(
            pb.ReserveRequest(budget_id="victim", amount=10, idempotency_key=uuid.uuid4().hex)
        )
        for _ in range(BYSTANDERS)
    ]
    calls.insert(BYSTANDERS // 2, sidecar.budget.Reserve(poison))
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    errors = [o for o in outcomes if isinstance(o, grpc.aio.AioRpcError)]
    assert [grpc.StatusCode.INVALID_ARGUMENT] == [e.code() for e in errors]
    assert (errors[0].details() or "").startswith("labels:")
    assert BYSTANDERS == sum(
        1 for o in outcomes if isinstance(o, pb.ReserveResponse) and o.admitted
    )
    assert BYSTANDERS * 10 == (await fetch_budget_row(sidecar.dsn, "victim"))["held"]
    await assert_invariants(sidecar.dsn)


@pytest.mark.slow
async def test_an_int64_fill_fails_only_the_overflowing_reserves(sidecar: Running) -> None:
    """An unlimited budget filled with holds of 10^15 until its counters would pass 2^63-1:
    of the last 1,000 Reserves, sent through the sidecars, those that would overflow are
    FAILED_PRECONDITION naming the budget, and 1,000 other tenants' Reserves racing with
    them are all admitted."""
    big = limits.amount_units_max
    fits = limits.int64_max // big
    for budget_id, limit in (("filled", None), ("tenant", 10**9)):
        request = pb.PutBudgetRequest(budget_id=budget_id, unit="t")
        if limit is not None:
            request.limit = limit
        await sidecar.admin.PutBudget(request)
    gate = asyncio.Semaphore(200)

    async def reserve(budget_id: str, amount: int) -> pb.ReserveResponse | grpc.aio.AioRpcError:
        # A caller's Reserve, retried with its key on UNAVAILABLE as the SDK retries it: with
        # four sidecars on one hot row, a batch may give up after its serialization retries
        # ("nothing changed"), which says nothing about overflow.
        request = pb.ReserveRequest(
            budget_id=budget_id, amount=amount, idempotency_key=uuid.uuid4().hex
        )
        async with gate:
            for attempt in range(1, RESERVE_ATTEMPTS + 1):
                try:
                    return await sidecar.budget.Reserve(request)
                except grpc.aio.AioRpcError as error:
                    if error.code() != grpc.StatusCode.UNAVAILABLE or attempt == RESERVE_ATTEMPTS:
                        return error
            raise AssertionError("unreachable")

    overflowing = 25
    # The fill up to the last 1,000 Reserves goes through the store in this process (the
    # sidecars' own transactions, without gRPC's cost for 8,000 calls); the last 1,000,
    # which reach and pass the bound, race with the bystanders through the sidecars.
    head = fits + overflowing - 1_000
    store = await Store.open(sidecar.dsn)
    try:
        filled = await asyncio.gather(
            *(store.submit(reserve_op("filled", big)) for _ in range(head))
        )
    finally:
        await store.close()
    assert all(isinstance(r, ReserveResult) and r.admitted for r in filled)
    calls = [reserve("filled", big) for _ in range(1_000)]
    bystanders = [reserve("tenant", 1) for _ in range(1_000)]
    # Interleave, so that bystanders share batches with the overflowing Reserves.
    mixed = [c for pair in zip(calls, bystanders, strict=True) for c in pair]
    outcomes = await asyncio.gather(*mixed)
    replies_tenant = outcomes[1::2]
    replies_filled = outcomes[0::2]
    assert all(isinstance(r, pb.ReserveResponse) and r.admitted for r in replies_tenant)
    errors = [r for r in replies_filled if isinstance(r, grpc.aio.AioRpcError)]
    assert overflowing == len(errors)
    assert {grpc.StatusCode.FAILED_PRECONDITION} == {e.code() for e in errors}
    assert all("'filled'" in (e.details() or "") for e in errors)
    assert fits * big == (await fetch_budget_row(sidecar.dsn, "filled"))["held"]
    assert 1_000 == (await fetch_budget_row(sidecar.dsn, "tenant"))["held"]
    await assert_invariants(sidecar.dsn)


async def test_concurrent_creates_of_distinct_budgets_all_succeed(sidecar: Running) -> None:
    """100 PutBudget creates at once, each of its own budget, all answer OK."""
    calls = [
        sidecar.admin.PutBudget(pb.PutBudgetRequest(budget_id=f"new-{i}", limit=i, unit="t"))
        for i in range(100)
    ]
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    assert [] == [o for o in outcomes if isinstance(o, BaseException)]
    assert list(range(100)) == [o.limit for o in outcomes if isinstance(o, pb.BudgetState)]
    await assert_invariants(sidecar.dsn)
