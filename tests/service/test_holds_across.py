"""ListHolds with an empty budget_id and a state: every budget's holds in that state,
oldest first, paged like a budget's listing; without a state (or with a closed one) it is
refused by name."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from earmark.client import AsyncClient, Client, HoldState
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.helpers import FakeClock, assert_invariants, eventually

LEASE = Duration(seconds=60)
# The budget of each in-doubt hold, in the order they are made: the budgets interleaved,
# so that oldest first across budgets is neither by budget nor by reservation id alone.
MADE_ON = ("c", "a", "b", "a", "c")


async def reserve(s: Running, budget_id: str, amount: int, charge: int = 0) -> str:
    reply = await s.budget.Reserve(
        pb.ReserveRequest(
            budget_id=budget_id, amount=amount, idempotency_key=uuid.uuid4().hex, lease=LEASE
        )
    )
    assert reply.admitted
    if charge:
        await s.budget.Charge(
            pb.ChargeRequest(
                reservation_id=reply.reservation_id, amount=charge, idempotency_key="c"
            )
        )
    return reply.reservation_id


async def in_doubt_across(s: Running, clock: FakeClock) -> tuple[list[str], str]:
    """Budgets a, b and c (b in usd_micros), a dispatched hold made on each of MADE_ON a
    second apart and one undispatched hold; past their leases the sweeper puts the first
    in doubt and expires the other. Then one more hold, held. Returns the in-doubt holds'
    ids, oldest first, and the held one's."""
    for budget_id in ("a", "b", "c"):
        unit = "usd_micros" if budget_id == "b" else "t"
        await s.admin.PutBudget(
            pb.PutBudgetRequest(budget_id=budget_id, limit=1_000_000, unit=unit)
        )
    doubted = []
    for index, budget_id in enumerate(MADE_ON):
        doubted.append(await reserve(s, budget_id, 10_000 + index, charge=1_000))
        clock.advance(timedelta(seconds=1))
    idle = await reserve(s, "b", 500)
    clock.advance(timedelta(seconds=61))

    async def swept() -> bool:
        states = {
            h.reservation_id: h.state
            for budget_id in ("a", "b", "c")
            for h in (await s.admin.ListHolds(pb.ListHoldsRequest(budget_id=budget_id))).holds
        }
        return pb.RESERVATION_STATE_EXPIRED == states[idle] and all(
            pb.RESERVATION_STATE_IN_DOUBT == states[rid] for rid in doubted
        )

    await eventually(swept, within_seconds=10, what="the sweeper's pass")
    held = await reserve(s, "a", 700)
    return doubted, held


async def every_page(s: Running, state: int, size: int) -> list[list[pb.Hold]]:
    """Each page of ListHolds across budgets, following next_page_token to the end."""
    pages: list[list[pb.Hold]] = []
    token = ""
    while True:
        page = await s.admin.ListHolds(
            pb.ListHoldsRequest(state=state, page_size=size, page_token=token)  # type: ignore[arg-type]
        )
        pages.append(list(page.holds))
        token = page.next_page_token
        if not token:
            return pages


async def refused(call: object) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call  # type: ignore[misc]
    return caught.value


async def test_in_doubt_holds_list_across_budgets_oldest_first(
    clocked: Running, clock: FakeClock
) -> None:
    """In-doubt holds on 3 budgets list oldest first across them, in pages of 2 to the
    end; the held one lists alone under HELD, and the expired one in neither."""
    doubted, held = await in_doubt_across(clocked, clock)
    pages = await every_page(clocked, pb.RESERVATION_STATE_IN_DOUBT, 2)
    listed = [h for page in pages for h in page]
    assert [2, 2, 1] == [len(page) for page in pages]
    assert doubted == [h.reservation_id for h in listed]
    assert list(MADE_ON) == [h.budget_id for h in listed]
    assert [h.created_at.ToDatetime() for h in listed] == sorted(
        h.created_at.ToDatetime() for h in listed
    )
    assert {pb.RESERVATION_STATE_IN_DOUBT} == {h.state for h in listed}
    assert [[held]] == [
        [h.reservation_id for h in page]
        for page in await every_page(clocked, pb.RESERVATION_STATE_HELD, 2)
    ]
    await assert_invariants(clocked.dsn)


async def test_across_budgets_a_state_is_required_and_open(sidecar: Running) -> None:
    """An empty budget_id without a state is refused naming budget_id; with a closed state
    it is refused naming state; a token that is not one this listing gave is refused."""
    empty = await refused(sidecar.admin.ListHolds(pb.ListHoldsRequest()))
    closed = await refused(
        sidecar.admin.ListHolds(pb.ListHoldsRequest(state=pb.RESERVATION_STATE_SETTLED))
    )
    forged = await refused(
        sidecar.admin.ListHolds(
            pb.ListHoldsRequest(state=pb.RESERVATION_STATE_IN_DOUBT, page_token="WyJhIl0")
        )
    )
    assert [grpc.StatusCode.INVALID_ARGUMENT] * 3 == [e.code() for e in (empty, closed, forged)]
    assert ["budget_id", "state", "page_token"] == [
        str(e.details()).split(":")[0] for e in (empty, closed, forged)
    ]


async def test_the_sdk_lists_across_budgets(clocked: Running, clock: FakeClock) -> None:
    """AsyncClient.list_holds and holds_page with no budget, and the synchronous Client's,
    list the in-doubt holds of every budget oldest first."""
    doubted, _ = await in_doubt_across(clocked, clock)
    async with AsyncClient(clocked.target, admin_target=clocked.admin_target) as client:
        listed = [
            h.reservation_id async for h in client.list_holds(state=HoldState.IN_DOUBT, page_size=2)
        ]
        first = await client.holds_page(state=HoldState.IN_DOUBT, page_size=3)

    def synced() -> list[str]:
        with Client(clocked.target, admin_target=clocked.admin_target) as sync:
            return [h.reservation_id for h in sync.list_holds(state=HoldState.IN_DOUBT)]

    assert doubted == listed
    assert (doubted[:3], True) == (
        [h.reservation_id for h in first.items],
        bool(first.next_page_token),
    )
    assert doubted == await asyncio.to_thread(synced)
    await assert_invariants(clocked.dsn)
