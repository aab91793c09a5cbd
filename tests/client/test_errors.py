"""Machine-readable errors: every failed call carries a google.rpc.ErrorInfo with a stable
reason and the fields it concerns, and the SDK raises one class per reason, all under
EarmarkClientError."""

from __future__ import annotations

import inspect
import re
from datetime import timedelta
from pathlib import Path

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

import earmark.client as sdk
from earmark.client import AsyncClient, Reason
from earmark.client.errors import ERROR_OF, ERROR_OF_REASON
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.helpers import FakeClock, assert_invariants, reason_of

ROOT = Path(__file__).resolve().parents[2]


async def test_each_failure_carries_its_reason_and_fields(
    clocked: Running, clock: FakeClock
) -> None:
    """A raw gRPC client reads the reason and fields with grpcio-status: invalid field,
    unknown budget and reservation, a reused key, a settle with another `used`, a locked
    unit, an expired hold."""
    admin, budget = clocked.admin, clocked.budget
    await admin.PutBudget(pb.PutBudgetRequest(budget_id="e", limit=1_000, unit="t"))
    held = await budget.Reserve(pb.ReserveRequest(budget_id="e", amount=100, idempotency_key="k"))
    rid = held.reservation_id
    await budget.Settle(pb.SettleRequest(reservation_id=rid, used=40))
    expired = await budget.Reserve(
        pb.ReserveRequest(budget_id="e", amount=10, idempotency_key="x", lease=Duration(seconds=5))
    )
    failing = [
        (budget.Reserve(pb.ReserveRequest(budget_id="e", amount=-1, idempotency_key="n")),
         grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD", {"field": "amount"}),
        (admin.GetBudget(pb.GetBudgetRequest(budget_id="nope")),
         grpc.StatusCode.NOT_FOUND, "BUDGET_NOT_FOUND",
         {"budget_id": "nope", "field": "budget_id"}),
        (budget.Settle(pb.SettleRequest(reservation_id="0" * 8 + "-0000-4000-8000-" + "0" * 12)),
         grpc.StatusCode.NOT_FOUND, "RESERVATION_NOT_FOUND",
         {"reservation_id": "00000000-0000-4000-8000-000000000000"}),
        (budget.Reserve(pb.ReserveRequest(budget_id="e", amount=101, idempotency_key="k")),
         grpc.StatusCode.ALREADY_EXISTS, "KEY_REUSED",
         {"field": "idempotency_key", "budget_id": "e"}),
        (budget.Settle(pb.SettleRequest(reservation_id=rid, used=41)),
         grpc.StatusCode.FAILED_PRECONDITION, "SETTLE_MISMATCH",
         {"reservation_id": rid, "settled_used": "40"}),
        (admin.PutBudget(pb.PutBudgetRequest(budget_id="e", limit=1_000, unit="usd_micros")),
         grpc.StatusCode.FAILED_PRECONDITION, "UNIT_LOCKED",
         {"field": "unit", "budget_id": "e", "unit": "t"}),
    ]  # fmt: skip
    for call, code, reason, about in failing:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call
        assert (code, reason, about) == (caught.value.code(), *reason_of(caught.value))
    clock.advance(timedelta(seconds=6))
    with pytest.raises(grpc.aio.AioRpcError) as lapsed:
        await budget.Charge(
            pb.ChargeRequest(reservation_id=expired.reservation_id, amount=1, idempotency_key="c")
        )
    assert (
        "HOLD_EXPIRED",
        {"reservation_id": expired.reservation_id, "state": "EXPIRED"},
    ) == reason_of(lapsed.value)
    state = await admin.GetBudget(pb.GetBudgetRequest(budget_id="e"))
    assert (40, 0) == (state.used, state.held)
    await assert_invariants(clocked.dsn)


async def test_the_sdk_raises_a_class_per_reason(clocked: Running) -> None:
    """The SDK turns reasons into exceptions a worker can catch by meaning, each under its
    status code's class and under EarmarkClientError, with the fields in `about`."""
    async with AsyncClient(clocked.target, admin_target=clocked.admin_target) as client:
        await client.put_budget("s", 1_000, "t")
        hold = await client.reserve("s", 100, idempotency_key="k", lease_seconds=5)
        assert isinstance(hold, sdk.Reservation)
        await client.settle(hold.reservation_id, 40)
        with pytest.raises(sdk.SettleMismatchError) as mismatch:
            await client.settle(hold.reservation_id, 41)
        with pytest.raises(sdk.HoldSettledError) as settled:
            await client.charge(hold.reservation_id, 1)
        with pytest.raises(sdk.KeyReusedError) as reused:
            await client.reserve("s", 99, idempotency_key="k")
        with pytest.raises(sdk.BudgetNotFoundError) as missing:
            await client.get_budget("nope")
        with pytest.raises(sdk.UnitLockedError):
            await client.put_budget("s", 1_000, "usd_micros")
        with pytest.raises(sdk.InvalidArgumentError) as invalid:
            await client.reserve("s", -5)
    assert "40" == mismatch.value.about["settled_used"]
    assert isinstance(mismatch.value, sdk.FailedPreconditionError)
    assert isinstance(settled.value, sdk.HoldClosedError)
    assert isinstance(reused.value, sdk.AlreadyExistsError)
    assert ("BUDGET_NOT_FOUND", "nope") == (missing.value.reason, missing.value.about["budget_id"])
    assert ("INVALID_FIELD", "amount") == (invalid.value.reason, invalid.value.about["field"])
    for error in (mismatch, settled, reused, missing, invalid):
        assert isinstance(error.value, sdk.EarmarkClientError)


async def test_a_refusal_and_a_lost_hold_share_the_base(clocked: Running, clock: FakeClock) -> None:
    """hold() raises a refusal as RefusedError and a hold gone under it as HoldLostError,
    both EarmarkClientErrors with a reason; a block catching the base catches both."""

    async def charge_past_the_lease(client: AsyncClient) -> None:
        async with client.hold("r", 50, lease_seconds=5) as hold:
            clock.advance(timedelta(seconds=6))
            await hold.charge(10)

    async with AsyncClient(clocked.target, admin_target=clocked.admin_target) as client:
        await client.put_budget("r", 100, "t")
        with pytest.raises(sdk.EarmarkClientError) as refused:
            async with client.hold("r", 500):
                raise AssertionError("a refused hold must not enter its block")
        with pytest.raises(sdk.EarmarkClientError) as lost:
            await charge_past_the_lease(client)
        state = await client.get_budget("r")
    assert isinstance(refused.value, sdk.RefusedError)
    assert ("INSUFFICIENT_BUDGET", {"budget_id": "r"}) == (
        refused.value.reason,
        refused.value.about,
    )
    assert isinstance(lost.value, sdk.HoldLostError)
    assert isinstance(lost.value.__cause__, sdk.HoldExpiredError)
    assert "HOLD_EXPIRED" == lost.value.reason
    assert (0, 0, 0) == (state.used, state.held, state.open_reservations)
    await assert_invariants(clocked.dsn)


def test_every_sdk_exception_is_under_one_base() -> None:
    """Every exception class the SDK exports derives from EarmarkClientError, and every
    reason class sits under its status code's class."""
    exported = [
        value
        for value in vars(sdk).values()
        if inspect.isclass(value) and issubclass(value, BaseException)
    ]
    assert [] == [cls.__name__ for cls in exported if not issubclass(cls, sdk.EarmarkClientError)]
    assert len(exported) > len(ERROR_OF) + len(ERROR_OF_REASON)
    by_code = {cls: code for code, cls in ERROR_OF.items()}
    for reason, cls in ERROR_OF_REASON.items():
        assert any(issubclass(cls, parent) for parent in by_code), reason


def test_the_readme_lists_every_reason() -> None:
    """The README's table of reasons names exactly the reasons the sidecar sends."""
    readme = (ROOT / "docs" / "contract.md").read_text()
    section = readme.split("### Error reasons", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\| `([A-Z_]+)` \|", section, flags=re.MULTILINE)
    assert sorted(Reason.__members__) == sorted(listed)
