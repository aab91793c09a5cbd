"""Charge and Settle: spending against a hold, by amount or by reported usage, with the
reprice at dispatch and the samples that teach a job's estimates."""

from __future__ import annotations

from datetime import datetime

from earmark.core import amounts, estimates, records, rules
from earmark.core.amounts import Priced
from earmark.core.model import (
    OPEN_STATES,
    Budget,
    ChargeRecord,
    Hold,
    HoldState,
    LedgerKind,
    Outcome,
    Settlement,
)
from earmark.core.ops import (
    ChargeOp,
    ChargeResult,
    ReleaseOp,
    RepriceOp,
    RepriceResult,
    ResolveOp,
    Result,
    SettleOp,
    SettleResult,
)
from earmark.core.prices import Usage
from earmark.core.state import (
    BatchDecision,
    BatchState,
    budget_of,
    budgets_of,
    close,
    counters_of,
    hold_of,
    lapse,
    move,
    not_held,
    require_live,
)
from earmark.errors import AlreadyExists, FailedPrecondition, Reason


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
                "reservation for a charge of another amount",
                Reason.KEY_REUSED,
                field="idempotency_key",
                reservation_id=op.reservation_id,
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
            output_per_mtok=_output_rate(state, hold, op.usage, earlier.price_version),
        )
    require_live(state, decision, hold, now)
    requested, usage_version = amounts.spent_amount(
        budget, op.amount, op.usage, hold, state.prices, now
    )
    repriced = amounts.repriced(budget, hold, state.prices, now)
    if repriced is not None and not _reprice(state, decision, hold, repriced, now):
        # The new price does not fit: nothing is charged, and the worker must not dispatch.
        return _record_charge(state, decision, hold, op, requested, usage_version, None)
    step = rules.charge_step(hold, requested)
    if step.charged:
        move(state, decision, hold, LedgerKind.CHARGE, -step.charged, step.charged, now)
    hold.charged = step.total_charged
    hold.expires_at = rules.renewed_deadline(hold, now, hold.lease)
    # From here the worker may call the provider, unless it was told to stop before any of
    # it (capped at nothing): a hold whose lease passes after this goes into doubt.
    was_dispatched = hold.dispatched
    hold.dispatched = hold.dispatched or step.charged > 0 or not step.capped
    if hold.dispatched and not was_dispatched:
        records.sent(decision.calls, hold, op.usage, now)
    decision.changed_holds[hold.reservation_id] = hold
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
        output_per_mtok=_output_rate(state, hold, op.usage, usage_version),
    )


def _output_rate(state: BatchState, hold: Hold, usage: Usage | None, version: int) -> int:
    """The output rate of the price version a Charge by usage was priced at (0: it was
    not priced, as on a tokens budget or by amount): with hold_remaining it tells a worker
    how many output tokens the rest of its hold buys."""
    if usage is None or version == 0:
        return 0
    provider, model = amounts.usage_model(usage, hold)
    price = state.prices.version(provider, model, version)
    return 0 if price is None else price.output_per_mtok


def _reprice(
    state: BatchState, decision: BatchDecision, hold: Hold, priced: Priced, now: datetime
) -> bool:
    """Moves a hold to its new ceiling if every one of its budgets has room for the
    difference (in the hold's phase)."""
    amount = amounts.held(priced)
    delta = amount - hold.amount
    budgets = budgets_of(state, hold)
    if any(hold.period_on(i) != b.period_no for i, b in enumerate(budgets)):
        # A hold of a closed period keeps the price it was reserved at: its budgets' room is
        # another period's, which must neither pay for it nor refuse it.
        return True
    if delta > 0:
        if not all(rules.counters_fit(budget, 0, delta) for budget in budgets):
            return False
        admissions = [rules.admit(budget, delta, hold.phase) for budget in budgets]
        if not all(admission.admitted for admission in admissions):
            return False
        for budget, admission in zip(budgets, admissions, strict=True):
            if admission.over_limit:
                flag_overage(decision, budget, now)
    hold.amount = amount
    hold.price_version = priced.price_version
    decision.changed_holds[hold.reservation_id] = hold
    if delta:
        move(state, decision, hold, LedgerKind.REPRICE, delta, 0, now)
    return True


def flag_overage(decision: BatchDecision, budget: Budget, now: datetime) -> None:
    """A SOFT budget admitted past its limit: it says since when, until PutBudget clears it."""
    if budget.overage_since is None:
        budget.overage_since = now
        decision.touched[budget.budget_id] = budget


def settle(state: BatchState, decision: BatchDecision, op: SettleOp, now: datetime) -> Result:
    hold = hold_of(state, op.reservation_id, op.owner)
    budget = budget_of(state)
    if hold.settlement is not None:
        return _settled_again(state, hold, op.used, op.usage)
    used, version = amounts.spent_amount(budget, op.used, op.usage, hold, state.prices, now)
    if rules.lease_passed(hold, now):
        lapse(state, decision, hold, now)
    if op.outcome is Outcome.UNKNOWN and hold.state in OPEN_STATES:
        return _doubt(state, decision, hold, used, version, now)
    result = _close_with(state, decision, hold, used, version, op.outcome, LedgerKind.SETTLE, now)
    if op.usage is not None:
        records.reported(decision.calls, hold, op.usage)
    if op.outcome is Outcome.SUCCEEDED and hold.job:
        for key in amounts.sample_keys(budget, hold.job, sample_model(op, hold)):
            # The store loaded every key that sample_keys() named for this batch. A hold made
            # in this very batch was not there to be named (its Settle cannot be in the same
            # batch, since the id comes with the Reserve's answer): then one sample is
            # skipped, rather than a list not loaded written over the job's history.
            history = state.samples.get(key)
            if history is not None:
                estimates.remember(history, used)
                decision.samples.add(key)
    return result


def resolve(state: BatchState, decision: BatchDecision, op: ResolveOp, now: datetime) -> Result:
    """An operator settles an in-doubt hold at what the provider billed: like a Settle,
    what it used is charged to every budget of the hold and the rest returns."""
    hold = hold_of(state, op.reservation_id, None)
    budget = budget_of(state)
    if hold.settlement is not None:
        return _settled_again(state, hold, op.used, op.usage)
    if rules.lease_passed(hold, now):
        lapse(state, decision, hold, now)
    if hold.state is not HoldState.IN_DOUBT:
        hint = " (ReleaseHold closes a HELD one)" if hold.state is HoldState.HELD else ""
        raise not_held(hold, f": only an IN_DOUBT hold is resolved{hint}")
    used, version = amounts.spent_amount(budget, op.used, op.usage, hold, state.prices, now)
    result = _close_with(
        state, decision, hold, used, version, Outcome.UNSPECIFIED, LedgerKind.RESOLVE, now
    )
    if op.usage is not None:
        records.reported(decision.calls, hold, op.usage, op.evidence)
    else:
        records.resolved(decision.calls, hold, op.evidence)
    return result


def reprice(state: BatchState, decision: BatchDecision, op: RepriceOp, now: datetime) -> Result:
    """A hold reserved by shape, held and not yet charged, moved to the price now in effect
    when every one of its budgets has room for the difference. One that no longer fits a
    HARD budget keeps its old amount and version: its first Charge prices it again and,
    when it still does not fit, is answered capped, so its worker does not dispatch."""
    hold = hold_of(state, op.reservation_id, None)
    budget = budget_of(state)
    unchanged = RepriceResult(False, hold.amount, hold.price_version)
    if hold.state is not HoldState.HELD or hold.charged or rules.lease_passed(hold, now):
        return unchanged
    priced = amounts.repriced(budget, hold, state.prices, now)
    if priced is None or not _reprice(state, decision, hold, priced, now):
        return unchanged
    return RepriceResult(True, hold.amount, hold.price_version)


def release(state: BatchState, decision: BatchDecision, op: ReleaseOp, now: datetime) -> Result:
    """An operator closes an open hold that nobody will settle: it keeps what was charged,
    the rest returns. A worker's Settle after this is a late settle, as after an expiry."""
    hold = hold_of(state, op.reservation_id, None)
    if hold.state not in OPEN_STATES:
        raise not_held(hold, ": nothing to release")
    was_in_doubt = hold.state is HoldState.IN_DOUBT
    released = close(state, decision, hold, LedgerKind.RELEASE, now)
    return SettleResult(
        amount=hold.amount,
        charged=hold.charged,
        released=released,
        overshoot=0,
        state=hold.state,
        used=hold.charged,
        price_version=hold.price_version,
        source=hold.source,
        was_in_doubt=was_in_doubt,
    )


def _doubt(
    state: BatchState, decision: BatchDecision, hold: Hold, used: int, version: int, now: datetime
) -> SettleResult:
    """The caller cannot tell whether the work ran (OUTCOME_UNKNOWN): the usage it gives is
    charged (within the hold, as a Charge is), the hold keeps the rest, and it goes into
    doubt at once, so that what the provider may still bill stays held until ResolveHold
    or a later Settle closes it. Said again, it charges nothing more."""
    was_in_doubt = hold.state is HoldState.IN_DOUBT
    step = rules.charge_step(hold, max(0, used - hold.charged))
    if step.charged:
        move(state, decision, hold, LedgerKind.CHARGE, -step.charged, step.charged, now)
        hold.charged = step.total_charged
    if not hold.dispatched:
        hold.dispatched = True
        records.sent(decision.calls, hold, None, now)
    if not was_in_doubt:
        # In doubt from now: the lease no longer matters, and doubted_since is this moment.
        hold.expires_at = now
        move(state, decision, hold, LedgerKind.IN_DOUBT, 0, 0, now)
        hold.state = HoldState.IN_DOUBT
        decision.doubted.append(hold)
    decision.changed_holds[hold.reservation_id] = hold
    return SettleResult(
        amount=hold.amount,
        charged=hold.charged,
        released=0,
        overshoot=max(0, used - hold.amount),
        state=hold.state,
        used=used,
        price_version=version,
        source=hold.source,
        was_in_doubt=was_in_doubt,
        used_delta=step.charged,
    )


def _settled_again(state: BatchState, hold: Hold, used: int, usage: Usage | None) -> SettleResult:
    """A repeated Settle (or resolve) answers what the first did, if it says the same."""
    settled = hold.settlement
    assert settled is not None
    again = amounts.spent_again(
        budget_of(state), used, usage, hold, state.prices, settled.price_version
    )
    if settled.used != again:
        raise FailedPrecondition(
            f"reservation {hold.reservation_id} is {hold.state.name}: it was settled "
            f"with used={settled.used}, not {again}",
            Reason.SETTLE_MISMATCH,
            reservation_id=hold.reservation_id,
            settled_used=str(settled.used),
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


def _close_with(
    state: BatchState,
    decision: BatchDecision,
    hold: Hold,
    used: int,
    version: int,
    outcome: Outcome,
    kind: LedgerKind,
    now: datetime,
) -> SettleResult:
    """Settles the hold at used: an open one is charged it on every budget and the rest
    returns (kind); an expired one records the spend beyond its charges (a late settle)."""
    step = (
        rules.settle_held(hold, used)
        if hold.state in OPEN_STATES
        else rules.settle_expired(hold, used)
    )
    for budget, counters in zip(budgets_of(state, hold), counters_of(state, hold), strict=True):
        if not rules.counters_fit(counters, step.used_delta, step.held_delta):
            raise FailedPrecondition(
                f"budget {budget.budget_id!r}: a settle with used={used} would carry its "
                "counters past 2^63-1",
                Reason.COUNTER_OVERFLOW,
                budget_id=budget.budget_id,
            )
    was_in_doubt = hold.state is HoldState.IN_DOUBT
    opened = 0
    if hold.state in OPEN_STATES:
        hold.state = HoldState.SETTLED
        hold.closed_at = now
        opened = -1
        if was_in_doubt:
            decision.undoubted.append(hold.reservation_id)
    else:
        kind = LedgerKind.LATE_SETTLE
    hold.charged = step.charged
    hold.settlement = Settlement(
        used=used,
        outcome=outcome,
        charged=step.charged,
        released=step.released,
        overshoot=step.overshoot,
        price_version=version,
    )
    decision.changed_holds[hold.reservation_id] = hold
    move(state, decision, hold, kind, step.held_delta, step.used_delta, now, opened=opened)
    return SettleResult(
        amount=hold.amount,
        charged=step.charged,
        released=step.released,
        overshoot=step.overshoot,
        state=hold.state,
        used=used,
        price_version=version,
        source=hold.source,
        was_in_doubt=was_in_doubt,
        used_delta=step.used_delta,
    )


def sample_model(op: SettleOp, hold: Hold) -> str:
    """The model a settled usage is remembered under: the usage's, else the shape's."""
    if op.usage is not None and op.usage.provider and op.usage.model:
        return amounts.model_key(op.usage.provider, op.usage.model)
    if hold.shape is not None:
        return amounts.model_key(hold.shape.provider, hold.shape.model)
    return ""
