"""Group admission: the operations on one budget decided in arrival order, in memory.

The store loads the budget and the holds the batch names, this module decides every
operation against that state and says what to write; the store writes it all in the
same transaction. Each operation gets its own answer or its own error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import assert_never

from earmark.core import rules
from earmark.core.model import (
    Budget,
    ChargeRecord,
    Hold,
    HoldState,
    LedgerEntry,
    LedgerKind,
    RefusalReason,
    Settlement,
)
from earmark.core.ops import (
    ChargeOp,
    ChargeResult,
    Op,
    RenewOp,
    RenewResult,
    ReserveOp,
    ReserveResult,
    Result,
    SettleOp,
    SettleResult,
)
from earmark.errors import (
    AlreadyExists,
    EarmarkError,
    FailedPrecondition,
    NotFound,
    PermissionDenied,
)


@dataclass(slots=True)
class BatchState:
    """What the store loaded for one batch: the budget (None if it does not exist),
    the holds the batch names, by id and by (owner, idempotency key), and earlier charge
    answers."""

    budget_id: str
    budget: Budget | None
    holds_by_id: dict[str, Hold] = field(default_factory=dict)
    holds_by_key: dict[tuple[str, str], Hold] = field(default_factory=dict)
    charges: dict[tuple[str, str], ChargeRecord] = field(default_factory=dict)


@dataclass(slots=True)
class BatchDecision:
    """Every answer in arrival order, and every write the answers depend on."""

    results: list[Result | EarmarkError] = field(default_factory=list)
    new_holds: list[Hold] = field(default_factory=list)
    changed_holds: dict[str, Hold] = field(default_factory=dict)
    new_charges: list[ChargeRecord] = field(default_factory=list)
    ledger: list[LedgerEntry] = field(default_factory=list)

    def writes_anything(self) -> bool:
        return bool(self.new_holds or self.changed_holds or self.new_charges or self.ledger)


def decide_batch(state: BatchState, ops: list[Op], now: datetime) -> BatchDecision:
    """Decides ops in order against state, mutating state as each one commits in memory."""
    decision = BatchDecision()
    for op in ops:
        try:
            decision.results.append(_decide_one(state, decision, op, now))
        except EarmarkError as error:
            decision.results.append(error)
    if state.budget is not None:
        assert state.budget.held >= 0, "held went negative"
        assert state.budget.open_reservations >= 0, "open_reservations went negative"
    return decision


def _decide_one(state: BatchState, decision: BatchDecision, op: Op, now: datetime) -> Result:
    match op:
        case ReserveOp():
            return _reserve(state, decision, op, now)
        case ChargeOp():
            return _charge(state, decision, op, now)
        case RenewOp():
            return _renew(state, decision, op, now)
        case SettleOp():
            return _settle(state, decision, op, now)
        case _:
            assert_never(op)


def _reserve(state: BatchState, decision: BatchDecision, op: ReserveOp, now: datetime) -> Result:
    budget = _budget(state)
    existing = state.holds_by_key.get((op.owner, op.idempotency_key))
    if existing is not None:
        if existing.amount != op.amount:
            # The other reservation's amount is not the caller's business: name none.
            raise AlreadyExists(
                f"idempotency_key {op.idempotency_key!r} was already used on budget "
                f"{budget.budget_id!r} for a reservation of another amount"
            )
        return ReserveResult(
            admitted=True,
            reservation_id=existing.reservation_id,
            amount=existing.amount,
            remaining=budget.remaining(),
            reason=RefusalReason.UNSPECIFIED,
            message="admitted earlier with this idempotency_key",
            expires_at=existing.expires_at,
            duplicate=True,
        )
    if not rules.counters_fit(budget, 0, op.amount):
        raise FailedPrecondition(
            f"budget {budget.budget_id!r}: a hold of {op.amount} would carry its counters "
            "past 2^63-1; settle holds or start a new budget"
        )
    admission = rules.admit(budget, op.amount)
    if not admission.admitted:
        return ReserveResult(
            admitted=False,
            reservation_id="",
            amount=op.amount,
            remaining=admission.remaining,
            reason=RefusalReason.INSUFFICIENT_BUDGET,
            message=admission.message,
            expires_at=None,
        )
    hold = Hold(
        reservation_id=op.new_reservation_id,
        budget_id=budget.budget_id,
        idempotency_key=op.idempotency_key,
        amount=op.amount,
        lease=op.lease,
        expires_at=now + op.lease,
        created_at=now,
        labels=dict(op.labels),
        owner=op.owner,
    )
    budget.held += op.amount
    budget.open_reservations += 1
    state.holds_by_key[(hold.owner, hold.idempotency_key)] = hold
    state.holds_by_id[hold.reservation_id] = hold
    decision.new_holds.append(hold)
    _ledger(decision, hold, LedgerKind.HOLD, held_delta=op.amount, used_delta=0, now=now)
    return ReserveResult(
        admitted=True,
        reservation_id=hold.reservation_id,
        amount=hold.amount,
        remaining=admission.remaining,
        reason=RefusalReason.UNSPECIFIED,
        message=admission.message,
        expires_at=hold.expires_at,
    )


def _charge(state: BatchState, decision: BatchDecision, op: ChargeOp, now: datetime) -> Result:
    hold = _hold(state, op.reservation_id, op.owner)
    earlier = state.charges.get((op.reservation_id, op.idempotency_key))
    if earlier is not None:
        if earlier.amount != op.amount:
            raise AlreadyExists(
                f"idempotency_key {op.idempotency_key!r} was already used on this "
                "reservation for a charge of another amount"
            )
        return ChargeResult(
            charged=earlier.charged,
            capped=earlier.capped,
            total_charged=earlier.total_charged,
            hold_remaining=earlier.hold_remaining,
            expires_at=hold.expires_at,
            duplicate=True,
        )
    _require_live(state, decision, hold, now)
    step = rules.charge_step(hold, op.amount)
    budget = _budget(state)
    hold.charged = step.total_charged
    hold.expires_at = rules.renewed_deadline(hold, now, hold.lease)
    budget.held -= step.charged
    budget.used += step.charged
    decision.changed_holds[hold.reservation_id] = hold
    record = ChargeRecord(
        reservation_id=hold.reservation_id,
        idempotency_key=op.idempotency_key,
        amount=op.amount,
        charged=step.charged,
        capped=step.capped,
        total_charged=step.total_charged,
        hold_remaining=step.hold_remaining,
    )
    state.charges[(record.reservation_id, record.idempotency_key)] = record
    decision.new_charges.append(record)
    if step.charged:
        _ledger(decision, hold, LedgerKind.CHARGE, -step.charged, step.charged, now)
    return ChargeResult(
        charged=step.charged,
        capped=step.capped,
        total_charged=step.total_charged,
        hold_remaining=step.hold_remaining,
        expires_at=hold.expires_at,
    )


def _renew(state: BatchState, decision: BatchDecision, op: RenewOp, now: datetime) -> Result:
    hold = _hold(state, op.reservation_id, op.owner)
    _require_live(state, decision, hold, now)
    hold.expires_at = rules.renewed_deadline(hold, now, op.lease)
    hold.lease = op.lease
    decision.changed_holds[hold.reservation_id] = hold
    return RenewResult(expires_at=hold.expires_at)


def _settle(state: BatchState, decision: BatchDecision, op: SettleOp, now: datetime) -> Result:
    hold = _hold(state, op.reservation_id, op.owner)
    if hold.settlement is not None:
        if hold.settlement.used != op.used:
            raise FailedPrecondition(
                f"reservation {hold.reservation_id} is {hold.state.name}: it was settled "
                f"with used={hold.settlement.used}, not {op.used}"
            )
        return SettleResult(
            amount=hold.amount,
            charged=hold.settlement.charged,
            released=hold.settlement.released,
            overshoot=hold.settlement.overshoot,
            state=hold.state,
            duplicate=True,
        )
    if rules.lease_passed(hold, now):
        _expire(state, decision, hold, now)
    budget = _budget(state)
    step = (
        rules.settle_held(hold, op.used)
        if hold.state is HoldState.HELD
        else rules.settle_expired(hold, op.used)
    )
    if not rules.counters_fit(budget, step.used_delta, step.held_delta):
        raise FailedPrecondition(
            f"budget {budget.budget_id!r}: a settle with used={op.used} would carry its "
            "counters past 2^63-1"
        )
    if hold.state is HoldState.HELD:
        hold.state = HoldState.SETTLED
        hold.closed_at = now
        budget.open_reservations -= 1
        kind = LedgerKind.SETTLE
    else:
        kind = LedgerKind.LATE_SETTLE
    budget.held += step.held_delta
    budget.used += step.used_delta
    hold.charged = step.charged
    hold.settlement = Settlement(
        used=op.used,
        outcome=op.outcome,
        charged=step.charged,
        released=step.released,
        overshoot=step.overshoot,
    )
    decision.changed_holds[hold.reservation_id] = hold
    _ledger(decision, hold, kind, step.held_delta, step.used_delta, now)
    return SettleResult(
        amount=hold.amount,
        charged=step.charged,
        released=step.released,
        overshoot=step.overshoot,
        state=hold.state,
    )


def _require_live(state: BatchState, decision: BatchDecision, hold: Hold, now: datetime) -> None:
    """Charge and Renew need a live hold; one whose lease passed is closed here and now."""
    if rules.lease_passed(hold, now):
        _expire(state, decision, hold, now)
    if hold.state is not HoldState.HELD:
        raise FailedPrecondition(f"reservation {hold.reservation_id} is {hold.state.name}")


def _expire(state: BatchState, decision: BatchDecision, hold: Hold, now: datetime) -> None:
    budget = _budget(state)
    held_delta = rules.expire_held(hold)
    budget.held += held_delta
    budget.open_reservations -= 1
    hold.state = HoldState.EXPIRED
    hold.closed_at = now
    decision.changed_holds[hold.reservation_id] = hold
    _ledger(decision, hold, LedgerKind.EXPIRE, held_delta, 0, now)


def _budget(state: BatchState) -> Budget:
    if state.budget is None:
        raise NotFound(f"budget {state.budget_id!r} not found")
    return state.budget


def _hold(state: BatchState, reservation_id: str, owner: str) -> Hold:
    hold = state.holds_by_id.get(reservation_id)
    if hold is None or hold.budget_id != state.budget_id:
        raise NotFound(f"reservation {reservation_id} not found")
    if hold.owner != owner:
        raise PermissionDenied(f"reservation {reservation_id} belongs to another caller")
    return hold


def _ledger(
    decision: BatchDecision,
    hold: Hold,
    kind: LedgerKind,
    held_delta: int,
    used_delta: int,
    now: datetime,
) -> None:
    decision.ledger.append(
        LedgerEntry(
            budget_id=hold.budget_id,
            reservation_id=hold.reservation_id,
            kind=kind,
            held_delta=held_delta,
            used_delta=used_delta,
            at=now,
        )
    )


def expire_due(state: BatchState, now: datetime) -> BatchDecision:
    """The sweeper's rule: every live hold in state whose lease passed is closed; the job
    keeps what it charged and the rest of the hold returns to the budget."""
    decision = BatchDecision()
    for hold in state.holds_by_id.values():
        if rules.lease_passed(hold, now):
            _expire(state, decision, hold, now)
    if state.budget is not None:
        assert state.budget.held >= 0, "held went negative"
    return decision
