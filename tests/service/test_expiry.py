"""Leases, the sweeper and late settles, against a live sidecar and a real database, on
an injected clock: a lease passes when the test moves the clock, never by waiting."""

from __future__ import annotations

import uuid
from datetime import timedelta

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.helpers import (
    FakeClock,
    assert_invariants,
    charge_or_renew_error,
    eventually,
    fetch_budget_row,
)


@pytest.fixture
def sidecar(clocked: Running) -> Running:
    """Every test here runs on the test's clock (the sweeper still runs every 0.2 s)."""
    return clocked


async def held_for(s: Running, amount: int, lease_seconds: int = 1) -> str:
    await s.admin.PutBudget(pb.PutBudgetRequest(budget_id="acme/tokens", limit=100_000, unit="t"))
    reply = await s.budget.Reserve(
        pb.ReserveRequest(
            budget_id="acme/tokens",
            amount=amount,
            idempotency_key=uuid.uuid4().hex,
            lease=Duration(seconds=lease_seconds),
        )
    )
    assert reply.admitted
    return reply.reservation_id


async def swept(s: Running) -> bool:
    return 0 == (await fetch_budget_row(s.dsn, "acme/tokens"))["open_reservations"]


async def test_sweeper_returns_a_dead_workers_hold(sidecar: Running, clock: FakeClock) -> None:
    """An undispatched hold whose lease passed is closed by the sweeper: all of it returns."""
    await held_for(sidecar, 10_000)
    clock.advance(timedelta(seconds=2))
    await eventually(lambda: swept(sidecar), within_seconds=10, what="the hold swept")
    row = await fetch_budget_row(sidecar.dsn, "acme/tokens")
    assert (0, 0) == (row["used"], row["held"])
    await assert_invariants(sidecar.dsn)


async def released_after_doubt(s: Running, clock: FakeClock, charged: int) -> str:
    """A hold charged `charged`, left to go into doubt, then released by an operator: an
    EXPIRED hold that keeps its charges."""
    rid = await held_for(s, 10_000)
    await s.budget.Charge(
        pb.ChargeRequest(reservation_id=rid, amount=charged, idempotency_key="s1")
    )
    clock.advance(timedelta(seconds=2))

    async def in_doubt() -> bool:
        page = await s.admin.ListHolds(
            pb.ListHoldsRequest(budget_id="acme/tokens", state=pb.RESERVATION_STATE_IN_DOUBT)
        )
        return 1 == len(page.holds)

    await eventually(in_doubt, within_seconds=10, what="the charged hold in doubt")
    released = await s.admin.ReleaseHold(pb.ReleaseHoldRequest(reservation_id=rid))
    assert (charged, 10_000 - charged) == (released.charged, released.released)
    return rid


async def test_late_settle_after_the_sweeper(sidecar: Running, clock: FakeClock) -> None:
    """A Settle after the hold was closed (released by an operator once in doubt) answers
    EXPIRED, charges the spend beyond what was charged, and returns nothing a second time."""
    rid = await released_after_doubt(sidecar, clock, 3_000)
    reply = await sidecar.budget.Settle(
        pb.SettleRequest(reservation_id=rid, used=4_500, outcome=pb.OUTCOME_SUCCEEDED)
    )
    assert (pb.RESERVATION_STATE_EXPIRED, 4_500, 0, 0) == (
        reply.state,
        reply.charged,
        reply.released,
        reply.overshoot,
    )
    again = await sidecar.budget.Settle(
        pb.SettleRequest(reservation_id=rid, used=4_500, outcome=pb.OUTCOME_SUCCEEDED)
    )
    assert reply == again
    row = await fetch_budget_row(sidecar.dsn, "acme/tokens")
    assert (4_500, 0) == (row["used"], row["held"])
    await assert_invariants(sidecar.dsn)


async def test_late_settle_below_charges_changes_nothing(
    sidecar: Running, clock: FakeClock
) -> None:
    """A late Settle reporting less than was charged keeps the charges and returns nothing."""
    rid = await released_after_doubt(sidecar, clock, 3_000)
    reply = await sidecar.budget.Settle(pb.SettleRequest(reservation_id=rid, used=1_000))
    assert (3_000, 0) == (reply.charged, reply.released)
    assert 3_000 == (await fetch_budget_row(sidecar.dsn, "acme/tokens"))["used"]
    await assert_invariants(sidecar.dsn)


@pytest.mark.parametrize("rpc", ["charge", "renew"])
async def test_passed_lease_is_expired_before_the_sweeper(
    sidecar: Running, clock: FakeClock, rpc: str
) -> None:
    """Charge or Renew after the lease passed finds the hold EXPIRED even if no sweep ran."""
    await sidecar.sidecar.stop_sweeper()
    rid = await held_for(sidecar, 10_000)
    clock.advance(timedelta(seconds=1.2))
    error = await charge_or_renew_error(sidecar.budget, rpc, rid)
    assert grpc.StatusCode.FAILED_PRECONDITION == error.code()
    assert "EXPIRED" in (error.details() or "")
    row = await fetch_budget_row(sidecar.dsn, "acme/tokens")
    assert (0, 0) == (row["held"], row["open_reservations"])
    await assert_invariants(sidecar.dsn)


async def test_renewed_hold_outlives_its_first_lease(sidecar: Running, clock: FakeClock) -> None:
    """A worker that renews keeps its hold past several lease lengths."""
    rid = await held_for(sidecar, 10_000)
    # Renewing every 0.3 s keeps a 1 s lease alive for 2.4 s.
    for _ in range(8):
        clock.advance(timedelta(seconds=0.3))
        await sidecar.budget.Renew(pb.RenewRequest(reservation_id=rid, lease=Duration(seconds=1)))
    row = await fetch_budget_row(sidecar.dsn, "acme/tokens")
    assert (10_000, 1) == (row["held"], row["open_reservations"])
