"""Property test of nested holds: any sequence of batches over a parent and two children,
with sweeps and the operator's calls, keeps every budget's counters equal to its holds and
its ledger, and admits nothing past any budget's limit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import event, given, settings
from hypothesis import strategies as st

from earmark.core.batch import BatchState, decide_batch, expire_due
from earmark.core.model import (
    OPEN_STATES,
    Budget,
    ChargeRecord,
    Hold,
    HoldState,
    LedgerEntry,
    LedgerKind,
    Outcome,
    Phase,
)
from earmark.core.ops import (
    ChargeOp,
    Op,
    ReleaseOp,
    RenewOp,
    ReserveOp,
    ReserveResult,
    ResolveOp,
    SettleOp,
)

START = datetime(2026, 1, 1, tzinfo=UTC)
PARENT = "acct"
CHILDREN = ("acct/t1", "acct/t2")
BUDGETS = (PARENT, *CHILDREN)

op_spec = st.tuples(
    st.sampled_from(["reserve", "charge", "renew", "settle", "resolve", "release"]),
    st.integers(0, 400),
    st.integers(0, 30),
)
batch_spec = st.tuples(st.lists(op_spec, max_size=10), st.integers(0, 3), st.booleans())


def build(spec: tuple[str, int, int], holds: dict[str, Hold], serial: int) -> tuple[str, Op]:
    """The operation and the budget it is routed by (a hold's own)."""
    kind, number, pick = spec
    ids = sorted(holds)
    if kind == "reserve" or not ids:
        primary = BUDGETS[pick % 3]
        also = (PARENT,) if primary != PARENT else ()
        phase = Phase.FINAL if pick % 4 == 0 else Phase.WORK
        op = ReserveOp(primary, f"k{pick % 6}", max(1, number), timedelta(seconds=2),
                       f"r{serial}", also_budget_ids=also, phase=phase)  # fmt: skip
        return primary, op
    hold = holds[ids[pick % len(ids)]]
    match kind:
        case "charge":
            return hold.budget_id, ChargeOp(hold.reservation_id, f"c{serial % 4}", number)
        case "renew":
            return hold.budget_id, RenewOp(hold.reservation_id, timedelta(seconds=1 + number % 5))
        case "settle":
            return hold.budget_id, SettleOp(hold.reservation_id, number, Outcome.SUCCEEDED)
        case "resolve":
            return hold.budget_id, ResolveOp(hold.reservation_id, number)
        case _:
            return hold.budget_id, ReleaseOp(hold.reservation_id)


@settings(max_examples=300, deadline=None)
@given(
    limits=st.tuples(st.integers(0, 1_500), st.integers(0, 900), st.integers(0, 900)),
    escrow=st.integers(0, 5_000),
    batches=st.lists(batch_spec, max_size=10),
)
def test_every_budget_of_nested_holds_stays_exact(
    limits: tuple[int, int, int],
    escrow: int,
    batches: list[tuple[list[tuple[str, int, int]], int, bool]],
) -> None:
    """For the parent and each child: held = its open holds = its ledger's held deltas,
    used = its ledger's used deltas, open_reservations = its open holds, and spend within
    its limit but for what settles reported past their holds."""
    budgets = {b: Budget(b, limit, "t") for b, limit in zip(BUDGETS, limits, strict=True)}
    budgets[PARENT].escrow_bps = escrow
    holds: dict[str, Hold] = {}
    charges: dict[tuple[str, str], ChargeRecord] = {}
    ledger: list[LedgerEntry] = []
    now = START
    serial = 0
    for specs, seconds, sweep in batches:
        now += timedelta(seconds=seconds)
        routed: dict[str, list[Op]] = {}
        for spec in specs:
            serial += 1
            primary, op = build(spec, holds, serial)
            routed.setdefault(primary, []).append(op)
        states = {}
        for primary in BUDGETS:
            own = {rid: h for rid, h in holds.items() if h.budget_id == primary}
            states[primary] = BatchState(
                budget_id=primary,
                budget=budgets[primary],
                budgets=budgets,
                holds_by_id=own,
                holds_by_key={(h.owner, h.idempotency_key): h for h in own.values()},
                charges=charges,
            )
        for primary, ops in routed.items():
            decision = decide_batch(states[primary], ops, now)
            assert len(ops) == len(decision.results)
            ledger += decision.ledger
            for op, result in zip(ops, decision.results, strict=True):
                if isinstance(op, ReserveOp) and isinstance(result, ReserveResult):
                    named = (op.budget_id, *op.also_budget_ids)
                    assert result.admitted or result.refused_budget_id in named
                    if op.also_budget_ids:
                        event("nested admitted" if result.admitted else "nested refused")
            for state in states.values():
                holds.update(state.holds_by_id)
        if sweep:
            for state in states.values():
                swept = expire_due(state, now)
                ledger += swept.ledger
                if swept.doubted:
                    event("swept into doubt")
        for budget_id, budget in budgets.items():
            mine = [h for h in holds.values() if budget_id in h.budget_ids()]
            open_holds = [h for h in mine if h.state in OPEN_STATES]
            entries = [e for e in ledger if e.budget_id == budget_id]
            assert budget.held == sum(h.amount - h.charged for h in open_holds)
            assert budget.held == sum(e.held_delta for e in entries)
            assert budget.used == sum(e.used_delta for e in entries)
            assert budget.open_reservations == len(open_holds)
            overshoot = sum(
                max(0, h.settlement.used - h.amount)
                for h in mine
                if h.settlement and h.state is HoldState.SETTLED
            )
            late = sum(e.used_delta for e in entries if e.kind is LedgerKind.LATE_SETTLE)
            assert budget.limit is not None
            assert budget.used + budget.held - overshoot - late <= budget.limit
