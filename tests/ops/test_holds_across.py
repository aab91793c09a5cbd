"""`earmark holds list --state in-doubt` with no budget: every budget's in-doubt holds,
oldest first, each with its budget and in its budget's unit."""

from __future__ import annotations

from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.helpers import FakeClock, assert_invariants
from tests.ops.test_commands import failure, rows, run, run_json
from tests.service.test_holds_across import MADE_ON, in_doubt_across


async def test_in_doubt_holds_list_across_budgets(clocked: Running, clock: FakeClock) -> None:
    """The table lists the 5 in-doubt holds of budgets a, b and c oldest first, each with
    its budget, b's in dollars; -o json lists the same; the held one lists under held."""
    doubted, held = await in_doubt_across(clocked, clock)
    table = rows(await run(clocked, "holds", "list", "--state", "in-doubt"))
    listed = await run_json(clocked, "holds", "list", "--state", "in-doubt")
    also_held = await run_json(clocked, "holds", "list", "--state", "held")
    assert ["RESERVATION", "BUDGET", "STATE", "AMOUNT", "CHARGED"] == table[0][:5]
    assert [
        (rid, budget_id, "in-doubt (dispatched)")
        for rid, budget_id in zip(doubted, MADE_ON, strict=True)
    ] == [(r[0], r[1], r[2]) for r in table[1:]]
    assert [("10,000", "1,000"), ("$0.010002", "$0.001"), ("10,004", "1,000")] == [
        (table[i][3], table[i][4]) for i in (1, 3, 5)
    ]
    assert doubted == [h["reservation_id"] for h in listed["holds"]]
    assert [held] == [h["reservation_id"] for h in also_held["holds"]]
    await assert_invariants(clocked.dsn)


async def test_no_budget_needs_an_open_state(sidecar: Running) -> None:
    """With no budget, no --state or a closed one stops before any call, saying what to
    give."""
    message = "give a budget, or --state held or --state in-doubt to list every budget's holds"
    assert [message, message] == [
        await failure(sidecar, "holds", "list"),
        await failure(sidecar, "holds", "list", "--state", "settled"),
    ]


async def test_a_released_hold_lists_as_released(sidecar: Running) -> None:
    """A hold an operator released lists as released, a hold whose lease ran out would as
    expired: the table tells them apart by Hold.released."""
    await sidecar.admin.PutBudget(pb.PutBudgetRequest(budget_id="r", limit=1_000, unit="t"))
    hold = await sidecar.budget.Reserve(
        pb.ReserveRequest(budget_id="r", amount=100, idempotency_key="release-me")
    )
    await sidecar.admin.ReleaseHold(pb.ReleaseHoldRequest(reservation_id=hold.reservation_id))
    table = rows(await run(sidecar, "holds", "list", "r"))
    assert [(hold.reservation_id, "released")] == [(r[0], r[2]) for r in table[1:]]
    await assert_invariants(sidecar.dsn)
