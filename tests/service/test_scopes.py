"""Scopes, phases and policies against a live sidecar: nested budgets, the output escrow,
SOFT overage, and archived budgets."""

from __future__ import annotations

import asyncio
import uuid

import grpc
import pytest

from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.helpers import assert_invariants, eventually, fetch_budget_row, scrape

DIME = 100_000  # $0.10 in micro-dollars.


def reserve(
    budget_id: str, amount: int, *also: str, phase: int = pb.PHASE_UNSPECIFIED
) -> pb.ReserveRequest:
    return pb.ReserveRequest(
        budget_id=budget_id,
        amount=amount,
        idempotency_key=uuid.uuid4().hex,
        also_budget_ids=list(also),
        phase=phase,  # type: ignore[arg-type]
    )


async def put(s: Running, budget_id: str, limit: int | None, **fields: object) -> pb.BudgetState:
    request = pb.PutBudgetRequest(budget_id=budget_id, unit="usd_micros", **fields)  # type: ignore[arg-type]
    if limit is not None:
        request.limit = limit
    return await s.admin.PutBudget(request)


async def test_forty_task_reserves_stop_at_the_account(sidecar: Running) -> None:
    """40 Reserves of $0.10 on a $1.00 task inside an account with $0.50 left: exactly 5
    are admitted, every refusal names the account, and the task holds only the admitted."""
    await put(sidecar, "acct", 10_000_000)
    await put(sidecar, "acct/task", 1_000_000)
    spent = await sidecar.budget.Reserve(reserve("acct", 9_500_000))
    await sidecar.budget.Settle(
        pb.SettleRequest(reservation_id=spent.reservation_id, used=9_500_000)
    )
    replies = await asyncio.gather(
        *[sidecar.budget.Reserve(reserve("acct/task", DIME, "acct")) for _ in range(40)]
    )
    admitted = [r for r in replies if r.admitted]
    refused = [r for r in replies if not r.admitted]
    assert 5 == len(admitted)
    assert {"acct"} == {r.refused_budget_id for r in refused}
    assert {pb.REFUSAL_REASON_INSUFFICIENT_BUDGET} == {r.reason for r in refused}
    task = await sidecar.admin.GetBudget(pb.GetBudgetRequest(budget_id="acct/task"))
    account = await sidecar.admin.GetBudget(pb.GetBudgetRequest(budget_id="acct"))
    assert (5 * DIME, 5, 5 * DIME, 0) == (
        task.held,
        task.open_reservations,
        account.held,
        account.remaining,
    )
    await assert_invariants(sidecar.dsn)


async def test_a_nested_hold_charges_and_settles_every_budget(sidecar: Running) -> None:
    """Charge and Settle of a nested hold move the account and the task alike, and the
    ledger of each has the hold's entries."""
    await put(sidecar, "org", 5_000_000)
    await put(sidecar, "org/team", 2_000_000)
    await put(sidecar, "org/team/task", 1_000_000)
    hold = await sidecar.budget.Reserve(reserve("org/team/task", 400_000, "org/team", "org"))
    assert hold.admitted
    await sidecar.budget.Charge(
        pb.ChargeRequest(reservation_id=hold.reservation_id, amount=100_000, idempotency_key="c")
    )
    settled = await sidecar.budget.Settle(
        pb.SettleRequest(
            reservation_id=hold.reservation_id, used=250_000, outcome=pb.OUTCOME_SUCCEEDED
        )
    )
    assert (250_000, 150_000) == (settled.charged, settled.released)
    for budget_id in ("org", "org/team", "org/team/task"):
        state = await sidecar.admin.GetBudget(pb.GetBudgetRequest(budget_id=budget_id))
        ledger = await sidecar.admin.ListLedger(pb.ListLedgerRequest(budget_id=budget_id))
        assert (budget_id, 250_000, 0, 0) == (
            budget_id,
            state.used,
            state.held,
            state.open_reservations,
        )
        assert ["hold", "charge", "settle"] == [e.kind for e in ledger.entries]
    await assert_invariants(sidecar.dsn)


async def test_nested_reserves_name_what_they_need(sidecar: Running) -> None:
    """A missing or differently-counted also budget is refused by status, naming it, and
    nothing is held anywhere."""
    await put(sidecar, "mixed", 1_000)
    await sidecar.admin.PutBudget(pb.PutBudgetRequest(budget_id="tok", limit=1_000, unit="t"))
    cases = [
        (reserve("mixed", 10, "ghost"), grpc.StatusCode.NOT_FOUND, "also_budget_ids: budget"),
        (reserve("mixed", 10, "tok"), grpc.StatusCode.FAILED_PRECONDITION, "also_budget_ids"),
        (reserve("mixed", 10, "mixed"), grpc.StatusCode.INVALID_ARGUMENT, "also_budget_ids[0]"),
        (reserve("mixed", 10, "tok", "tok"), grpc.StatusCode.INVALID_ARGUMENT, "twice"),
        (
            reserve("mixed", 10, *[f"b{i}" for i in range(9)]),
            grpc.StatusCode.INVALID_ARGUMENT,
            "at most 8",
        ),
        (reserve("mixed", 10, phase=7), grpc.StatusCode.INVALID_ARGUMENT, "phase"),
    ]
    for request, code, words in cases:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await sidecar.budget.Reserve(request)
        assert (code, True) == (caught.value.code(), words in str(caught.value.details()))
    assert (0, 0) == ((await fetch_budget_row(sidecar.dsn, "mixed"))["held"], 0)
    assert 0 == (await fetch_budget_row(sidecar.dsn, "tok"))["held"]
    await assert_invariants(sidecar.dsn)


async def test_the_escrow_keeps_the_final_answer_payable(sidecar: Running) -> None:
    """The article's case: $10.00 with 15% escrow refuses work past $8.50; the final call
    reserves the $1.50 left, and what it does not use returns."""
    state = await put(sidecar, "session", 10_000_000, escrow_bps=1500)
    assert 1500 == state.escrow_bps
    work = await sidecar.budget.Reserve(reserve("session", 8_500_000))
    more_work = await sidecar.budget.Reserve(reserve("session", 1, phase=pb.PHASE_WORK))
    final = await sidecar.budget.Reserve(reserve("session", 1_500_000, phase=pb.PHASE_FINAL))
    past = await sidecar.budget.Reserve(reserve("session", 1, phase=pb.PHASE_FINAL))
    assert (True, False, True, False) == (
        work.admitted,
        more_work.admitted,
        final.admitted,
        past.admitted,
    )
    assert "output escrow" in more_work.message
    await sidecar.budget.Settle(
        pb.SettleRequest(reservation_id=work.reservation_id, used=8_400_000)
    )
    settled = await sidecar.budget.Settle(
        pb.SettleRequest(reservation_id=final.reservation_id, used=900_000)
    )
    assert 600_000 == settled.released
    budget = await sidecar.admin.GetBudget(pb.GetBudgetRequest(budget_id="session"))
    assert (9_300_000, 0, 700_000) == (budget.used, budget.held, budget.remaining)
    # The escrow is still out of reach of work: $8.50 is spent past, so work gets nothing.
    late_work = await sidecar.budget.Reserve(reserve("session", 1))
    assert (False, 0) == (late_work.admitted, late_work.remaining)
    await assert_invariants(sidecar.dsn)


async def test_a_soft_budget_admits_past_its_limit_up_to_the_overage(sidecar: Running) -> None:
    """SOFT with overage_limit 200 on 1,000: 1,150 is admitted and flagged, 1,250 is
    refused naming the policy; the flag shows on the budget and in the metrics until
    PutBudget clears it."""
    await put(sidecar, "soft", 1_000, overage_policy=pb.OVERAGE_POLICY_SOFT, overage_limit=200)
    first = await sidecar.budget.Reserve(reserve("soft", 900))
    over = await sidecar.budget.Reserve(reserve("soft", 250))
    refused = await sidecar.budget.Reserve(reserve("soft", 100))
    assert (True, False) == (first.admitted, first.over_limit)
    assert (True, True, pb.OVERAGE_POLICY_SOFT) == (
        over.admitted,
        over.over_limit,
        over.overage_policy,
    )
    assert (False, pb.OVERAGE_POLICY_SOFT, "soft") == (
        refused.admitted,
        refused.overage_policy,
        refused.refused_budget_id,
    )
    assert "SOFT" in refused.message
    budget = await sidecar.admin.GetBudget(pb.GetBudgetRequest(budget_id="soft"))
    assert (True, 200, pb.OVERAGE_POLICY_SOFT) == (
        budget.HasField("overage_since"),
        budget.overage_limit,
        budget.overage_policy,
    )
    port = sidecar.sidecar.metrics_port

    async def flagged() -> bool:
        return 1.0 == scrape(port).get(("earmark_budgets_in_overage", ()))

    await eventually(flagged, within_seconds=10, what="the overage gauge")
    assert 1.0 == scrape(port)[("earmark_overage_admissions_total", ())]
    hard = await sidecar.budget.Reserve(reserve("soft", 1))
    assert hard.admitted  # 1,151 of a 1,200 ceiling
    cleared = await put(sidecar, "soft", 2_000)
    assert (False, pb.OVERAGE_POLICY_HARD) == (
        cleared.HasField("overage_since"),
        cleared.overage_policy,
    )
    await assert_invariants(sidecar.dsn)


async def test_budget_settings_name_their_field(sidecar: Running) -> None:
    """Escrow and overage settings out of range are INVALID_ARGUMENT naming the field."""
    cases = [
        (dict(escrow_bps=10_000), 1_000, "escrow_bps"),
        (dict(escrow_bps=-1), 1_000, "escrow_bps"),
        (dict(escrow_bps=100), None, "escrow_bps: needs a limit"),
        (dict(overage_limit=5), 1_000, "overage_limit: is only for"),
        (dict(overage_policy=9), 1_000, "overage_policy"),
        (dict(overage_policy=pb.OVERAGE_POLICY_SOFT, overage_limit=-1), 1_000, "overage_limit"),
    ]
    for fields, limit, words in cases:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await put(sidecar, "bad", limit, **fields)
        assert (grpc.StatusCode.INVALID_ARGUMENT, True) == (
            caught.value.code(),
            words in str(caught.value.details()),
        )
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await sidecar.admin.GetBudget(pb.GetBudgetRequest(budget_id="bad"))
    assert grpc.StatusCode.NOT_FOUND == missing.value.code()


async def test_an_archived_budget_takes_no_reserves(sidecar: Running) -> None:
    """DeleteBudget refuses while holds are open; once archived, Reserves (also nested ones)
    and PutBudget are refused, and its ledger stays readable."""
    await put(sidecar, "old", 1_000)
    await put(sidecar, "young", 1_000)
    hold = await sidecar.budget.Reserve(reserve("old", 10))
    with pytest.raises(grpc.aio.AioRpcError) as busy:
        await sidecar.admin.DeleteBudget(pb.DeleteBudgetRequest(budget_id="old"))
    assert grpc.StatusCode.FAILED_PRECONDITION == busy.value.code()
    assert "1 open holds" in str(busy.value.details())
    await sidecar.budget.Settle(pb.SettleRequest(reservation_id=hold.reservation_id, used=7))
    archived = await sidecar.admin.DeleteBudget(pb.DeleteBudgetRequest(budget_id="old"))
    again = await sidecar.admin.DeleteBudget(pb.DeleteBudgetRequest(budget_id="old"))
    assert (True, archived.archived_at) == (archived.HasField("archived_at"), again.archived_at)
    for request in (reserve("old", 1), reserve("young", 1, "old")):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await sidecar.budget.Reserve(request)
        assert (grpc.StatusCode.FAILED_PRECONDITION, "budget 'old' is archived") == (
            refused.value.code(),
            refused.value.details(),
        )
    with pytest.raises(grpc.aio.AioRpcError) as put_again:
        await put(sidecar, "old", 5_000)
    assert grpc.StatusCode.FAILED_PRECONDITION == put_again.value.code()
    ledger = await sidecar.admin.ListLedger(pb.ListLedgerRequest(budget_id="old"))
    assert [("hold", 10, 0), ("settle", -10, 7)] == [
        (e.kind, e.held_delta, e.used_delta) for e in ledger.entries
    ]
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await sidecar.admin.DeleteBudget(pb.DeleteBudgetRequest(budget_id="never"))
    assert grpc.StatusCode.NOT_FOUND == unknown.value.code()
    await assert_invariants(sidecar.dsn)


async def test_a_lowered_limit_is_no_violation(sidecar: Running) -> None:
    """Spend admitted under a higher limit, or under SOFT, stays clean in the audit after
    the operator lowers the limit or hardens the policy below it."""
    await put(sidecar, "shrunk", 1_000, overage_policy=pb.OVERAGE_POLICY_SOFT, overage_limit=500)
    hold = await sidecar.budget.Reserve(reserve("shrunk", 1_400))
    await sidecar.budget.Settle(pb.SettleRequest(reservation_id=hold.reservation_id, used=1_400))
    await put(sidecar, "shrunk", 0)
    refused = await sidecar.budget.Reserve(reserve("shrunk", 1))
    assert (True, False) == (hold.over_limit, refused.admitted)
    await assert_invariants(sidecar.dsn)
