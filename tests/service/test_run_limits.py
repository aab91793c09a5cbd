"""Run limits (issue 47) through a live sidecar on an injected clock and a real PostgreSQL:
max_admissions spent (over the budget's life, or per period), closes_at reached (no
admission from then on, while open holds settle as usual), max_open_holds, OBSERVE mode
saying what it would refuse, BudgetState's admissions, PutBudget's checks of the new fields
and UpdateBudget naming one of them."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.field_mask_pb2 import FieldMask

from earmark import limits
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.helpers import FakeClock, assert_invariants, fetch_budget_row
from tests.service.test_calls import stamp

# Noon UTC: a PERIOD_DAY budget's next period starts twelve hours on.
CLOCK_START = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
# The longest lease: no hold lapses within the 10 minutes a run test moves its clock.
LONG = Duration(seconds=3600)


async def put(side: Running, budget_id: str, limit: int = 10_000, **fields: Any) -> pb.BudgetState:
    request = pb.PutBudgetRequest(budget_id=budget_id, limit=limit, unit="tokens", **fields)
    state: pb.BudgetState = await side.admin.PutBudget(request)
    return state


async def hold(side: Running, budget_id: str, amount: int = 100) -> pb.ReserveResponse:
    request = pb.ReserveRequest(
        budget_id=budget_id, amount=amount, idempotency_key=uuid.uuid4().hex, lease=LONG
    )
    reply: pb.ReserveResponse = await side.budget.Reserve(request)
    return reply


async def read(side: Running, budget_id: str) -> pb.BudgetState:
    state: pb.BudgetState = await side.admin.GetBudget(pb.GetBudgetRequest(budget_id=budget_id))
    return state


async def settle(side: Running, reservation_id: str, used: int) -> pb.SettleResponse:
    reply: pb.SettleResponse = await side.budget.Settle(
        pb.SettleRequest(reservation_id=reservation_id, used=used, outcome=pb.OUTCOME_SUCCEEDED)
    )
    return reply


async def test_a_run_admits_its_admissions_then_closes_and_its_holds_settle(
    clocked: Running, clock: FakeClock
) -> None:
    """A run of max_admissions 5 closing in 10 minutes admits 5 and refuses the 6th
    ADMISSIONS_SPENT, naming the count; BudgetState shows the limits and the admissions.
    Past closes_at every Reserve is refused CLOSED (on this run and on one with admissions
    left), while an open hold still settles and is charged as usual."""
    closes = CLOCK_START + timedelta(minutes=10)
    put_state = await put(clocked, "run", max_admissions=5, closes_at=stamp(closes))
    await put(clocked, "fresh", closes_at=stamp(closes))
    admitted = [await hold(clocked, "run") for _ in range(5)]
    sixth = await hold(clocked, "run")
    state = await read(clocked, "run")
    assert [True] * 5 == [r.admitted for r in admitted]
    assert (False, pb.REFUSAL_REASON_ADMISSIONS_SPENT, "run") == (
        sixth.admitted,
        sixth.reason,
        sixth.refused_budget_id,
    )
    assert "admitted 5 Reserves" in sixth.message
    assert "max_admissions is 5" in sixth.message
    assert (5, 5, closes, 5, 500) == (
        put_state.max_admissions,
        state.max_admissions,
        state.closes_at.ToDatetime(tzinfo=UTC),
        state.admissions,
        state.held,
    )
    assert not state.HasField("max_open_holds")
    clock.set(closes)
    closed = [await hold(clocked, "run"), await hold(clocked, "fresh", 1)]
    settled = await settle(clocked, admitted[0].reservation_id, 80)
    charged = await clocked.budget.Charge(
        pb.ChargeRequest(reservation_id=admitted[1].reservation_id, amount=30, idempotency_key="c1")
    )
    after = await read(clocked, "run")
    assert [(False, pb.REFUSAL_REASON_CLOSED)] * 2 == [(r.admitted, r.reason) for r in closed]
    assert f"it closed at {closes.isoformat()}" in closed[0].message
    assert (80, 20, 0) == (settled.charged, settled.released, settled.overshoot)
    assert 30 == charged.charged
    assert (110, 370, 4, 5) == (after.used, after.held, after.open_reservations, after.admissions)
    await assert_invariants(clocked.dsn)


async def test_admissions_count_again_in_the_next_period(
    clocked: Running, clock: FakeClock
) -> None:
    """With PERIOD_DAY, max_admissions 2 is per day: the 3rd of the day is refused, naming
    the period; after midnight the count starts again at 0 and the day admits 2 more."""
    await put(clocked, "daily", period=pb.PERIOD_DAY, max_admissions=2)
    first_day = [await hold(clocked, "daily") for _ in range(3)]
    before = await read(clocked, "daily")
    clock.set(datetime(2026, 12, 2, 0, 1, tzinfo=UTC))
    fresh = await read(clocked, "daily")
    next_day = [await hold(clocked, "daily") for _ in range(3)]
    after = await read(clocked, "daily")
    told = [(r.admitted, r.reason) for r in (*first_day, *next_day)]
    admitted = (True, pb.REFUSAL_REASON_UNSPECIFIED)
    spent = (False, pb.REFUSAL_REASON_ADMISSIONS_SPENT)
    assert [admitted, admitted, spent] * 2 == told
    assert "this period" in first_day[2].message
    assert (2, 0, 2) == (before.admissions, fresh.admissions, after.admissions)
    await assert_invariants(clocked.dsn)


async def test_max_open_holds_counts_the_holds_open_now(clocked: Running) -> None:
    """max_open_holds 2 refuses a 3rd open hold TOO_MANY_OPEN, naming the count; once one
    settles, another is admitted."""
    await put(clocked, "open", max_open_holds=2)
    first, second, third = [await hold(clocked, "open") for _ in range(3)]
    await settle(clocked, first.reservation_id, 10)
    fourth = await hold(clocked, "open")
    assert (True, True, False, True) == (
        first.admitted,
        second.admitted,
        third.admitted,
        fourth.admitted,
    )
    assert pb.REFUSAL_REASON_TOO_MANY_OPEN == third.reason
    assert "it has 2 holds open; max_open_holds is 2" in third.message
    await assert_invariants(clocked.dsn)


async def test_observe_mode_admits_and_says_which_run_limit_would_refuse(
    clocked: Running,
) -> None:
    """An observing budget admits past each run limit and says would_refuse with the new
    reason: TOO_MANY_OPEN, ADMISSIONS_SPENT and CLOSED."""
    observe = {"mode": pb.BUDGET_MODE_OBSERVE}
    await put(clocked, "o-open", max_open_holds=1, **observe)
    await put(clocked, "o-spent", max_admissions=1, **observe)
    await put(clocked, "o-closed", closes_at=stamp(CLOCK_START), **observe)
    told = []
    for budget_id in ("o-open", "o-spent"):
        await hold(clocked, budget_id)
        told.append(await hold(clocked, budget_id))
    told.append(await hold(clocked, "o-closed"))
    assert [
        (True, True, pb.REFUSAL_REASON_TOO_MANY_OPEN),
        (True, True, pb.REFUSAL_REASON_ADMISSIONS_SPENT),
        (True, True, pb.REFUSAL_REASON_CLOSED),
    ] == [(r.admitted, r.would_refuse, r.would_refuse_reason) for r in told]
    assert (2, 2) == (
        (await read(clocked, "o-open")).open_reservations,
        (await read(clocked, "o-spent")).admissions,
    )
    await assert_invariants(clocked.dsn)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_open_holds", -1),
        ("max_open_holds", limits.open_holds_max + 1),
        ("max_admissions", -1),
        ("max_admissions", limits.amount_units_max + 1),
    ],
)
async def test_put_budget_checks_the_run_limits(clocked: Running, field: str, value: int) -> None:
    """A run limit below 0 or past its bound is INVALID_ARGUMENT naming the field, and
    nothing is put; at the bound it is put."""
    with pytest.raises(grpc.RpcError) as refused:
        await put(clocked, "checked", **{field: value})
    bound = limits.open_holds_max if field == "max_open_holds" else limits.amount_units_max
    at_bound = await put(clocked, "bounded", **{field: bound})
    assert grpc.StatusCode.INVALID_ARGUMENT == refused.value.code()
    assert field in (refused.value.details() or "")
    assert bound == getattr(at_bound, field)
    with pytest.raises(grpc.RpcError) as missing:
        await read(clocked, "checked")
    assert grpc.StatusCode.NOT_FOUND == missing.value.code()


async def test_update_budget_names_max_open_holds(clocked: Running) -> None:
    """An UpdateBudget whose update_mask names max_open_holds sets it and keeps the rest
    (the limit, the period, max_admissions); naming it unset clears it."""
    await put(clocked, "u", limit=5_000, period=pb.PERIOD_DAY, max_admissions=100)
    await hold(clocked, "u")
    update = pb.UpdateBudgetRequest(
        budget=pb.PutBudgetRequest(budget_id="u", limit=1, max_open_holds=1),
        update_mask=FieldMask(paths=["max_open_holds"]),
    )
    updated = await clocked.admin.UpdateBudget(update)
    refused = await hold(clocked, "u")
    cleared = await clocked.admin.UpdateBudget(
        pb.UpdateBudgetRequest(
            budget=pb.PutBudgetRequest(budget_id="u"),
            update_mask=FieldMask(paths=["max_open_holds"]),
        )
    )
    admitted = await hold(clocked, "u")
    assert (1, 5_000, pb.PERIOD_DAY, 100) == (
        updated.max_open_holds,
        updated.limit,
        updated.period,
        updated.max_admissions,
    )
    assert (False, pb.REFUSAL_REASON_TOO_MANY_OPEN) == (refused.admitted, refused.reason)
    assert (False, 100, True) == (
        cleared.HasField("max_open_holds"),
        cleared.max_admissions,
        admitted.admitted,
    )
    row = await fetch_budget_row(clocked.dsn, "u")
    assert (2, None) == (row["open_reservations"], row["max_open_holds"])
    await assert_invariants(clocked.dsn)
