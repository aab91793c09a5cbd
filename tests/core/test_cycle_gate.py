"""The core's gate on cycle budgets: in one batch, a Reserve that names a cycle budget by
its id fails alone, before it changes anything, while the Reserves by account around it
are decided as usual."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from earmark.core.batch import BatchState, decide_batch
from earmark.core.model import Budget
from earmark.core.ops import Op, ReserveOp, ReserveResult
from earmark.core.ratelimit import AdmissionWindow
from earmark.errors import FailedPrecondition, Reason

NOW = datetime(2026, 8, 15, 12, tzinfo=UTC)
CYCLE = "acct/tokens/2026-08-01"
LEASE = timedelta(minutes=5)


def cycle_budget() -> Budget:
    return Budget(
        CYCLE,
        100_000,
        "tokens",
        account="acct",
        feature="tokens",
        cycle_start=datetime(2026, 8, 1, tzinfo=UTC),
        cycle_end=datetime(2026, 9, 1, tzinfo=UTC),
        limit_read_at=NOW,
    )


def by_account(key: str) -> ReserveOp:
    return ReserveOp(CYCLE, key, 10, LEASE, f"r-{key}", account="acct", admissions_per_minute=2)


def outcome(result: object) -> tuple[str, object]:
    """An answer in short: admitted or not, or the reason and field of an error."""
    if isinstance(result, FailedPrecondition):
        return result.reason, result.about.get("field")
    assert isinstance(result, ReserveResult)
    return "admitted" if result.admitted else "refused", result.reason.name


def test_a_reserve_by_id_fails_alone_in_its_batch() -> None:
    """By account, by id, by id retrying an admitted key, by account, by account: the two
    by id fail CYCLE_BUDGET_NEEDS_ACCOUNT naming account, the rate of 2 admits the first
    two by account and refuses the third, and only the admitted are held."""
    cycle = cycle_budget()
    state = BatchState(CYCLE, cycle, windows={"acct": AdmissionWindow("acct")})
    ops: list[Op] = [
        by_account("a"),
        ReserveOp(CYCLE, "b", 10, LEASE, "r-b"),
        ReserveOp(CYCLE, "a", 10, LEASE, "r-a2"),
        by_account("c"),
        by_account("d"),
    ]
    decision = decide_batch(state, ops, NOW)
    needs_account = (Reason.CYCLE_BUDGET_NEEDS_ACCOUNT, "account")
    assert [
        ("admitted", "UNSPECIFIED"),
        needs_account,
        needs_account,
        ("admitted", "UNSPECIFIED"),
        ("refused", "RATE_LIMITED"),
    ] == [outcome(r) for r in decision.results]
    assert (20, 2) == (cycle.held, len(decision.new_holds))


def test_a_cycle_budget_in_also_budget_ids_is_refused() -> None:
    """A Reserve on a plain budget that also names a cycle budget, or a Reserve by another
    account that does, fails CYCLE_BUDGET_NEEDS_ACCOUNT and holds nothing anywhere."""
    task = Budget("task", 10**6, "tokens")
    other = Budget("other/tokens/2026-08-01", 10**6, "tokens", account="other", feature="tokens")
    cycle = cycle_budget()
    budgets = {"task": task, CYCLE: cycle, other.budget_id: other}
    nested = ReserveOp("task", "n", 10, LEASE, "r-n", also_budget_ids=(CYCLE,))
    crossed = ReserveOp(
        other.budget_id, "x", 10, LEASE, "r-x", account="other", also_budget_ids=(CYCLE,)
    )
    results = [
        decide_batch(BatchState("task", task, budgets=budgets), [nested], NOW).results,
        decide_batch(BatchState(other.budget_id, other, budgets=budgets), [crossed], NOW).results,
    ]
    reasons = [
        (r.reason, r.about.get("field"), r.about.get("budget_id"))
        for (r,) in results
        if isinstance(r, FailedPrecondition)
    ]
    assert [(Reason.CYCLE_BUDGET_NEEDS_ACCOUNT, "account", CYCLE)] * 2 == reasons
    assert (0, 0, 0) == (task.held, cycle.held, other.held)


def test_a_reserve_by_account_refuses_an_operators_budget_of_its_cycles_id() -> None:
    """A budget made by PutBudget under the id of an account's cycle is not held on by the
    account's Reserve, which would skip the plan's limit and the meter."""
    squatter = Budget(CYCLE, 10**6, "tokens")
    decision = decide_batch(BatchState(CYCLE, squatter), [by_account("a")], NOW)
    assert [(Reason.CYCLE_BUDGET_NEEDS_ACCOUNT, "account")] == [
        outcome(r) for r in decision.results
    ]
    assert 0 == squatter.held
