"""Charge and Settle: spending against a hold, by amount or by reported usage, with the
reprice at dispatch and the samples that teach a job's estimates."""

from __future__ import annotations

from datetime import datetime

from earmark.core import amounts, estimates, rules
from earmark.core.amounts import Priced
from earmark.core.model import (
    Budget,
    ChargeRecord,
    Hold,
    HoldState,
    LedgerKind,
    Outcome,
    Settlement,
)
from earmark.core.ops import ChargeOp, ChargeResult, Result, SettleOp, SettleResult
from earmark.core.state import (
    BatchDecision,
    BatchState,
    budget_of,
    expire,
    hold_of,
    ledger_entry,
    require_live,
)
from earmark.errors import AlreadyExists, FailedPrecondition


def charge(state: BatchState, decision: BatchDecision, op: ChargeOp, now: datetime) -> Result:
    hold = hold_of(state, op.reservation_id, op.owner)
    budget = budget_of(state)
    earlier = state.charges.get((op.reservation_id, op.idempotency_key))
    if earlier is not None:
        asked = amounts.spent_again(
            budget, op.amount, op.usage, hold, state.prices, earlier.price_version
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
    require_live(state, decision, hold, now)
    requested, usage_version = amounts.spent_amount(
        budget, op.amount, op.usage, hold, state.prices, now
    )
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
        ledger_entry(decision, hold, LedgerKind.CHARGE, -step.charged, step.charged, now)
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
        ledger_entry(decision, hold, LedgerKind.REPRICE, delta, 0, now)
    return True


def settle(state: BatchState, decision: BatchDecision, op: SettleOp, now: datetime) -> Result:
    hold = hold_of(state, op.reservation_id, op.owner)
    budget = budget_of(state)
    settled = hold.settlement
    if settled is not None:
        again = amounts.spent_again(
            budget, op.used, op.usage, hold, state.prices, settled.price_version
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
    used, version = amounts.spent_amount(budget, op.used, op.usage, hold, state.prices, now)
    if rules.lease_passed(hold, now):
        expire(state, decision, hold, now)
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
    ledger_entry(decision, hold, kind, step.held_delta, step.used_delta, now)
    if op.outcome is Outcome.SUCCEEDED and hold.job:
        for key in amounts.sample_keys(budget.unit, hold.job, sample_model(op, hold)):
            # The store loaded every key that sample_keys() named for this batch. A hold made
            # in this very batch was not there to be named (its Settle cannot be in the same
            # batch, since the id comes with the Reserve's answer): then one sample is
            # skipped, rather than a list not loaded written over the job's history.
            history = state.samples.get(key)
            if history is not None:
                estimates.remember(history, used)
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


def sample_model(op: SettleOp, hold: Hold) -> str:
    """The model a settled usage is remembered under: the usage's, else the shape's."""
    if op.usage is not None and op.usage.provider and op.usage.model:
        return amounts.model_key(op.usage.provider, op.usage.model)
    if hold.shape is not None:
        return amounts.model_key(hold.shape.provider, hold.shape.model)
    return ""
