"""Group admission: the operations on one budget decided in arrival order, in memory.

The store loads the budget and the holds the batch names, this module decides every
operation against that state and says what to write; the store writes it all in the
same transaction. Each operation gets its own answer or its own error.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import assert_never

from earmark.core import amounts, calls, notices, ratelimit, records, resets, rules, windows
from earmark.core.amounts import Priced
from earmark.core.calls import RESERVE_CHARGE_KEY
from earmark.core.estimates import SampleKey
from earmark.core.model import (
    ESTIMATED,
    Budget,
    BudgetMode,
    EstimateSource,
    Hold,
    HoldState,
    LedgerKind,
    Outcome,
    OveragePolicy,
    RefusalReason,
)
from earmark.core.ops import (
    ChargeOp,
    ChargeResult,
    Op,
    ReleaseOp,
    RenewOp,
    RenewResult,
    RepriceOp,
    ReserveOp,
    ReserveResult,
    ResolveOp,
    Result,
    SettleOp,
)
from earmark.core.spend import (
    charge,
    flag_overage,
    release,
    reprice,
    resolve,
    sample_model,
    settle,
)
from earmark.core.state import (
    BatchDecision,
    BatchState,
    budget_of,
    hold_of,
    lapse,
    move,
    require_live,
)
from earmark.errors import (
    AlreadyExists,
    EarmarkError,
    FailedPrecondition,
    Reason,
    budget_not_found,
)

__all__ = ["BatchDecision", "BatchState", "decide_batch", "expire_due", "sample_keys"]


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
                    keys.add(amounts.sample_key(budget, job, ""))
                elif shape.names_model_only() or amounts.ceiling_needs_samples(budget, shape):
                    model = amounts.model_key(shape.provider, shape.model)
                    keys.add(amounts.sample_key(budget, job, model))
            case SettleOp(outcome=Outcome.SUCCEEDED):
                hold = state.holds_by_id.get(op.reservation_id)
                if hold is not None and hold.job:
                    keys.update(amounts.sample_keys(budget, hold.job, sample_model(op, hold)))
    return keys


def decide_batch(state: BatchState, ops: list[Op], now: datetime) -> BatchDecision:
    """Decides ops in order against state, mutating state as each one commits in memory."""
    decision = BatchDecision()
    roll_due(state, decision, now)
    before = _counters(state)
    spent = _spent(state)
    for op in ops:
        try:
            result = _decide_one(state, decision, op, now)
            decision.results.append(_in_unit(state, result))
        except EarmarkError as error:
            decision.results.append(error)
        # Each operation's own change of spend decides what it noticed, however the
        # operations were batched.
        _notice(state, decision, spent, now)
    _notice_doubted(decision, now)
    _assert_pairs(state, decision, before)
    return decision


def roll_due(state: BatchState, decision: BatchDecision, now: datetime) -> None:
    """Closes the period of every locked budget whose period has ended (core.resets): the
    closed period's counters are kept for the holds reserved in it, and the budget starts
    again at zero. The budgets are shared by the states of a transaction: the first
    decision closes each."""
    for budget in state.budgets.values():
        closed = resets.roll(budget, now)
        if closed is None:
            continue
        key = (closed.budget_id, closed.period_no)
        state.closed[key] = closed
        decision.closed_new[key] = closed
        decision.touched[budget.budget_id] = budget


def _counters(state: BatchState) -> dict[tuple[str, int], tuple[int, int]]:
    """(used, held) of every period the batch may move: each budget's current and the
    closed ones loaded."""
    counters = {(b.budget_id, b.period_no): (b.used, b.held) for b in state.budgets.values()}
    counters.update({key: (c.used, c.held) for key, c in state.closed.items()})
    return counters


def _spent(state: BatchState) -> dict[tuple[str, int], int]:
    """used + held of every period the batch may move, as _counters keys them."""
    return {key: used + held for key, (used, held) in _counters(state).items()}


def _notice(
    state: BatchState,
    decision: BatchDecision,
    spent: dict[tuple[str, int], int],
    now: datetime,
) -> None:
    """The notices of the spend that moved since spent was taken (which it updates): the
    thresholds reached and SOFT limits passed, in each budget's current period, and in a
    closed period a hold of it settled past its hold (the events' unique key drops one
    that period already had)."""
    for budget_id in sorted(decision.touched):
        budget = decision.touched[budget_id]
        key = (budget_id, budget.period_no)
        was, spent[key] = spent.get(key, 0), budget.used + budget.held
        if budget.threshold_bps or budget.overage_policy is OveragePolicy.SOFT:
            decision.events.extend(notices.budget_events(budget, was, now))
    for key in sorted({*decision.closed_moved, *decision.closed_new}):
        closed = state.closed[key]
        was, spent[key] = spent.get(key, 0), closed.used + closed.held
        owner = state.budgets.get(key[0])
        if owner is not None and closed.used + closed.held > was:
            decision.events.extend(notices.closed_events(owner, closed, was, now))


def _notice_doubted(decision: BatchDecision, now: datetime) -> None:
    """A hold.in_doubt notice for each hold the batch left in doubt."""
    for hold in decision.doubted:
        if hold.state is HoldState.IN_DOUBT:
            decision.events.append(notices.in_doubt_event(hold, now))


def _assert_pairs(
    state: BatchState, decision: BatchDecision, before: dict[tuple[str, int], tuple[int, int]]
) -> None:
    """What moved on every budget's period equals what the ledger rows the batch writes say
    moved (TigerBeetle's pair assertions): a move that skipped the ledger, or a ledger row
    that moved nothing, fails here before anything is written."""
    moved: dict[tuple[str, int], tuple[int, int]] = {}
    for entry in decision.ledger:
        key = (entry.budget_id, entry.period_no)
        used, held = moved.get(key, (0, 0))
        moved[key] = (used + entry.used_delta, held + entry.held_delta)
    named = {key[0] for key in moved}
    assert named <= set(decision.touched) | {key[0] for key in decision.closed_moved} | {
        key[0] for key in decision.closed_new
    }, "a ledger row names a budget not touched"
    after = _counters(state)
    for key, (used, held) in after.items():
        was_used, was_held = before.get(key, (0, 0))
        assert (used - was_used, held - was_held) == moved.get(key, (0, 0)), (
            f"budget {key[0]!r} moved otherwise than its ledger rows say in period {key[1]}"
        )
        assert held >= 0, "held went negative"
    assert set(moved) <= set(after), "a ledger row names a period not loaded"
    for budget in state.budgets.values():
        assert budget.open_reservations >= 0, "open_reservations went negative"


def _in_unit(state: BatchState, result: Result) -> Result:
    """The result labelled with its budget's unit, for the counters of units; a Reserve's
    with when its budget's period ends."""
    if state.budget is None or isinstance(result, RenewResult):
        return result
    if isinstance(result, ReserveResult):
        return replace(result, unit=state.budget.unit, resets_at=state.budget.period_end)
    return replace(result, unit=state.budget.unit)


def _decide_one(state: BatchState, decision: BatchDecision, op: Op, now: datetime) -> Result:
    match op:
        case ReserveOp():
            return _reserve(state, decision, op, now)
        case ChargeOp():
            return charge(state, decision, op, now)
        case RenewOp():
            return _renew(state, decision, op, now)
        case SettleOp():
            return settle(state, decision, op, now)
        case ResolveOp():
            return resolve(state, decision, op, now)
        case ReleaseOp():
            return release(state, decision, op, now)
        case RepriceOp():
            return reprice(state, decision, op, now)
        case _:
            assert_never(op)


def _reserve(state: BatchState, decision: BatchDecision, op: ReserveOp, now: datetime) -> Result:
    budget = budget_of(state)
    _require_account_gate(state, budget, op)
    existing = state.holds_by_key.get((op.owner, op.idempotency_key))
    if existing is not None:
        return _again(state, existing, op, budget)
    scope = _scope(state, budget, op)
    priced = amounts.reserve_amount(budget, op, state.prices, state.samples, now)
    if op.charge is not None:
        # Priced before anything moves: a charge that cannot be priced fails the Reserve
        # alone, with nothing held.
        amounts.usage_amount_of(budget, op.charge, op.shape, "", state.prices, now)
    amount = max(1, priced.amount)
    for each in scope:
        if not rules.counters_fit(each, 0, amount):
            raise FailedPrecondition(
                f"budget {each.budget_id!r}: a hold of {amount} would carry its counters "
                "past 2^63-1; settle holds or start a new budget",
                Reason.COUNTER_OVERFLOW,
                budget_id=each.budget_id,
            )
    would = _budget_rates(scope, amount, now)
    if isinstance(would, ReserveResult):
        return replace(would, source=priced.source, price_version=priced.price_version)
    window = state.windows.get(op.account) if op.admissions_per_minute else None
    if window is not None:
        rate = ratelimit.admit_rate(window, now, op.admissions_per_minute)
        decision.windows.add(op.account)
        if not rate.allowed:
            message = f"account {op.account!r} has made {op.admissions_per_minute} admissions"
            return _refused(
                amount, priced, RefusalReason.RATE_LIMITED, budget.remaining(),
                f"{message} this minute", retry_after=rate.retry_after,
            )  # fmt: skip
    # An observing budget never lowers a call's output: degrade is decided on the enforcing
    # budgets alone, and an observing one that has no room says so in would_refuse.
    enforcing = [each for each in scope if each.mode is BudgetMode.ENFORCE]
    degrade = calls.degrade(budget, enforcing, op, priced, state.prices, now)
    if degrade is not None:
        priced, amount = degrade, max(1, degrade.amount)
    admissions = []
    for each in scope:
        admission = rules.admit(each, amount, op.phase)
        nested = len(scope) > 1
        message = f"budget {each.budget_id!r}: {admission.message}"
        if not admission.admitted and each.mode is BudgetMode.OBSERVE:
            # Shadow mode: admitted, and told what an enforcing budget would have said.
            if would is None:
                would = _Would(RefusalReason.INSUFFICIENT_BUDGET, each.budget_id)
            cap = each.cap(op.phase)
            admission = rules.Admission(
                admitted=True,
                remaining=admission.remaining,
                message=f"admitted in OBSERVE mode; ENFORCE would refuse: {admission.message}",
                over_limit=cap is not None and each.used + each.held + amount > cap,
                policy=admission.policy,
            )
        if not admission.admitted:
            # All or nothing: the first budget without room refuses, and nothing is held.
            if window is not None:
                ratelimit.give_back(window)
            return _refused(
                amount, priced, RefusalReason.INSUFFICIENT_BUDGET, admission.remaining,
                message if nested else admission.message,
                refused_budget_id=each.budget_id, policy=admission.policy,
            )  # fmt: skip
        admissions.append(admission)
    for each in scope:
        if windows.limited(each):
            windows.count(each, amount)
            decision.touched[each.budget_id] = each
    hold = _new_hold(op, budget, amount, priced, now)
    if any(each.period_no for each in scope):
        hold.periods = tuple(each.period_no for each in scope)
    state.holds_by_key[(hold.owner, hold.idempotency_key)] = hold
    state.holds_by_id[hold.reservation_id] = hold
    decision.new_holds.append(hold)
    move(state, decision, hold, LedgerKind.HOLD, amount, 0, now, opened=1)
    for each, admission in zip(scope, admissions, strict=True):
        if admission.over_limit:
            flag_overage(decision, each, now)
    charged = 0
    if op.charge is not None:
        prompt = ChargeOp(hold.reservation_id, RESERVE_CHARGE_KEY, 0, op.owner, op.charge)
        result = charge(state, decision, prompt, now)
        assert isinstance(result, ChargeResult)
        charged = result.charged
        # Made dispatched, the call is sent now: its record says so.
        records.sent(decision.calls, hold, op.charge, now)
    return replace(
        _admitted(hold, budget, admissions),
        charged=charged,
        max_output_tokens=priced.max_output_tokens,
        degraded=degrade is not None,
        would_refuse=None if would is None else would.reason,
        would_refuse_budget_id="" if would is None else would.budget_id,
    )


@dataclass(frozen=True, slots=True)
class _Would:
    """What an OBSERVE budget would have refused a Reserve for, and which budget."""

    reason: RefusalReason
    budget_id: str


def _budget_rates(scope: list[Budget], amount: int, now: datetime) -> ReserveResult | _Would | None:
    """The rate windows of the Reserve's budgets: a refusal when an enforcing budget has no
    room in a window (naming the first, with the longest wait of them all, so that a retry
    then fits every one), else what the first observing one would have refused, else None.
    Nothing is counted here: an admission counts in every window."""
    would = None
    refusals = []
    for each in scope:
        if not windows.limited(each):
            continue
        windows.advance(each.rate, now)
        refusal = windows.check(each, amount, now)
        if refusal is None:
            continue
        if each.mode is BudgetMode.OBSERVE:
            would = would or _Would(RefusalReason.RATE_LIMITED, each.budget_id)
        else:
            refusals.append((each, refusal))
    if not refusals:
        return would
    each, refusal = refusals[0]
    waits = [r.retry_after for _, r in refusals]
    retry_after = None if None in waits else max(w for w in waits if w is not None)
    if refusal.retry_after is None:
        message = f"a hold of {amount} is more than its {refusal.per_minute} units a minute"
    else:
        message = f"it has admitted its {refusal.per_minute} {refusal.window} this minute"
    return ReserveResult(
        admitted=False,
        reservation_id="",
        amount=amount,
        remaining=each.remaining(),
        reason=RefusalReason.RATE_LIMITED,
        message=f"budget {each.budget_id!r}: {message}",
        expires_at=None,
        retry_after=retry_after,
        refused_budget_id=each.budget_id,
        policy=each.overage_policy,
    )


def _require_account_gate(state: BatchState, budget: Budget, op: ReserveOp) -> None:
    """A billing-cycle budget answers to one gate whatever names it: only a Reserve by its
    account may hold on it, since that is the Reserve whose limit the service read (failing
    closed when it is unknown) and whose admission the account's rate counts. By its id, as
    budget_id or in also_budget_ids, it would skip both. Checked here, where the rows are
    known, so that no caller of the store gets around it; it fails that operation alone,
    before it changes anything, and before a retried key is answered."""
    if budget.account is not None and budget.account != op.account:
        raise _needs_account(budget, "budget_id")
    if op.account and budget.account is None:
        # A budget made by PutBudget under the id of the account's cycle: holding on it
        # would skip the plan's limit and the meter.
        raise FailedPrecondition(
            f"account: budget {budget.budget_id!r} has the id of account {op.account!r}'s "
            "billing-cycle budget but was made by PutBudget, which must not take a cycle's id",
            Reason.CYCLE_BUDGET_NEEDS_ACCOUNT,
            field="account",
            budget_id=budget.budget_id,
        )
    for budget_id in op.also_budget_ids:
        other = state.budgets.get(budget_id)
        if other is not None and other.account is not None:
            raise _needs_account(other, "also_budget_ids")


def _needs_account(budget: Budget, named_as: str) -> FailedPrecondition:
    return FailedPrecondition(
        f"{named_as}: budget {budget.budget_id!r} is the billing-cycle budget of account "
        f"{budget.account!r}; reserve on it by account (and feature), not by its id",
        Reason.CYCLE_BUDGET_NEEDS_ACCOUNT,
        field="account",
        budget_id=budget.budget_id,
    )


def _again(state: BatchState, existing: Hold, op: ReserveOp, budget: Budget) -> ReserveResult:
    """A retried Reserve: the first one's reservation, if it asked the same."""
    if not _same_request(existing, op):
        # The other reservation's request is not the caller's business: name nothing.
        raise AlreadyExists(
            f"idempotency_key {op.idempotency_key!r} was already used on budget "
            f"{budget.budget_id!r} for a reservation of another amount, shape, job, "
            "phase or set of budgets",
            Reason.KEY_REUSED,
            field="idempotency_key",
            budget_id=budget.budget_id,
        )
    earlier = state.charges.get((existing.reservation_id, RESERVE_CHARGE_KEY))
    most, lowered = calls.output_tokens_of(existing, budget, state.prices)
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
        charged=0 if earlier is None else earlier.charged,
        max_output_tokens=most,
        degraded=lowered,
    )


def _refused(
    amount: int,
    priced: Priced,
    reason: RefusalReason,
    remaining: int | None,
    message: str,
    *,
    retry_after: timedelta | None = None,
    refused_budget_id: str = "",
    policy: OveragePolicy = OveragePolicy.HARD,
) -> ReserveResult:
    return ReserveResult(
        admitted=False,
        reservation_id="",
        amount=amount,
        remaining=remaining,
        reason=reason,
        message=message,
        expires_at=None,
        source=priced.source,
        price_version=priced.price_version,
        retry_after=retry_after,
        refused_budget_id=refused_budget_id,
        policy=policy,
    )


def _new_hold(op: ReserveOp, budget: Budget, amount: int, priced: Priced, now: datetime) -> Hold:
    return Hold(
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
        also_budget_ids=op.also_budget_ids,
        phase=op.phase,
    )


def _admitted(hold: Hold, budget: Budget, admissions: list[rules.Admission]) -> ReserveResult:
    """What is left is the least any of the hold's budgets has left; a hold that went past a
    SOFT budget's limit says so."""
    over = [a for a in admissions if a.over_limit]
    left = [a.remaining for a in admissions if a.remaining is not None]
    return ReserveResult(
        admitted=True,
        reservation_id=hold.reservation_id,
        amount=hold.amount,
        remaining=min(left) if left else None,
        reason=RefusalReason.UNSPECIFIED,
        message=(over or admissions)[0].message,
        expires_at=hold.expires_at,
        source=hold.source,
        price_version=hold.price_version,
        policy=OveragePolicy.SOFT if over else budget.overage_policy,
        over_limit=bool(over),
    )


def _scope(state: BatchState, budget: Budget, op: ReserveOp) -> list[Budget]:
    """The Reserve's budgets, its own first, each found, of its unit and not archived."""
    scope = [budget]
    for budget_id in op.also_budget_ids:
        other = state.budgets.get(budget_id)
        if other is None:
            raise budget_not_found(budget_id, "also_budget_ids")
        if other.unit != budget.unit:
            raise FailedPrecondition(
                f"also_budget_ids: budget {budget_id!r} is in {other.unit!r}, "
                f"not {budget.unit!r} like {budget.budget_id!r}",
                Reason.UNIT_MISMATCH,
                field="also_budget_ids",
                budget_id=budget_id,
            )
        scope.append(other)
    for each in scope:
        if each.archived_at is not None:
            raise FailedPrecondition(
                f"budget {each.budget_id!r} is archived",
                Reason.BUDGET_ARCHIVED,
                budget_id=each.budget_id,
            )
    return scope


def _same_request(hold: Hold, op: ReserveOp) -> bool:
    """A retried Reserve asks what the first asked: the same amount, the same shape (its
    price may have moved since), or an estimate for the same job."""
    if hold.shape != op.shape or hold.job != op.job:
        return False
    if hold.dispatched != (op.charge is not None):
        # A Reserve with a charge made its hold dispatched at once; one without did not.
        return False
    if hold.also_budget_ids != op.also_budget_ids or hold.phase is not op.phase:
        return False
    if op.amount > 0:
        return hold.source is EstimateSource.CALLER and hold.amount == op.amount
    if op.shape is not None and not op.shape.names_model_only():
        return hold.source is EstimateSource.SHAPE
    return hold.source in ESTIMATED


def _renew(state: BatchState, decision: BatchDecision, op: RenewOp, now: datetime) -> Result:
    hold = hold_of(state, op.reservation_id, op.owner)
    require_live(state, decision, hold, now)
    hold.expires_at = rules.renewed_deadline(hold, now, op.lease)
    hold.lease = op.lease
    decision.changed_holds[hold.reservation_id] = hold
    return RenewResult(expires_at=hold.expires_at)


def expire_due(state: BatchState, now: datetime) -> BatchDecision:
    """The sweeper's rule: every live hold in state whose lease passed lapses. An
    undispatched one is closed (the job keeps what it charged, the rest returns to its
    budgets); a dispatched one goes into doubt, still held."""
    decision = BatchDecision()
    roll_due(state, decision, now)
    before = _counters(state)
    spent = _spent(state)
    for hold in state.holds_by_id.values():
        if rules.lease_passed(hold, now):
            lapse(state, decision, hold, now)
    _notice(state, decision, spent, now)
    _notice_doubted(decision, now)
    _assert_pairs(state, decision, before)
    return decision
