"""Group admission: the operations on one budget decided in arrival order, in memory.

The store loads the budget and the holds the batch names, this module decides every
operation against that state and says what to write; the store writes it all in the
same transaction. Each operation gets its own answer or its own error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import assert_never

from earmark.core import amounts, estimates, rules
from earmark.core.amounts import Priced
from earmark.core.estimates import SampleKey
from earmark.core.model import (
    ESTIMATED,
    Budget,
    ChargeRecord,
    EstimateSource,
    Hold,
    HoldState,
    LedgerEntry,
    LedgerKind,
    Outcome,
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
from earmark.core.prices import PriceBook
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
    the holds the batch names, by id and by (owner, idempotency key), earlier charge
    answers, the price book, and the job samples the batch reads or adds to (shared by the
    states of one transaction, since jobs span budgets of one unit)."""

    budget_id: str
    budget: Budget | None
    holds_by_id: dict[str, Hold] = field(default_factory=dict)
    holds_by_key: dict[tuple[str, str], Hold] = field(default_factory=dict)
    charges: dict[tuple[str, str], ChargeRecord] = field(default_factory=dict)
    prices: PriceBook = field(default_factory=PriceBook)
    samples: dict[SampleKey, list[int]] = field(default_factory=dict)


@dataclass(slots=True)
class BatchDecision:
    """Every answer in arrival order, and every write the answers depend on."""

    results: list[Result | EarmarkError] = field(default_factory=list)
    new_holds: list[Hold] = field(default_factory=list)
    changed_holds: dict[str, Hold] = field(default_factory=dict)
    new_charges: list[ChargeRecord] = field(default_factory=list)
    ledger: list[LedgerEntry] = field(default_factory=list)
    # Job samples that settles added to; their whole lists are written back.
    samples: set[SampleKey] = field(default_factory=set)

    def writes_anything(self) -> bool:
        return bool(self.new_holds or self.changed_holds or self.new_charges or self.ledger)


def sample_keys(state: BatchState, ops: list[Op]) -> set[SampleKey]:
    """The job samples deciding ops will read or add to: the store loads exactly these."""
    budget = state.budget
    if budget is None:
        return set()
    keys: set[SampleKey] = set()
    for op in ops:
        match op:
            case ReserveOp(amount=0, job=job) if job:
                shape = op.shape
                if shape is None:
                    keys.add((budget.unit, job, ""))
                elif shape.names_model_only():
                    keys.add((budget.unit, job, amounts.model_key(shape.provider, shape.model)))
            case SettleOp(outcome=Outcome.SUCCEEDED):
                hold = state.holds_by_id.get(op.reservation_id)
                if hold is not None and hold.job:
                    keys.update(amounts.sample_keys(budget.unit, hold.job, _sample_model(op, hold)))
    return keys


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
        if not _same_request(existing, op):
            # The other reservation's request is not the caller's business: name nothing.
            raise AlreadyExists(
                f"idempotency_key {op.idempotency_key!r} was already used on budget "
                f"{budget.budget_id!r} for a reservation of another amount, shape or job"
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
            source=existing.source,
            price_version=existing.price_version,
        )
    priced = amounts.reserve_amount(budget, op, state.prices, state.samples, now)
    amount = max(1, priced.amount)
    if not rules.counters_fit(budget, 0, amount):
        raise FailedPrecondition(
            f"budget {budget.budget_id!r}: a hold of {amount} would carry its counters "
            "past 2^63-1; settle holds or start a new budget"
        )
    admission = rules.admit(budget, amount)
    if not admission.admitted:
        return ReserveResult(
            admitted=False,
            reservation_id="",
            amount=amount,
            remaining=admission.remaining,
            reason=RefusalReason.INSUFFICIENT_BUDGET,
            message=admission.message,
            expires_at=None,
            source=priced.source,
            price_version=priced.price_version,
        )
    hold = Hold(
        reservation_id=op.new_reservation_id,
        budget_id=budget.budget_id,
        idempotency_key=op.idempotency_key,
        amount=amount,
        lease=op.lease,
        expires_at=now + op.lease,
        created_at=now,
        labels=dict(op.labels),
        owner=op.owner,
        source=priced.source,
        price_version=priced.price_version,
        shape=op.shape,
        job=op.job,
    )
    budget.held += amount
    budget.open_reservations += 1
    state.holds_by_key[(hold.owner, hold.idempotency_key)] = hold
    state.holds_by_id[hold.reservation_id] = hold
    decision.new_holds.append(hold)
    _ledger(decision, hold, LedgerKind.HOLD, held_delta=amount, used_delta=0, now=now)
    return ReserveResult(
        admitted=True,
        reservation_id=hold.reservation_id,
        amount=hold.amount,
        remaining=admission.remaining,
        reason=RefusalReason.UNSPECIFIED,
        message=admission.message,
        expires_at=hold.expires_at,
        source=hold.source,
        price_version=hold.price_version,
    )


def _same_request(hold: Hold, op: ReserveOp) -> bool:
    """A retried Reserve asks what the first asked: the same amount, the same shape (its
    price may have moved since), or an estimate for the same job."""
    if hold.shape != op.shape or hold.job != op.job:
        return False
    if op.amount > 0:
        return hold.source is EstimateSource.CALLER and hold.amount == op.amount
    if op.shape is not None and not op.shape.names_model_only():
        return hold.source is EstimateSource.SHAPE
    return hold.source in ESTIMATED


def _charge(state: BatchState, decision: BatchDecision, op: ChargeOp, now: datetime) -> Result:
    hold = _hold(state, op.reservation_id, op.owner)
    budget = _budget(state)
    earlier = state.charges.get((op.reservation_id, op.idempotency_key))
    if earlier is not None:
        asked: int | None = op.amount
        if op.usage is not None:
            asked = amounts.usage_amount_at(
                budget, op.usage, hold, state.prices, earlier.price_version
            )
        if asked != earlier.amount:
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
            price_version=earlier.price_version,
            requested=earlier.amount,
        )
    _require_live(state, decision, hold, now)
    requested, usage_version = op.amount, 0
    if op.usage is not None:
        requested, usage_version = amounts.usage_amount(budget, op.usage, hold, state.prices, now)
    repriced = amounts.repriced(budget, hold, state.prices, now)
    if repriced is not None and not _reprice(decision, budget, hold, repriced, now):
        # The new price does not fit: nothing is charged, and the worker must not dispatch.
        return _record_charge(state, decision, hold, op, requested, usage_version, None)
    step = rules.charge_step(hold, requested)
    hold.charged = step.total_charged
    hold.expires_at = rules.renewed_deadline(hold, now, hold.lease)
    budget.held -= step.charged
    budget.used += step.charged
    decision.changed_holds[hold.reservation_id] = hold
    if step.charged:
        _ledger(decision, hold, LedgerKind.CHARGE, -step.charged, step.charged, now)
    return _record_charge(state, decision, hold, op, requested, usage_version, step)


def _record_charge(
    state: BatchState,
    decision: BatchDecision,
    hold: Hold,
    op: ChargeOp,
    requested: int,
    usage_version: int,
    step: rules.ChargeStep | None,
) -> ChargeResult:
    """Keeps the answer for retries and returns it; no step means nothing was charged."""
    if step is None:
        room = hold.amount - hold.charged
        step = rules.ChargeStep(
            charged=0, capped=True, total_charged=hold.charged, hold_remaining=room
        )
    version = usage_version if op.usage is not None else hold.price_version
    record = ChargeRecord(
        reservation_id=hold.reservation_id,
        idempotency_key=op.idempotency_key,
        amount=requested,
        charged=step.charged,
        capped=step.capped,
        total_charged=step.total_charged,
        hold_remaining=step.hold_remaining,
        price_version=version,
    )
    state.charges[(record.reservation_id, record.idempotency_key)] = record
    decision.new_charges.append(record)
    return ChargeResult(
        charged=step.charged,
        capped=step.capped,
        total_charged=step.total_charged,
        hold_remaining=step.hold_remaining,
        expires_at=hold.expires_at,
        price_version=version,
        requested=requested,
    )


def _reprice(
    decision: BatchDecision, budget: Budget, hold: Hold, priced: Priced, now: datetime
) -> bool:
    """Moves a hold to its new ceiling if the budget has room for the difference."""
    amount = max(1, priced.amount)
    delta = amount - hold.amount
    if delta > 0 and not (
        rules.counters_fit(budget, 0, delta) and rules.admit(budget, delta).admitted
    ):
        return False
    hold.amount = amount
    hold.price_version = priced.price_version
    budget.held += delta
    decision.changed_holds[hold.reservation_id] = hold
    if delta:
        _ledger(decision, hold, LedgerKind.REPRICE, delta, 0, now)
    return True


def _renew(state: BatchState, decision: BatchDecision, op: RenewOp, now: datetime) -> Result:
    hold = _hold(state, op.reservation_id, op.owner)
    _require_live(state, decision, hold, now)
    hold.expires_at = rules.renewed_deadline(hold, now, op.lease)
    hold.lease = op.lease
    decision.changed_holds[hold.reservation_id] = hold
    return RenewResult(expires_at=hold.expires_at)


def _settle(state: BatchState, decision: BatchDecision, op: SettleOp, now: datetime) -> Result:
    hold = _hold(state, op.reservation_id, op.owner)
    budget = _budget(state)
    settled = hold.settlement
    if settled is not None:
        again: int | None = op.used
        if op.usage is not None:
            again = amounts.usage_amount_at(
                budget, op.usage, hold, state.prices, settled.price_version
            )
        if settled.used != again:
            raise FailedPrecondition(
                f"reservation {hold.reservation_id} is {hold.state.name}: it was settled "
                f"with used={settled.used}, not {again}"
            )
        return SettleResult(
            amount=hold.amount,
            charged=settled.charged,
            released=settled.released,
            overshoot=settled.overshoot,
            state=hold.state,
            duplicate=True,
            used=settled.used,
            price_version=settled.price_version,
            source=hold.source,
        )
    used, version = op.used, 0
    if op.usage is not None:
        used, version = amounts.usage_amount(budget, op.usage, hold, state.prices, now)
    if rules.lease_passed(hold, now):
        _expire(state, decision, hold, now)
    step = (
        rules.settle_held(hold, used)
        if hold.state is HoldState.HELD
        else rules.settle_expired(hold, used)
    )
    if not rules.counters_fit(budget, step.used_delta, step.held_delta):
        raise FailedPrecondition(
            f"budget {budget.budget_id!r}: a settle with used={used} would carry its "
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
        used=used,
        outcome=op.outcome,
        charged=step.charged,
        released=step.released,
        overshoot=step.overshoot,
        price_version=version,
    )
    decision.changed_holds[hold.reservation_id] = hold
    _ledger(decision, hold, kind, step.held_delta, step.used_delta, now)
    if op.outcome is Outcome.SUCCEEDED and hold.job:
        for key in amounts.sample_keys(budget.unit, hold.job, _sample_model(op, hold)):
            # The store loaded every key that sample_keys() named for this batch.
            estimates.remember(state.samples[key], used)
            decision.samples.add(key)
    return SettleResult(
        amount=hold.amount,
        charged=step.charged,
        released=step.released,
        overshoot=step.overshoot,
        state=hold.state,
        used=used,
        price_version=version,
        source=hold.source,
    )


def _sample_model(op: SettleOp, hold: Hold) -> str:
    """The model a settled usage is remembered under: the usage's, else the shape's."""
    if op.usage is not None and op.usage.provider and op.usage.model:
        return amounts.model_key(op.usage.provider, op.usage.model)
    if hold.shape is not None:
        return amounts.model_key(hold.shape.provider, hold.shape.model)
    return ""


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
