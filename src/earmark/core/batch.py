"""Group admission: the operations on one budget decided in arrival order, in memory.

The store loads the budget and the holds the batch names, this module decides every
operation against that state and says what to write; the store writes it all in the
same transaction. Each operation gets its own answer or its own error.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import assert_never

from earmark import limits
from earmark.core import admission as admit
from earmark.core import (
    amounts,
    bookkeeping,
    calls,
    notices,
    ratelimit,
    records,
    refusals,
    regions,
    rules,
    windows,
)
from earmark.core.amounts import Priced
from earmark.core.calls import RESERVE_CHARGE_KEY
from earmark.core.estimates import SampleKey
from earmark.core.model import (
    ESTIMATED,
    Budget,
    BudgetMode,
    EstimateSource,
    Hold,
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
    InvalidArgument,
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
    bookkeeping.roll_due(state, decision, now)
    before = bookkeeping.counters(state)
    spent = bookkeeping.spent(state)
    for op in ops:
        try:
            result = _decide_one(state, decision, op, now)
            decision.results.append(_in_unit(state, result))
        except EarmarkError as error:
            decision.results.append(error)
        # Each operation's own change of spend decides what it noticed, however the
        # operations were batched.
        bookkeeping.notice(state, decision, spent, now)
    bookkeeping.notice_doubted(decision, now)
    bookkeeping.assert_pairs(state, decision, before)
    return decision


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
    amount = amounts.held(priced)
    admit.require_counters_fit(scope, amount)
    leased = admit.share_leases(scope, amount, now + op.lease, now)
    if leased is not None:
        return replace(leased, source=priced.source, price_version=priced.price_version)
    ran = admit.run_limits(scope, amount, now)
    if isinstance(ran, ReserveResult):
        return replace(ran, source=priced.source, price_version=priced.price_version)
    would = admit.budget_rates(scope, amount, now)
    if isinstance(would, ReserveResult):
        return replace(would, source=priced.source, price_version=priced.price_version)
    would = ran or would
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
        priced, amount = degrade, amounts.held(degrade)
    admissions, observed, refusing = admit.admissions(scope, amount, op.phase)
    if refusing is not None:
        # All or nothing: the first budget without room refuses, and nothing is held.
        if window is not None:
            ratelimit.give_back(window)
        each, refusal = refusing
        # Counted on the budget that refused, and its period's first refusal noticed.
        decision.touched[each.budget_id] = each
        if refusals.count(each, now):
            decision.events.append(notices.refusing_event(each, amount, refusal.remaining, now))
        message = f"budget {each.budget_id!r}: {refusal.message}"
        return _refused(
            amount, priced, RefusalReason.INSUFFICIENT_BUDGET, refusal.remaining,
            message if len(scope) > 1 else refusal.message,
            refused_budget_id=each.budget_id, policy=refusal.policy,
        )  # fmt: skip
    would = would or observed
    hold, charged = _hold(state, decision, op, scope, (amount, priced), admissions, now)
    return replace(
        _admitted(hold, budget, admissions),
        charged=charged,
        max_output_tokens=priced.max_output_tokens,
        degraded=degrade is not None,
        would_refuse=None if would is None else would.reason,
        would_refuse_budget_id="" if would is None else would.budget_id,
    )


def _hold(
    state: BatchState,
    decision: BatchDecision,
    op: ReserveOp,
    scope: list[Budget],
    price: tuple[int, Priced],
    admissions: list[rules.Admission],
    now: datetime,
) -> tuple[Hold, int]:
    """Holds amount on every budget of scope, counted in their rate windows, and charges
    the Reserve's charge on it; the new hold and what the charge charged."""
    amount, priced = price
    for each in scope:
        if windows.limited(each):
            windows.count(each, amount)
            decision.touched[each.budget_id] = each
        # Counted on every budget (the hold touches each anyway), so that a max_admissions
        # set later counts what the period admitted before it.
        each.admissions += 1
    hold = _new_hold(op, scope[0], amount, priced, now)
    if any(each.period_no for each in scope):
        hold.periods = tuple(each.period_no for each in scope)
    state.holds_by_key[(hold.owner, hold.idempotency_key)] = hold
    state.holds_by_id[hold.reservation_id] = hold
    decision.new_holds.append(hold)
    move(state, decision, hold, LedgerKind.HOLD, amount, 0, now, opened=1)
    for each, admitted in zip(scope, admissions, strict=True):
        if admitted.over_limit:
            flag_overage(decision, each, now)
    if op.charge is None:
        return hold, 0
    prompt = ChargeOp(hold.reservation_id, RESERVE_CHARGE_KEY, 0, op.owner, op.charge)
    result = charge(state, decision, prompt, now)
    assert isinstance(result, ChargeResult)
    # Made dispatched, the call is sent now: its record says so.
    records.sent(decision.calls, hold, op.charge, now)
    return hold, result.charged


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
    if op.labels:
        # A label once set is kept: a Renew adds labels, and naming one again with its own
        # value changes nothing, but it cannot rewrite one (a background response's id is
        # the evidence earmark reconcile resolves the hold by). INVALID_ARGUMENT, as for a
        # label past the bounds: the metered client then stops sending it with its renewals.
        changed = sorted(k for k, v in op.labels.items() if hold.labels.get(k, v) != v)
        if changed:
            raise InvalidArgument(
                "labels",
                f"the hold has label {changed[0]!r} already, with another value; a Renew adds "
                "labels and changes none",
            )
        labels = {**hold.labels, **op.labels}
        if len(labels) > limits.label_count_max:
            raise InvalidArgument(
                "labels",
                f"the hold would have {len(labels)} labels; at most {limits.label_count_max}",
            )
        hold.labels = labels
    renewed = rules.renewed_deadline(hold, now, op.lease)
    # In a region (issue 48): no further than its shares' leases allow, never shorter.
    shares = [state.budgets[b].share_until for b in hold.budget_ids() if b in state.budgets]
    caps = [regions.renew_cap(until) for until in shares if until is not None]
    hold.expires_at = max(hold.expires_at, min([renewed, *caps]))
    hold.lease = op.lease
    decision.changed_holds[hold.reservation_id] = hold
    return RenewResult(expires_at=hold.expires_at)


def expire_due(state: BatchState, now: datetime) -> BatchDecision:
    """The sweeper's rule: every live hold in state whose lease passed lapses. An
    undispatched one is closed (the job keeps what it charged, the rest returns to its
    budgets); a dispatched one goes into doubt, still held."""
    decision = BatchDecision()
    bookkeeping.roll_due(state, decision, now)
    before = bookkeeping.counters(state)
    spent = bookkeeping.spent(state)
    # The earliest lease first, ties by id: the store and the model list the same holds in
    # different orders, and each lapse's notice is written in this one.
    for hold in sorted(state.holds_by_id.values(), key=lambda h: (h.expires_at, h.reservation_id)):
        if rules.lease_passed(hold, now):
            lapse(state, decision, hold, now)
    bookkeeping.notice(state, decision, spent, now)
    bookkeeping.notice_doubted(decision, now)
    bookkeeping.assert_pairs(state, decision, before)
    return decision
