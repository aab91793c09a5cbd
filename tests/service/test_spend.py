"""Admin's GetSpend over gRPC: a budget's spend by model, job and UTC day, through the
stubs and the SDK alike; bad input is refused naming its field and changes nothing. And
ListHolds tells a hold an operator released from one whose lease lapsed."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from earmark import limits
from earmark.client import AsyncClient
from earmark.client.admin import Spend, SpendRow
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.helpers import FakeClock, assert_invariants, eventually, reason_of
from tests.service.test_calls import call, cost, price

# The prompt of 1,000 tokens the call is charged at once, then its 200 output tokens.
CALL_COST = cost(1_000, 200)


def stamp(at: datetime) -> Timestamp:
    result = Timestamp()
    result.FromDatetime(at)
    return result


async def spent(side: Running, clock: FakeClock) -> dict[str, str]:
    """On budget team (usd_micros) on day 1 (2026-12-01): a call to openai/gpt-5 settled by
    its usage, and a hold of job etl settled at 20,000; on day 2: a hold of job etl
    charged 4,000, put in doubt and released by an operator, and one whose lease lapsed
    and which the sweeper has returned."""
    await side.admin.PutPrice(price(effective_from=stamp(clock() - timedelta(days=1))))
    await side.admin.PutBudget(
        pb.PutBudgetRequest(budget_id="team", limit=10_000_000, unit="usd_micros")
    )
    sent = await side.budget.Reserve(call("team", "call", 200))
    usage = pb.TokenUsage(input_tokens=1_000, output_tokens=200)
    await side.budget.Settle(pb.SettleRequest(reservation_id=sent.reservation_id, usage=usage))
    etl = await side.budget.Reserve(
        pb.ReserveRequest(budget_id="team", amount=30_000, idempotency_key="etl", job="etl")
    )
    await side.budget.Settle(pb.SettleRequest(reservation_id=etl.reservation_id, used=20_000))
    clock.advance(timedelta(hours=13))
    doubt = await side.budget.Reserve(
        pb.ReserveRequest(budget_id="team", amount=10_000, idempotency_key="doubt", job="etl")
    )
    await side.budget.Settle(
        pb.SettleRequest(
            reservation_id=doubt.reservation_id, used=4_000, outcome=pb.OUTCOME_UNKNOWN
        )
    )
    await side.admin.ReleaseHold(pb.ReleaseHoldRequest(reservation_id=doubt.reservation_id))
    lapsed = await side.budget.Reserve(
        pb.ReserveRequest(
            budget_id="team", amount=1_000, idempotency_key="lapse", lease=Duration(seconds=5)
        )
    )
    clock.advance(timedelta(seconds=10))

    # The sweeper runs on its own schedule: a test that compares two reads must not see
    # it return the lapsed hold between them, so the setup ends once it has.
    async def expired() -> bool:
        holds = await side.admin.ListHolds(pb.ListHoldsRequest(budget_id="team"))
        states = {h.reservation_id: h.state for h in holds.holds}
        return pb.RESERVATION_STATE_EXPIRED == states[lapsed.reservation_id]

    await eventually(expired, within_seconds=10, what="the sweeper expires the lapsed hold")
    return {
        "call": sent.reservation_id,
        "etl": etl.reservation_id,
        "released": doubt.reservation_id,
        "lapsed": lapsed.reservation_id,
    }


def by(group: int, **fields: Any) -> pb.GetSpendRequest:
    values: dict[str, Any] = {"budget_id": "team", "group_by": group}
    values.update(fields)
    return pb.GetSpendRequest(**values)


async def test_spend_by_model_job_and_day(clocked: Running, clock: FakeClock) -> None:
    """By model the call's openai/gpt-5 and "" for the holds that named none; by job etl
    and ""; by day the newest first; each sums to the budget's used; the SDK answers the
    same as the stubs, and a range in time keeps only its entries."""
    await spent(clocked, clock)
    state = await clocked.admin.GetBudget(pb.GetBudgetRequest(budget_id="team"))
    models = await clocked.admin.GetSpend(by(pb.SPEND_GROUP_MODEL))
    jobs = await clocked.admin.GetSpend(by(pb.SPEND_GROUP_JOB))
    days = await clocked.admin.GetSpend(by(pb.SPEND_GROUP_DAY))
    midnight = datetime.fromisoformat("2026-12-02T00:00:00+00:00")
    async with AsyncClient(clocked.target, admin_target=clocked.admin_target) as client:
        sdk = await client.get_spend("team", "day")
        late = await client.get_spend("team", "job", since=midnight, max_rows=5)
    assert CALL_COST + 24_000 == state.used
    assert [("", 24_000, 2), ("openai/gpt-5", CALL_COST, 1)] == [
        (r.key, r.used, r.holds) for r in models.rows
    ]
    assert [("etl", 24_000, 2), ("", CALL_COST, 1)] == [(r.key, r.used, r.holds) for r in jobs.rows]
    assert [("2026-12-02", 4_000, 1), ("2026-12-01", CALL_COST + 20_000, 2)] == [
        (r.key, r.used, r.holds) for r in days.rows
    ]
    assert [(state.used, 2, "usd_micros")] * 3 == [
        (s.used, s.groups, s.unit) for s in (models, jobs, days)
    ]
    rows = [SpendRow(r.key, r.used, r.holds) for r in days.rows]
    assert Spend("usd_micros", rows, state.used, 2) == sdk
    assert Spend("usd_micros", [SpendRow("etl", 4_000, 1)], 4_000, 1) == late
    await assert_invariants(clocked.dsn)


async def test_list_holds_says_which_hold_an_operator_released(
    clocked: Running, clock: FakeClock
) -> None:
    """The released hold and the lapsed one are both EXPIRED; only the released one says
    released, through the stubs and the SDK."""
    made = await spent(clocked, clock)
    listed = await clocked.admin.ListHolds(pb.ListHoldsRequest(budget_id="team"))
    async with AsyncClient(clocked.target, admin_target=clocked.admin_target) as client:
        records = [h async for h in client.list_holds("team")]
    names = {rid: name for name, rid in made.items()}
    assert {
        "call": (pb.RESERVATION_STATE_SETTLED, False),
        "etl": (pb.RESERVATION_STATE_SETTLED, False),
        "released": (pb.RESERVATION_STATE_EXPIRED, True),
        "lapsed": (pb.RESERVATION_STATE_EXPIRED, False),
    } == {names[h.reservation_id]: (h.state, h.released) for h in listed.holds}
    assert {made["released"]} == {h.reservation_id for h in records if h.released}
    await assert_invariants(clocked.dsn)


BAD: list[tuple[str, pb.GetSpendRequest]] = [
    ("budget_id", pb.GetSpendRequest(group_by=pb.SPEND_GROUP_DAY)),
    ("budget_id", by(pb.SPEND_GROUP_DAY, budget_id="has space")),
    ("group_by", by(pb.SPEND_GROUP_UNSPECIFIED)),
    ("group_by", by(9)),
    ("since", by(pb.SPEND_GROUP_DAY, since=Timestamp(seconds=-(10**12)))),
    ("until", by(pb.SPEND_GROUP_DAY, until=Timestamp(seconds=5, nanos=-1))),
    ("until", by(pb.SPEND_GROUP_DAY, since=Timestamp(seconds=100), until=Timestamp(seconds=100))),
    ("max_rows", by(pb.SPEND_GROUP_DAY, max_rows=-1)),
    ("max_rows", by(pb.SPEND_GROUP_DAY, max_rows=limits.spend_rows_max + 1)),
]


async def test_bad_input_names_its_field_and_changes_nothing(
    clocked: Running, clock: FakeClock
) -> None:
    """Each malformed field is INVALID_ARGUMENT naming it; an unknown budget is NOT_FOUND;
    the budget is as it was."""
    await spent(clocked, clock)
    before = await clocked.admin.GetBudget(pb.GetBudgetRequest(budget_id="team"))
    refused: list[tuple[grpc.StatusCode, str, dict[str, str]]] = []
    for _, request in BAD:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await clocked.admin.GetSpend(request)
        refused.append((caught.value.code(), *reason_of(caught.value)))
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await clocked.admin.GetSpend(by(pb.SPEND_GROUP_DAY, budget_id="nobody"))
    after = await clocked.admin.GetBudget(pb.GetBudgetRequest(budget_id="team"))
    assert [
        (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD", {"field": field}) for field, _ in BAD
    ] == refused
    assert (grpc.StatusCode.NOT_FOUND, "BUDGET_NOT_FOUND") == (
        missing.value.code(),
        reason_of(missing.value)[0],
    )
    assert before == after
    await assert_invariants(clocked.dsn)
