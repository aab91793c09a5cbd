"""Whether a Reserve's budgets admit its hold: their counters' room, their run limits
(issue 47: closes_at, max_admissions, max_open_holds), their rate windows (core.windows),
their limits, and shadow mode (an observing budget admits what an
enforcing one would refuse, and says so)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from earmark.core import regions, rules, windows
from earmark.core.model import Budget, BudgetMode, Phase, RefusalReason
from earmark.core.ops import ReserveResult
from earmark.errors import FailedPrecondition, Reason


def require_counters_fit(scope: list[Budget], amount: int) -> None:
    for each in scope:
        if not rules.counters_fit(each, 0, amount):
            raise FailedPrecondition(
                f"budget {each.budget_id!r}: a hold of {amount} would carry its counters "
                "past 2^63-1; settle holds or start a new budget",
                Reason.COUNTER_OVERFLOW,
                budget_id=each.budget_id,
            )


def admissions(
    scope: list[Budget], amount: int, phase: Phase
) -> tuple[list[rules.Admission], Would | None, tuple[Budget, rules.Admission] | None]:
    """Each budget's admission of a hold of amount; what the first observing budget
    without room would have refused; and the first enforcing budget without room, with
    its refusal (then the Reserve is refused)."""
    admissions: list[rules.Admission] = []
    would = None
    for each in scope:
        admission = rules.admit(each, amount, phase)
        if not admission.admitted and each.mode is BudgetMode.OBSERVE:
            # Shadow mode: admitted, and told what an enforcing budget would have said.
            would = would or Would(RefusalReason.INSUFFICIENT_BUDGET, each.budget_id)
            cap = each.cap(phase)
            admission = rules.Admission(
                admitted=True,
                remaining=admission.remaining,
                message=f"admitted in OBSERVE mode; ENFORCE would refuse: {admission.message}",
                over_limit=cap is not None and each.used + each.held + amount > cap,
                policy=admission.policy,
            )
        if not admission.admitted:
            return admissions, would, (each, admission)
        admissions.append(admission)
    return admissions, would, None


@dataclass(frozen=True, slots=True)
class Would:
    """What an OBSERVE budget would have refused a Reserve for, and which budget."""

    reason: RefusalReason
    budget_id: str


def budget_rates(scope: list[Budget], amount: int, now: datetime) -> ReserveResult | Would | None:
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
            would = would or Would(RefusalReason.RATE_LIMITED, each.budget_id)
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


def run_limit(budget: Budget, now: datetime) -> tuple[RefusalReason, str] | None:
    """Why budget's run limits refuse one more admission at now, and what to say; None when
    they admit it. Checked in this order: closed, admissions spent, holds open."""
    if budget.closes_at is not None and now >= budget.closes_at:
        return RefusalReason.CLOSED, f"it closed at {budget.closes_at.isoformat()}"
    if budget.max_admissions is not None and budget.admissions >= budget.max_admissions:
        within = " this period" if budget.period_end is not None else ""
        return (
            RefusalReason.ADMISSIONS_SPENT,
            f"it has admitted {budget.admissions} Reserves{within}; "
            f"max_admissions is {budget.max_admissions}",
        )
    # Holds reserved before the period began count until they close, as any other.
    open_holds = budget.open_reservations + budget.open_earlier
    if budget.max_open_holds is not None and open_holds >= budget.max_open_holds:
        return (
            RefusalReason.TOO_MANY_OPEN,
            f"it has {open_holds} holds open; max_open_holds is {budget.max_open_holds}",
        )
    return None


_SHARE_REASONS = {
    regions.RegionRefusal.SHARE_LEASE_ENDED: (
        RefusalReason.SHARE_LEASE_ENDED,
        "this region's share of it has no lease left: the region has not reached the "
        "budget's home for longer than the lease",
    ),
    regions.RegionRefusal.HOLD_OUTLIVES_SHARE: (
        RefusalReason.HOLD_OUTLIVES_SHARE,
        "this region's share of it is leased for less than the hold's lease and the settle "
        "grace; ask for a shorter lease, or again once the share is renewed",
    ),
}


def share_leases(
    scope: list[Budget], amount: int, until: datetime, now: datetime
) -> ReserveResult | None:
    """In a region (issue 48): a refusal naming the first budget that is a share whose
    lease the hold (ending at until) would outlive, whatever its mode: past its lease a
    share is no longer the region's to admit from."""
    for each in scope:
        if each.share_until is None:
            continue
        refusal = regions.lease_refusal(each.share_until, until, now)
        if refusal is None or refusal is regions.RegionRefusal.SHARE_SPENT:
            continue
        reason, message = _SHARE_REASONS[refusal]
        return ReserveResult(
            admitted=False,
            reservation_id="",
            amount=amount,
            remaining=each.remaining(),
            reason=reason,
            message=f"budget {each.budget_id!r}: {message}",
            expires_at=None,
            refused_budget_id=each.budget_id,
            policy=each.overage_policy,
        )
    return None


def run_limits(scope: list[Budget], amount: int, now: datetime) -> ReserveResult | Would | None:
    """The run limits of the Reserve's budgets: a refusal naming the first enforcing budget
    whose limits refuse, else what the first observing one would have refused, else None.
    Nothing is counted here: an admission counts on every budget (core.batch)."""
    would = None
    for each in scope:
        refusal = run_limit(each, now)
        if refusal is None:
            continue
        reason, message = refusal
        if each.mode is BudgetMode.OBSERVE:
            would = would or Would(reason, each.budget_id)
            continue
        return ReserveResult(
            admitted=False,
            reservation_id="",
            amount=amount,
            remaining=each.remaining(),
            reason=reason,
            message=f"budget {each.budget_id!r}: {message}",
            expires_at=None,
            refused_budget_id=each.budget_id,
            policy=each.overage_policy,
        )
    return would
