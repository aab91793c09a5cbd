"""Property tests of group admission: any sequence of batches keeps every invariant."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from earmark.core.batch import BatchState, decide_batch, expire_due
from earmark.core.model import (
    OPEN_STATES,
    Budget,
    Hold,
    HoldState,
    LedgerEntry,
    LedgerKind,
    Outcome,
)
from earmark.core.ops import ChargeOp, Op, RenewOp, ReserveOp, ReserveResult, SettleOp

START = datetime(2026, 1, 1, tzinfo=UTC)

op_spec = st.one_of(
    st.tuples(st.just("reserve"), st.integers(1, 400), st.integers(0, 30)),
    st.tuples(st.just("charge"), st.integers(1, 300), st.integers(0, 30)),
    st.tuples(st.just("renew"), st.integers(1, 5), st.integers(0, 30)),
    st.tuples(st.just("settle"), st.integers(0, 600), st.integers(0, 30)),
)
batch_spec = st.tuples(st.lists(op_spec, max_size=12), st.integers(0, 3), st.booleans())


def build(spec: tuple[str, int, int], ids: list[str], serial: int) -> Op | None:
    kind, number, pick = spec
    if kind == "reserve":
        # Reusing a few keys exercises idempotency.
        return ReserveOp("b", f"k{pick % 8}", number, timedelta(seconds=2), f"r{serial}")
    if not ids:
        return None
    rid = ids[pick % len(ids)]
    if kind == "charge":
        return ChargeOp(rid, f"c{serial % 5}", number)
    if kind == "renew":
        return RenewOp(rid, timedelta(seconds=number))
    return SettleOp(rid, number, Outcome.SUCCEEDED)


@settings(max_examples=300, deadline=None)
@given(limit=st.integers(0, 2_000), batches=st.lists(batch_spec, max_size=10))
def test_invariants_hold_after_every_batch(
    limit: int, batches: list[tuple[list[tuple[str, int, int]], int, bool]]
) -> None:
    """held = sum of open holds = sum of ledger held deltas, used = sum of ledger charges,
    and admissions never exceed the limit, after any sequence of batches and sweeps."""
    budget = Budget("b", limit, "t")
    holds: dict[str, Hold] = {}
    charges: dict[tuple[str, str], object] = {}
    ledger: list[LedgerEntry] = []
    now = START
    serial = 0
    for specs, seconds, sweep in batches:
        now += timedelta(seconds=seconds)
        ops = []
        for spec in specs:
            serial += 1
            op = build(spec, list(holds), serial)
            if op is not None:
                ops.append(op)
        state = BatchState(
            budget_id="b",
            budget=budget,
            holds_by_id=holds,
            holds_by_key={(h.owner, h.idempotency_key): h for h in holds.values()},
            charges=charges,  # type: ignore[arg-type]
        )
        decision = decide_batch(state, ops, now)
        assert len(ops) == len(decision.results)
        ledger += decision.ledger
        for op, result in zip(ops, decision.results, strict=True):
            if isinstance(op, ReserveOp) and isinstance(result, ReserveResult):
                assert result.admitted or result.remaining is not None
        if sweep:
            ledger += expire_due(state, now).ledger
        open_holds = [h for h in holds.values() if h.state in OPEN_STATES]
        assert budget.held == sum(h.amount - h.charged for h in open_holds)
        assert budget.held == sum(e.held_delta for e in ledger)
        assert budget.used == sum(e.used_delta for e in ledger)
        assert budget.open_reservations == len(open_holds)
        # Spend past the limit is possible only where a job reported it: a settled job's
        # overshoot, and what a late settle adds after its hold went back.
        overshoot = sum(
            max(0, h.settlement.used - h.amount)
            for h in holds.values()
            if h.settlement and h.state is HoldState.SETTLED
        )
        late = sum(e.used_delta for e in ledger if e.kind is LedgerKind.LATE_SETTLE)
        assert budget.used + budget.held - overshoot - late <= limit
