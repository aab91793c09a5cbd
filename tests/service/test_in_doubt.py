"""In-doubt holds on the test clock: a dispatched hold whose lease passes stays held until
the worker settles it late or an operator resolves or releases it."""

from __future__ import annotations

import uuid
from datetime import timedelta

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.helpers import FakeClock, assert_invariants, eventually, scrape

LEASE = Duration(seconds=10)


@pytest.fixture
async def clocked(clocked: Running) -> Running:
    """conftest's sidecar on the test clock, with the budget "d" every test here uses."""
    await clocked.admin.PutBudget(pb.PutBudgetRequest(budget_id="d", limit=100_000, unit="t"))
    return clocked


async def hold(s: Running, amount: int, charge: int = 0) -> str:
    reply = await s.budget.Reserve(
        pb.ReserveRequest(
            budget_id="d", amount=amount, idempotency_key=uuid.uuid4().hex, lease=LEASE
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


async def states(s: Running) -> dict[str, int]:
    page = await s.admin.ListHolds(pb.ListHoldsRequest(budget_id="d"))
    return {h.reservation_id: h.state for h in page.holds}


async def lapse(s: Running, clock: FakeClock, *expected: tuple[str, int]) -> None:
    """Moves the clock past the leases and waits for the sweeper to give each its state."""
    clock.advance(timedelta(seconds=11))

    async def swept() -> bool:
        found = await states(s)
        return all(found.get(rid) == state for rid, state in expected)

    await eventually(swept, within_seconds=10, what="the sweeper's pass")


async def rpc_error(call: object) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call  # type: ignore[misc]
    return caught.value


async def test_the_sweeper_keeps_a_dispatched_hold_in_doubt(
    clocked: Running, clock: FakeClock
) -> None:
    """Past their leases, the undispatched hold expires and the dispatched one is IN_DOUBT,
    still held; Charge and Renew on it fail; the gauges count it and its age."""
    charged = await hold(clocked, 1_000, charge=100)
    idle = await hold(clocked, 2_000)
    await lapse(
        clocked,
        clock,
        (charged, pb.RESERVATION_STATE_IN_DOUBT),
        (idle, pb.RESERVATION_STATE_EXPIRED),
    )
    budget = await clocked.admin.GetBudget(pb.GetBudgetRequest(budget_id="d"))
    assert (900, 100, 1) == (budget.held, budget.used, budget.open_reservations)
    charge = await rpc_error(
        clocked.budget.Charge(
            pb.ChargeRequest(reservation_id=charged, amount=1, idempotency_key="again")
        )
    )
    renew = await rpc_error(clocked.budget.Renew(pb.RenewRequest(reservation_id=charged)))
    assert [grpc.StatusCode.FAILED_PRECONDITION] * 2 == [charge.code(), renew.code()]
    assert f"reservation {charged} is IN_DOUBT" == charge.details()
    clock.advance(timedelta(seconds=100))
    port = clocked.sidecar.metrics_port

    async def gauged() -> bool:
        samples = scrape(port)
        return (1.0, 101.0) == (
            samples.get(("earmark_in_doubt_holds", ())),
            samples.get(("earmark_in_doubt_oldest_seconds", ())),
        )

    await eventually(gauged, within_seconds=10, what="the in-doubt gauges")
    await assert_invariants(clocked.dsn)


async def test_a_late_settle_of_an_in_doubt_hold_counts_once(
    clocked: Running, clock: FakeClock
) -> None:
    """The worker's late Settle charges what it used and returns the rest; repeated, it
    answers the same and records nothing more."""
    charged = await hold(clocked, 1_000, charge=100)
    await lapse(clocked, clock, (charged, pb.RESERVATION_STATE_IN_DOUBT))
    request = pb.SettleRequest(reservation_id=charged, used=700, outcome=pb.OUTCOME_SUCCEEDED)
    first = await clocked.budget.Settle(request)
    again = await clocked.budget.Settle(request)
    assert (700, 300, pb.RESERVATION_STATE_SETTLED) == (first.charged, first.released, first.state)
    assert first == again
    ledger = await clocked.admin.ListLedger(pb.ListLedgerRequest(budget_id="d"))
    assert [
        ("hold", 1_000, 0),
        ("charge", -100, 100),
        ("in_doubt", 0, 0),
        ("settle", -900, 600),
    ] == [(e.kind, e.held_delta, e.used_delta) for e in ledger.entries]
    budget = await clocked.admin.GetBudget(pb.GetBudgetRequest(budget_id="d"))
    assert (0, 700, 0) == (budget.held, budget.used, budget.open_reservations)
    samples = scrape(clocked.sidecar.metrics_port)
    assert 1.0 == samples[("earmark_in_doubt_closed_total", (("how", "settle"),))]
    await assert_invariants(clocked.dsn)


async def test_an_operator_resolves_and_releases(clocked: Running, clock: FakeClock) -> None:
    """ResolveHold charges what the operator says of an in-doubt hold (once; a worker's
    Settle of another amount is then refused); ReleaseHold returns a held one; each refuses
    the wrong state by name."""
    doubted = await hold(clocked, 1_000, charge=100)
    await lapse(clocked, clock, (doubted, pb.RESERVATION_STATE_IN_DOUBT))
    stuck = await hold(clocked, 3_000, charge=500)
    early = await rpc_error(
        clocked.admin.ResolveHold(pb.ResolveHoldRequest(reservation_id=stuck, used=1))
    )
    assert (grpc.StatusCode.FAILED_PRECONDITION, True) == (
        early.code(),
        "(ReleaseHold closes a HELD one)" in str(early.details()),
    )
    resolve = pb.ResolveHoldRequest(reservation_id=doubted, used=450)
    resolved = await clocked.admin.ResolveHold(resolve)
    assert resolved == await clocked.admin.ResolveHold(resolve)
    assert (450, 550, pb.RESERVATION_STATE_SETTLED) == (
        resolved.charged,
        resolved.released,
        resolved.state,
    )
    late = await rpc_error(
        clocked.budget.Settle(pb.SettleRequest(reservation_id=doubted, used=999))
    )
    assert grpc.StatusCode.FAILED_PRECONDITION == late.code()
    released = await clocked.admin.ReleaseHold(pb.ReleaseHoldRequest(reservation_id=stuck))
    assert (500, 2_500, pb.RESERVATION_STATE_EXPIRED) == (
        released.charged,
        released.released,
        released.state,
    )
    twice = await rpc_error(clocked.admin.ReleaseHold(pb.ReleaseHoldRequest(reservation_id=stuck)))
    assert grpc.StatusCode.FAILED_PRECONDITION == twice.code()
    missing = await rpc_error(
        clocked.admin.ReleaseHold(pb.ReleaseHoldRequest(reservation_id=str(uuid.uuid4())))
    )
    assert grpc.StatusCode.NOT_FOUND == missing.code()
    budget = await clocked.admin.GetBudget(pb.GetBudgetRequest(budget_id="d"))
    assert (0, 950, 0) == (budget.held, budget.used, budget.open_reservations)
    await assert_invariants(clocked.dsn)


async def test_an_unknown_outcome_keeps_the_hold_in_doubt_at_once(
    clocked: Running, clock: FakeClock
) -> None:
    """A Settle with OUTCOME_UNKNOWN and 2,000 used so far, well inside the lease: the hold is
    IN_DOUBT at once with 2,000 charged and the other 8,000 still held; said again it
    changes nothing; ResolveHold at what the provider billed (7,000) leaves the budget
    exact, and what moved on the budget equals what the ledger says moved."""
    rid = await hold(clocked, 10_000)
    unknown = pb.SettleRequest(reservation_id=rid, used=2_000, outcome=pb.OUTCOME_UNKNOWN)
    first = await clocked.budget.Settle(unknown)
    again = await clocked.budget.Settle(unknown)
    doubted = await clocked.admin.GetBudget(pb.GetBudgetRequest(budget_id="d"))
    found = await states(clocked)
    assert (pb.RESERVATION_STATE_IN_DOUBT, 2_000, 0) == (first.state, first.charged, first.released)
    assert (pb.RESERVATION_STATE_IN_DOUBT, 2_000) == (again.state, again.charged)
    assert (8_000, 2_000, 1) == (doubted.held, doubted.used, doubted.open_reservations)
    assert {rid: pb.RESERVATION_STATE_IN_DOUBT} == found
    resolved = await clocked.admin.ResolveHold(
        pb.ResolveHoldRequest(reservation_id=rid, used=7_000)
    )
    after = await clocked.admin.GetBudget(pb.GetBudgetRequest(budget_id="d"))
    ledger = await clocked.admin.ListLedger(pb.ListLedgerRequest(budget_id="d"))
    assert (7_000, 3_000) == (resolved.charged, resolved.released)
    assert (0, 7_000, 0) == (after.held, after.used, after.open_reservations)
    assert (after.used, after.held) == (
        sum(e.used_delta for e in ledger.entries),
        sum(e.held_delta for e in ledger.entries),
    )
    await assert_invariants(clocked.dsn)


async def test_a_later_settle_closes_an_unknown_outcome(clocked: Running) -> None:
    """After OUTCOME_UNKNOWN, the worker learns the truth and settles SUCCEEDED at 3,500: the
    hold closes there, as a late answer closes any in-doubt hold."""
    rid = await hold(clocked, 10_000, charge=1_000)
    await clocked.budget.Settle(
        pb.SettleRequest(reservation_id=rid, used=1_000, outcome=pb.OUTCOME_UNKNOWN)
    )
    settled = await clocked.budget.Settle(
        pb.SettleRequest(reservation_id=rid, used=3_500, outcome=pb.OUTCOME_SUCCEEDED)
    )
    after = await clocked.admin.GetBudget(pb.GetBudgetRequest(budget_id="d"))
    assert (pb.RESERVATION_STATE_SETTLED, 3_500, 6_500) == (
        settled.state,
        settled.charged,
        settled.released,
    )
    assert (0, 3_500) == (after.held, after.used)
    await assert_invariants(clocked.dsn)
