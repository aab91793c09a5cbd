"""Reserve, Charge, Renew and Settle end to end over real gRPC and PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.helpers import FakeClock, assert_invariants, charge_or_renew_error


async def put(s: Running, budget_id: str = "acme/tokens", limit: int | None = 100_000) -> None:
    request = pb.PutBudgetRequest(budget_id=budget_id, unit="tokens")
    if limit is not None:
        request.limit = limit
    await s.admin.PutBudget(request)


async def reserve(
    s: Running, amount: int, key: str | None = None, budget_id: str = "acme/tokens", **kw: Any
) -> pb.ReserveResponse:
    return await s.budget.Reserve(
        pb.ReserveRequest(
            budget_id=budget_id, amount=amount, idempotency_key=key or uuid.uuid4().hex, **kw
        )
    )


async def state(s: Running, budget_id: str = "acme/tokens") -> pb.BudgetState:
    return await s.admin.GetBudget(pb.GetBudgetRequest(budget_id=budget_id))


async def test_reserve_admits_and_holds(sidecar: Running) -> None:
    """An admitted Reserve holds its amount and reports what is left."""
    await put(sidecar)
    reply = await reserve(sidecar, 40_000)
    assert reply.admitted
    assert 60_000 == reply.remaining
    assert 40_000 == reply.amount
    assert reply.expires_at.seconds > 0
    uuid.UUID(reply.reservation_id)
    budget = await state(sidecar)
    assert (40_000, 0, 60_000, 1) == (
        budget.held,
        budget.used,
        budget.remaining,
        budget.open_reservations,
    )
    await assert_invariants(sidecar.dsn)


async def test_refusal_is_a_normal_answer(sidecar: Running) -> None:
    """A Reserve that does not fit is refused with the reason and what is left, holding nothing."""
    await put(sidecar)
    await reserve(sidecar, 80_000)
    reply = await reserve(sidecar, 40_000)
    assert not reply.admitted
    assert pb.REFUSAL_REASON_INSUFFICIENT_BUDGET == reply.reason
    assert 20_000 == reply.remaining
    assert "needs 40000, 20000 left" == reply.message
    assert "" == reply.reservation_id
    assert 80_000 == (await state(sidecar)).held
    await assert_invariants(sidecar.dsn)


async def test_unlimited_budget_admits_without_remaining(sidecar: Running) -> None:
    """A budget without a limit admits everything and reports no remaining."""
    await put(sidecar, limit=None)
    reply = await reserve(sidecar, 10**12)
    assert reply.admitted
    assert not reply.HasField("remaining")
    assert not (await state(sidecar)).HasField("remaining")


async def test_same_key_returns_same_reservation(sidecar: Running) -> None:
    """A repeated idempotency key returns the first reservation and holds nothing new."""
    await put(sidecar)
    first = await reserve(sidecar, 30_000, key="job-1")
    again = await reserve(sidecar, 30_000, key="job-1")
    assert first.reservation_id == again.reservation_id
    assert 30_000 == (await state(sidecar)).held


async def test_same_key_other_amount_is_already_exists(sidecar: Running) -> None:
    """The same key with a different amount is ALREADY_EXISTS and changes nothing."""
    await put(sidecar)
    await reserve(sidecar, 30_000, key="job-1")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await reserve(sidecar, 31_000, key="job-1")
    assert grpc.StatusCode.ALREADY_EXISTS == caught.value.code()
    assert "idempotency_key" in (caught.value.details() or "")
    assert 30_000 == (await state(sidecar)).held


async def test_charge_caps_at_the_hold(sidecar: Running) -> None:
    """Charges debit the hold, and the one that would pass it is capped at what is left."""
    await put(sidecar)
    rid = (await reserve(sidecar, 10_000)).reservation_id
    first = await sidecar.budget.Charge(
        pb.ChargeRequest(reservation_id=rid, amount=6_000, idempotency_key="s1")
    )
    assert (6_000, False, 6_000, 4_000) == (
        first.charged,
        first.capped,
        first.total_charged,
        first.hold_remaining,
    )
    second = await sidecar.budget.Charge(
        pb.ChargeRequest(reservation_id=rid, amount=6_000, idempotency_key="s2")
    )
    assert (4_000, True, 10_000, 0) == (
        second.charged,
        second.capped,
        second.total_charged,
        second.hold_remaining,
    )
    budget = await state(sidecar)
    assert (10_000, 0) == (budget.used, budget.held)
    await assert_invariants(sidecar.dsn)


async def test_retried_charge_charges_once(sidecar: Running) -> None:
    """A Charge retried with the same key charges once and answers the same."""
    await put(sidecar)
    rid = (await reserve(sidecar, 10_000)).reservation_id
    request = pb.ChargeRequest(reservation_id=rid, amount=3_000, idempotency_key="step-1")
    replies = await asyncio.gather(*[sidecar.budget.Charge(request) for _ in range(5)])
    assert {(3_000, 3_000)} == {(r.charged, r.total_charged) for r in replies}
    assert 3_000 == (await state(sidecar)).used
    await assert_invariants(sidecar.dsn)


async def test_charge_renews_the_lease(clocked: Running, clock: FakeClock) -> None:
    """A Charge pushes the lease out by the hold's lease length."""
    sidecar = clocked
    await put(sidecar)
    reply = await reserve(sidecar, 10_000, lease=Duration(seconds=5))
    clock.advance(timedelta(seconds=1.1))
    charged = await sidecar.budget.Charge(
        pb.ChargeRequest(reservation_id=reply.reservation_id, amount=1, idempotency_key="a")
    )
    assert charged.expires_at.ToDatetime() > reply.expires_at.ToDatetime()


async def test_renew_extends_the_lease(sidecar: Running) -> None:
    """Renew moves expires_at to now + lease."""
    await put(sidecar)
    reply = await reserve(sidecar, 10_000, lease=Duration(seconds=5))
    renewed = await sidecar.budget.Renew(
        pb.RenewRequest(reservation_id=reply.reservation_id, lease=Duration(seconds=600))
    )
    gained = renewed.expires_at.ToDatetime() - reply.expires_at.ToDatetime()
    assert gained.total_seconds() > 590


async def test_settle_returns_the_rest(sidecar: Running) -> None:
    """Settle charges what was used and returns the rest of the hold."""
    await put(sidecar)
    rid = (await reserve(sidecar, 40_000)).reservation_id
    reply = await sidecar.budget.Settle(
        pb.SettleRequest(reservation_id=rid, used=31_200, outcome=pb.OUTCOME_SUCCEEDED)
    )
    assert (31_200, 8_800, 0, pb.RESERVATION_STATE_SETTLED) == (
        reply.charged,
        reply.released,
        reply.overshoot,
        reply.state,
    )
    budget = await state(sidecar)
    assert (31_200, 0, 68_800, 0) == (
        budget.used,
        budget.held,
        budget.remaining,
        budget.open_reservations,
    )
    await assert_invariants(sidecar.dsn)


async def test_settle_after_charges(sidecar: Running) -> None:
    """Settle counts used as the job's total, including what Charge already debited."""
    await put(sidecar)
    rid = (await reserve(sidecar, 10_000)).reservation_id
    await sidecar.budget.Charge(
        pb.ChargeRequest(reservation_id=rid, amount=4_000, idempotency_key="s1")
    )
    reply = await sidecar.budget.Settle(
        pb.SettleRequest(reservation_id=rid, used=5_000, outcome=pb.OUTCOME_SUCCEEDED)
    )
    assert (5_000, 5_000, 0) == (reply.charged, reply.released, reply.overshoot)
    budget = await state(sidecar)
    assert (5_000, 0) == (budget.used, budget.held)
    await assert_invariants(sidecar.dsn)


async def test_settle_zero_returns_whole_hold(sidecar: Running) -> None:
    """A failed job that used nothing gets its whole hold back."""
    await put(sidecar)
    rid = (await reserve(sidecar, 10_000)).reservation_id
    reply = await sidecar.budget.Settle(
        pb.SettleRequest(reservation_id=rid, used=0, outcome=pb.OUTCOME_FAILED)
    )
    assert (0, 10_000) == (reply.charged, reply.released)
    assert 100_000 == (await state(sidecar)).remaining


async def test_settle_twice_answers_the_same(sidecar: Running) -> None:
    """A second Settle changes nothing and answers the same."""
    await put(sidecar)
    rid = (await reserve(sidecar, 10_000)).reservation_id
    request = pb.SettleRequest(reservation_id=rid, used=7_000, outcome=pb.OUTCOME_SUCCEEDED)
    first = await sidecar.budget.Settle(request)
    second = await sidecar.budget.Settle(request)
    assert first == second
    assert 7_000 == (await state(sidecar)).used
    await assert_invariants(sidecar.dsn)


async def test_settle_again_with_other_usage_is_refused(sidecar: Running) -> None:
    """A Settle that contradicts the recorded one is FAILED_PRECONDITION and changes nothing."""
    await put(sidecar)
    rid = (await reserve(sidecar, 10_000)).reservation_id
    await sidecar.budget.Settle(pb.SettleRequest(reservation_id=rid, used=7_000))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await sidecar.budget.Settle(pb.SettleRequest(reservation_id=rid, used=8_000))
    assert grpc.StatusCode.FAILED_PRECONDITION == caught.value.code()
    assert 7_000 == (await state(sidecar)).used


async def test_overshoot_is_charged_in_full(sidecar: Running) -> None:
    """A job that ran past its hold is charged what it used and the overshoot is reported."""
    await put(sidecar)
    rid = (await reserve(sidecar, 10_000)).reservation_id
    reply = await sidecar.budget.Settle(
        pb.SettleRequest(reservation_id=rid, used=15_000, outcome=pb.OUTCOME_SUCCEEDED)
    )
    assert (15_000, 0, 5_000) == (reply.charged, reply.released, reply.overshoot)
    budget = await state(sidecar)
    assert (15_000, 0, 85_000) == (budget.used, budget.held, budget.remaining)
    await assert_invariants(sidecar.dsn)


@pytest.mark.parametrize("rpc", ["charge", "renew"])
async def test_closed_hold_is_failed_precondition(sidecar: Running, rpc: str) -> None:
    """Charge or Renew on a settled hold is FAILED_PRECONDITION naming the state."""
    await put(sidecar)
    rid = (await reserve(sidecar, 10_000)).reservation_id
    await sidecar.budget.Settle(pb.SettleRequest(reservation_id=rid, used=1))
    error = await charge_or_renew_error(sidecar.budget, rpc, rid)
    assert grpc.StatusCode.FAILED_PRECONDITION == error.code()
    assert "SETTLED" in (error.details() or "")


async def test_new_limit_applies_to_next_reserve(sidecar: Running) -> None:
    """Lowering a limit keeps running holds and refuses the next Reserve that no longer fits."""
    await put(sidecar)
    await reserve(sidecar, 50_000)
    await put(sidecar, limit=60_000)
    budget = await state(sidecar)
    assert (60_000, 50_000, 10_000) == (budget.limit, budget.held, budget.remaining)
    assert not (await reserve(sidecar, 20_000)).admitted
    assert (await reserve(sidecar, 10_000)).admitted
