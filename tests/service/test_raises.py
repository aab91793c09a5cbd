"""Issue 47's temporary limits through a live sidecar on a real PostgreSQL and the injected
clock: UpdateBudget's limit_until and reason set a limit in force until then, the limit
before it after, each change a ledger entry and a budget.limit_changed notice, ended by the
next batch, the sweeper or a read alike."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import grpc
import pytest
from google.protobuf.field_mask_pb2 import FieldMask
from google.protobuf.timestamp_pb2 import Timestamp

from earmark import limits
from earmark.client import AsyncClient
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.helpers import FakeClock, assert_invariants, eventually

CLOCK_START = datetime(2026, 12, 4, 12, tzinfo=UTC)
DAY = timedelta(days=1)


def at(when: datetime) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(when)
    return stamp


async def put(side: Running, budget_id: str, limit: int) -> None:
    await side.admin.PutBudget(pb.PutBudgetRequest(budget_id=budget_id, limit=limit, unit="t"))


async def raise_limit(
    side: Running,
    budget_id: str,
    limit: int,
    until: datetime | None,
    reason: str = "",
    paths: tuple[str, ...] = ("limit",),
) -> pb.BudgetState:
    request = pb.UpdateBudgetRequest(
        budget=pb.PutBudgetRequest(budget_id=budget_id, limit=limit),
        update_mask=FieldMask(paths=list(paths)),
        reason=reason,
    )
    if until is not None:
        request.limit_until.CopyFrom(at(until))
    return await side.admin.UpdateBudget(request)


async def reserve(side: Running, budget_id: str, amount: int, key: str) -> pb.ReserveResponse:
    return await side.budget.Reserve(
        pb.ReserveRequest(budget_id=budget_id, amount=amount, idempotency_key=key)
    )


def raise_of(state: pb.BudgetState) -> tuple[object, ...]:
    """(limit, limit_until, limit_after, limit_reason) as BudgetState answers them."""
    until = state.limit_until.ToDatetime(tzinfo=UTC) if state.HasField("limit_until") else None
    after = state.limit_after if state.HasField("limit_after") else None
    return (state.limit, until, after, state.limit_reason)


async def limit_entries(side: Running, budget_id: str) -> list[tuple[object, ...]]:
    """(limit_before, limit_after, limit_until, reason) of the budget's limit entries."""
    ledger = await side.admin.ListLedger(pb.ListLedgerRequest(budget_id=budget_id))
    return [
        (
            e.limit_before if e.HasField("limit_before") else None,
            e.limit_after if e.HasField("limit_after") else None,
            e.limit_until.ToDatetime(tzinfo=UTC) if e.HasField("limit_until") else None,
            e.reason,
        )
        for e in ledger.entries
        if e.kind == "limit"
    ]


async def notices(dsn: str, budget_id: str) -> list[dict[str, Any]]:
    """The data of the budget's budget.limit_changed notices, oldest first."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT payload FROM events WHERE kind = 'budget.limit_changed' AND budget_id = $1 "
            "ORDER BY seq",
            budget_id,
        )
    finally:
        await conn.close()
    return [json.loads(r["payload"])["data"] for r in rows]


def seen(data: dict[str, Any]) -> tuple[object, ...]:
    return (data["limit_before"], data["limit"], data["limit_until"], data["reason"], data["ended"])


async def test_a_raise_for_a_day_admits_above_the_old_limit_until_it_ends(
    clocked: Running, clock: FakeClock
) -> None:
    """Raised from 100 to 500 for a day: 300 is admitted during it, 100 more refused after
    it, and the ledger and notices show both changes with the reason."""
    until = clock.at + DAY
    await put(clocked, "r", 100)
    raised = await raise_limit(clocked, "r", 500, until, "quarter end")
    during = await reserve(clocked, "r", 300, "during")
    clock.advance(DAY + timedelta(seconds=1))
    after = await reserve(clocked, "r", 100, "after")
    state = await clocked.admin.GetBudget(pb.GetBudgetRequest(budget_id="r"))
    assert (
        (500, until, 100, "quarter end"),
        (True, False, pb.REFUSAL_REASON_INSUFFICIENT_BUDGET),
        (100, None, None, ""),
        [(100, 500, until, "quarter end"), (500, 100, None, "quarter end")],
        [
            (100, 500, "2026-12-05T12:00:00Z", "quarter end", False),
            (500, 100, None, "quarter end", True),
        ],
    ) == (
        raise_of(raised),
        (during.admitted, after.admitted, after.reason),
        raise_of(state),
        await limit_entries(clocked, "r"),
        [seen(d) for d in await notices(clocked.dsn, "r")],
    )
    await assert_invariants(clocked.dsn)


async def test_a_raise_on_a_raise_goes_back_to_the_limit_before_both(
    clocked: Running, clock: FakeClock
) -> None:
    """A second raise while one is in force keeps the limit to go back to; a permanent
    change ends the raise; a change that keeps the limit keeps it."""
    await put(clocked, "rr", 100)
    await raise_limit(clocked, "rr", 500, clock.at + DAY, "first")
    second = await raise_limit(clocked, "rr", 800, clock.at + 2 * DAY, "second")
    kept = await raise_limit(clocked, "rr", 800, None, paths=("limit", "threshold_bps"))
    ended = await raise_limit(clocked, "rr", 300, None, "for good")
    assert (
        (800, clock.at + 2 * DAY, 100, "second"),
        (800, clock.at + 2 * DAY, 100, "second"),
        (300, None, None, ""),
        [(100, 500, clock.at + DAY, "first"), (500, 800, clock.at + 2 * DAY, "second"),
         (800, 300, None, "for good")],
    ) == (
        raise_of(second), raise_of(kept), raise_of(ended), await limit_entries(clocked, "rr"),
    )  # fmt: skip
    await assert_invariants(clocked.dsn)


async def test_the_sweeper_ends_an_idle_budgets_raise_on_time(
    clocked: Running, clock: FakeClock
) -> None:
    """A budget nothing reserves on: once its limit_until passes, the sweeper ends the raise,
    writing its ledger entry, notice and limit without any call on the budget."""
    await put(clocked, "idle", 100)
    await raise_limit(clocked, "idle", 400, clock.at + timedelta(hours=1), "launch")
    clock.advance(timedelta(hours=1))

    async def ended() -> bool:
        return any(data["ended"] for data in await notices(clocked.dsn, "idle"))

    await eventually(ended, within_seconds=10, what="the raise ended by the sweeper")
    conn = await asyncpg.connect(clocked.dsn)
    try:
        row = await conn.fetchrow(
            "SELECT limit_units, limit_until, limit_after, limit_reason, ceiling_max "
            "FROM budgets WHERE budget_id = 'idle'"
        )
    finally:
        await conn.close()
    assert row is not None
    assert (
        (100, None, None, "", 400),
        [(100, 400, clock.at, "launch"), (400, 100, None, "launch")],
    ) == (tuple(row), await limit_entries(clocked, "idle"))
    await assert_invariants(clocked.dsn)


async def test_a_read_shows_the_limit_after_a_raise_before_anything_writes(
    clocked: Running, clock: FakeClock
) -> None:
    """GetBudget and ListBudgets show the limit after a raise as soon as limit_until passes,
    though no batch or sweep has written it yet."""
    await put(clocked, "read", 100)
    await raise_limit(clocked, "read", 700, clock.at + DAY, "demo")
    clock.advance(DAY)
    got = await clocked.admin.GetBudget(pb.GetBudgetRequest(budget_id="read"))
    listed = await clocked.admin.ListBudgets(pb.ListBudgetsRequest())
    (shown,) = [b for b in listed.budgets if b.budget_id == "read"]
    assert ((100, None, None, ""), (100, None, None, "")) == (raise_of(got), raise_of(shown))
    await assert_invariants(clocked.dsn)


@pytest.mark.parametrize(
    ("until", "paths", "reason", "field"),
    [
        (-timedelta(seconds=1), ("limit",), "", "limit_until"),
        (timedelta(0), ("limit",), "", "limit_until"),
        (DAY, ("threshold_bps",), "", "limit_until"),
        (timedelta(days=limits.limit_raise_days_max, seconds=1), ("limit",), "", "limit_until"),
        (DAY, ("limit",), "x" * (limits.limit_reason_chars_max + 1), "reason"),
        (None, ("threshold_bps",), "why", "reason"),
    ],
)
async def test_a_raise_that_cannot_be_is_refused_naming_its_field(
    clocked: Running,
    clock: FakeClock,
    until: timedelta | None,
    paths: tuple[str, ...],
    reason: str,
    field: str,
) -> None:
    """limit_until not after now, without naming limit, or too far ahead, and a reason too
    long (or given for no limit): INVALID_ARGUMENT naming the field, and nothing changes."""
    await put(clocked, "bad", 100)
    before = await clocked.admin.GetBudget(pb.GetBudgetRequest(budget_id="bad"))
    when = None if until is None else clock.at + until
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await raise_limit(clocked, "bad", 500, when, reason, paths)
    after = await clocked.admin.GetBudget(pb.GetBudgetRequest(budget_id="bad"))
    assert (grpc.StatusCode.INVALID_ARGUMENT, field, before, []) == (
        error.value.code(),
        (error.value.details() or "").split(":")[0],
        after,
        await limit_entries(clocked, "bad"),
    )
    await assert_invariants(clocked.dsn)


async def test_the_sdk_sets_a_raise_and_reads_it_back(clocked: Running, clock: FakeClock) -> None:
    """AsyncClient.update_budget's limit_until and reason set a raise; BudgetState carries
    limit_until, limit_after and limit_reason, and none once it has ended."""
    until = clock.at + DAY
    async with AsyncClient(clocked.target, admin_target=clocked.admin_target) as client:
        await client.put_budget("sdk", 100, "tokens")
        raised = await client.update_budget("sdk", limit=500, limit_until=until, reason="demo")
        clock.advance(DAY)
        ended = await client.get_budget("sdk")
    assert ((500, until, 100, "demo"), (100, None, None, "")) == (
        (raised.limit, raised.limit_until, raised.limit_after, raised.limit_reason),
        (ended.limit, ended.limit_until, ended.limit_after, ended.limit_reason),
    )
    await assert_invariants(clocked.dsn)
